"""Artifacts as node keys: `artifacts` (files a shell or script node uploads after its
command succeeds) and `artifacts_from` (nodes whose artifacts it downloads before).

The node's job is wrapped: `cryopg artifact get` lines before the user's command and
`cryopg artifact put` lines after it, so the bytes move through the agent socket (in a
sandbox too) and never through a graph turn. The job puts each file as its own run's
artifact; when the job has succeeded the driver names the same blob `{node}/{name}` in
the graph run's scope (an index row, no bytes), so the artifacts are collected with the
graph run and a later node downloads them with `--run {graph run}`.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from typing import Any

from cryopg.graphs.checks import GraphError

ARTIFACT_NODES = frozenset({"shell", "script"})
MAX_ARTIFACTS = 50
MAX_NAME = 128  # printable; with `{node}/` in front it stays within the index's 200
MAX_PATH = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# The config keys, in the node schemas (so the canvas editor and docs/graphs.md list them).
ARTIFACTS_SCHEMA = {
    "type": "array", "maxItems": MAX_ARTIFACTS,
    "description": "files uploaded after the command succeeds, kept with the graph run",
    "items": {"anyOf": [
        {"type": "string", "minLength": 1, "maxLength": MAX_PATH},
        {"type": "object", "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
            "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH}},
         "required": ["path"], "additionalProperties": False}]}}
ARTIFACTS_FROM_SCHEMA = {
    "type": "array", "items": {"type": "string"},
    "description": "upstream nodes whose artifacts are downloaded before the command"}


def declared(nid: str, value: Any) -> list[tuple[str, str]]:
    """(name, path) of each declared artifact, or a GraphError naming the node and key.
    A bare path is also its name; a path is relative and stays in the working directory."""
    where = f"node {nid}: config.artifacts"
    if not isinstance(value, list) or len(value) > MAX_ARTIFACTS:
        raise GraphError(f"{where} must be a list of at most {MAX_ARTIFACTS} paths or "
                         "{name, path}")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            name, path = item, item
        elif isinstance(item, dict) and "path" in item and not set(item) - {"name", "path"}:
            path = item["path"]
            name = item.get("name", path)
        else:
            raise GraphError(f"{where}[{i}]: an artifact is a path or {{name, path}}")
        _check_path(f"{where}[{i}].path", path)
        if not isinstance(name, str) or not name or len(name) > MAX_NAME or _CONTROL.search(
                name):
            raise GraphError(f"{where}[{i}].name: must be 1 to {MAX_NAME} printable characters")
        if any(name == n for n, _ in out):
            raise GraphError(f"{where}[{i}]: the name {name!r} is declared twice")
        out.append((name, path))
    return out


def _check_path(where: str, path: Any) -> None:
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or _CONTROL.search(path):
        raise GraphError(f"{where}: must be a path of 1 to {MAX_PATH} printable characters")
    if path.startswith(("/", "~")):
        raise GraphError(f"{where}: {path!r} must be relative to the job's working directory")
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../") or norm == "." or path.endswith("/"):
        raise GraphError(f"{where}: {path!r} must name a file inside the working directory")


def check(nid: str, c: dict[str, Any]) -> None:
    """The node's own keys (what its type's check adds): shapes only."""
    if "artifacts" in c:
        declared(nid, c["artifacts"])
    if "artifacts_from" in c:
        got = c["artifacts_from"]
        if not isinstance(got, list) or not all(isinstance(n, str) for n in got):
            raise GraphError(f"node {nid}: config.artifacts_from must be a list of node ids")


def check_links(nodes: list[dict[str, Any]], deps: dict[str, list[str]]) -> None:
    """Across nodes: artifacts_from names a node this one depends on (an edge from it)
    that declares artifacts; a node that uploads does not fan out (one set of files)."""
    by_id = {n["id"]: n for n in nodes}
    for n in nodes:
        c = n.get("config") or {}
        if "artifacts" in c and "fan_out" in n:
            raise GraphError(f"node {n['id']}: config.artifacts: a node with fan_out cannot "
                             "upload artifacts (its instances would overwrite each other)")
        for up in c.get("artifacts_from", []):
            if up not in deps[n["id"]]:
                raise GraphError(f"node {n['id']}: config.artifacts_from: {up!r} is not a "
                                 "node it depends on (add an edge from it)")
            if "artifacts" not in (by_id[up].get("config") or {}):
                raise GraphError(f"node {n['id']}: config.artifacts_from: node {up} declares "
                                 "no artifacts")


def graph_name(node: str, name: str) -> str:
    """The name an artifact of `node` has in the graph run's scope."""
    return f"{node}/{name}"


def wrap(c: dict[str, Any], configs: dict[str, Any], graph_run: str, command: str) -> str:
    """Bash lines around `command` (itself bash, run in a subshell so an `exit` in it
    still reaches the uploads' check): downloads first, uploads after success."""
    lines = ["set -eu"]
    for up in c.get("artifacts_from", []):
        for name, path in declared(up, (configs.get(up) or {}).get("artifacts", [])):
            lines.append(f"cryopg artifact get {shlex.quote(graph_name(up, name))} "
                         f"{shlex.quote(path)} --run {shlex.quote(graph_run)} >/dev/null")
    lines += ["(", command.rstrip("\n"), ")"]
    for name, path in declared("", c.get("artifacts", [])):
        q = shlex.quote(path)
        why = shlex.quote(f"artifacts: {path} was not written by the job (no such file)")
        lines.append(f"if [ ! -f {q} ]; then echo {why} >&2; exit 1; fi")
        lines.append(f"cryopg artifact put {shlex.quote(name)} {q} >/dev/null")
    return "\n".join(lines) + "\n"


# What the agent runs a script with when no interpreter is given (agent/runner.py); the
# compiled languages (.ts, .go, .rs) need the agent's toolchains and are not wrapped.
_BY_SUFFIX = {".py": "python3", ".js": "node", ".mjs": "node", ".cjs": "node",
              ".sh": "bash -eu", ".bash": "bash -eu", "": "bash -eu"}


def script_command(filename: str, interpreter: str | None, source: str) -> str:
    """Bash that writes a script node's source to a private file and runs it as the agent
    would have; ValueError (the node fails with it) for a language it cannot run so."""
    program = interpreter.strip() if interpreter and interpreter.strip() else None
    if program is None:
        program = _BY_SUFFIX.get(posixpath.splitext(filename)[1].lower())
        if program is None:
            raise ValueError(f"artifacts on a script node run .py, .js or bash scripts (or "
                             f"give an interpreter), not {filename}")
    base = posixpath.basename(filename) or "script"
    end = "CRYO_NODE_" + hashlib.sha256(source.encode()).hexdigest()[:16]
    return "\n".join([
        'cryo_node_dir="$(mktemp -d)"', "trap 'rm -rf \"$cryo_node_dir\"' EXIT",
        f"cat > \"$cryo_node_dir\"/{shlex.quote(base)} <<'{end}'", source.rstrip("\n"), end,
        f"{program} \"$cryo_node_dir\"/{shlex.quote(base)}"])


def moves(c: dict[str, Any]) -> bool:
    return bool(c.get("artifacts") or c.get("artifacts_from"))
