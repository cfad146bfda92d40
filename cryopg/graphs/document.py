"""A graph document (cryosleep-graph/v1) checked and compiled at submit.

Compiling splits it in two: the clear structure the interpreter decides with (node ids,
types, edges, compiled if / fan_out / concurrency / output, retry), stored as
runs.graph; and the node configs with their expressions compiled, sealed as the run's
source. Every error is one line naming the node and the field; nothing is stored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from cryopg.graphs import flow, gates, node_keys, schemas
from cryopg.graphs.artifacts import check_links as check_artifact_links
from cryopg.graphs.checks import (  # noqa: F401 - re-exported for the callers of old
    STATE_OPS,
    WRITE_OPS,
    ApprovalValidator,
    GraphError,
    check_patterns,
    find_cycle,
    need,
    re2_compiled,
    schema_patterns,
    seconds,
    string_or_expr,
)
from cryopg.graphs.expr import ExprError, parse, parse_template, paths
from cryopg.graphs.nodes import TYPES
from cryopg.graphs.nodes.approval import policy as approval_policy
from cryopg.jsonlimits import JsonLimitError, loads

VERSION = "cryosleep-graph/v1"
NODE_VERSION = "cryosleep-node/v1"
NODE_TYPES = frozenset({"state", "shell", "code", "script", "http", "connector", "wait",
                        "approval", "workflow"})
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# The documented bounds of a graph document (docs/graphs.md): a larger one is refused with
# a one-line 400 before anything is stored.
MAX_NODES = 10_000
MAX_EDGES = 50_000
MAX_SOURCE = 8 << 20  # bytes of the document's text


@dataclasses.dataclass(frozen=True)
class Compiled:
    structure: dict[str, Any]  # clear: what SQL decides with
    document: dict[str, Any]  # sealed: node configs, compiled

    def source(self) -> str:
        return json.dumps(self.document, separators=(",", ":"))


def is_graph(source: str, filename: str | None = None) -> bool:
    """Whether a submitted file is meant as a graph document rather than a script: a
    `.json` file, or a JSON object whose version names a cryosleep document. Either is
    compiled, so one that is not a valid graph (broken JSON, an unknown version) is
    refused in one line instead of running as a script."""
    if filename and filename.lower().endswith(".json"):
        return True
    text = source.lstrip()
    if not text.startswith("{"):
        return False
    try:
        doc = json.loads(text)
    except RecursionError:  # a graph or not, it cannot be read: load says so clearly
        return True
    except ValueError:
        return False
    version = doc.get("version") if isinstance(doc, dict) else None
    return isinstance(version, str) and version.startswith("cryosleep")


def load(source: str) -> dict[str, Any]:
    """The document, read as JSON within cryopg's limits (jsonlimits.py: depth, integer
    range, no NUL), so compiling never meets what SQL or sealing would refuse."""
    if len(source) > MAX_SOURCE:
        raise GraphError(f"the graph: a document is at most {MAX_SOURCE >> 20} MiB")
    try:
        doc = loads(source, "the graph")
    except JsonLimitError as exc:
        raise GraphError(str(exc) if str(exc).startswith("the graph") else
                         f"the graph: {exc}") from None
    if not isinstance(doc, dict):
        raise GraphError("a graph document is a JSON object")
    if doc.get("version") == NODE_VERSION:  # a single node runs as a one-node graph
        node = {k: v for k, v in doc.items() if k != "version"}
        # Named for its type, so a failure reads `node shell failed`.
        kind = node.get("type")
        node.setdefault("id", kind if isinstance(kind, str) and _ID.match(kind) else "node")
        doc = {"version": VERSION, "nodes": [node], "edges": []}
    return doc


def compile_graph(doc: dict[str, Any]) -> Compiled:
    version = doc.get("version")
    if version != VERSION:
        if version is None:
            raise GraphError(f"version: a graph document says \"version\": \"{VERSION}\"")
        hint = (" (a pipeline is a YAML file: name it .yaml)"
                if str(version).startswith("cryosleep/pipeline") else "")
        raise GraphError(f"version: {json.dumps(version)[:80]} is not a version cryopg runs; "
                         f"use {VERSION} (or {NODE_VERSION} for one node){hint}")
    unknown = set(doc) - {"version", "nodes", "edges", "concurrency", "output", "name",
                          "if", "cancel_on", "on", "on_failure",
                          "input_schema", "timeout"}
    if unknown:
        raise GraphError(f"unknown top-level key {sorted(unknown)[0]!r}")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise GraphError("nodes: a graph needs a list of at least one node")
    if len(nodes) > MAX_NODES:
        raise GraphError(f"nodes: a graph has at most {MAX_NODES} nodes")
    ids: list[str] = []
    seen: set[str] = set()  # (a list's `in` made 10,000 nodes cost 4 s)
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise GraphError(f"nodes[{i}]: a node is an object")
        nid = n.get("id")
        if not isinstance(nid, str) or not _ID.match(nid):
            raise GraphError(f"nodes[{i}]: id must be 1-64 letters, digits, _ or - (got {nid!r})")
        if nid in seen:
            raise GraphError(f"node {nid}: id is used twice")
        ids.append(nid)
        seen.add(nid)
    known = frozenset(ids)
    deps: dict[str, list[str]] = {i: [] for i in ids}
    edges = doc.get("edges", [])
    if not isinstance(edges, list):
        raise GraphError("edges: must be a list of {from, to}")
    if len(edges) > MAX_EDGES:
        raise GraphError(f"edges: a graph has at most {MAX_EDGES} edges")
    for e in edges:
        if not isinstance(e, dict) or set(e) != {"from", "to"}:
            raise GraphError(f"edges: {json.dumps(e)[:60]} is not {{\"from\", \"to\"}}")
        for end in ("from", "to"):
            if e[end] not in known:
                raise GraphError(f"edges: {end} {e[end]!r} names no node")
        if e["from"] not in deps[e["to"]]:
            deps[e["to"]].append(e["from"])
    _check_acyclic(ids, deps)
    handlers = _on_failure(doc.get("on_failure"), known) if "on_failure" in doc else set()
    structure_nodes = []
    configs = {}
    for n in nodes:
        s, c = _compile_node(n, known, deps[n["id"]])
        if n["id"] in handlers:
            s["on_failure"] = True
        structure_nodes.append(s)
        configs[n["id"]] = c
    check_artifact_links(nodes, deps)
    structure: dict[str, Any] = {"nodes": structure_nodes}
    try:
        if "concurrency" in doc:
            group, limits = gates.concurrency(doc["concurrency"], "graph")
            structure["concurrency"] = _identifier(group, known)
            structure.update(limits)
        if "output" in doc:
            out = doc["output"]
            if not isinstance(out, dict) or set(out) != {"$expr"}:
                raise GraphError('output: must be {"$expr": "..."}')
            structure["output"] = parse(out["$expr"], known)
        if "if" in doc:  # decided before a triggered run exists, so it reads trigger/input only
            structure["if"] = parse(doc["if"], frozenset())
            if any(p[0] not in ("trigger", "input") for p in paths(structure["if"])):
                raise ExprError("the top-level if reads trigger and input only")
    except ExprError as exc:
        raise GraphError(f"graph: {exc}") from None
    structure.update(_trigger_keys(doc))
    if "timeout" in doc:  # the run's own: wall time from submit (79_timeouts.sql)
        structure["timeout"] = timeout(doc["timeout"], "timeout")
    if "input_schema" in doc:  # the start form's fields; the server checks inputs by it
        structure["input_schema"] = _input_schema(doc["input_schema"])
    return Compiled(structure, {"version": VERSION, "configs": configs})


_EVENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def _names(value: Any, where: str, pattern: re.Pattern[str] | None) -> list[str]:
    """One text or a list of them, as a list."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) for v in items):
        raise GraphError(f"{where}: must be a text or a non-empty list of texts")
    for v in items:
        if pattern is not None and not pattern.match(v):
            raise GraphError(f"{where}: {v!r} is not a valid name")
    return items


def _trigger_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """cancel_on and on, clear in the structure: SQL reads them (publish_event cancels,
    workflow put registers schedules, webhooks and handlers). Cron texts are checked by
    the schedule code, which owns the cron library."""
    out: dict[str, Any] = {}
    if "cancel_on" in doc:
        c = doc["cancel_on"]
        if (not isinstance(c, dict) or "event" not in c or set(c) - {"event", "tainted"}
                or not isinstance(c.get("tainted", False), bool)):
            raise GraphError('cancel_on: must be {"event": NAME} (and "tainted": true to be '
                             "cancelled by untrusted runs' events too)")
        out["cancel_on"] = {"event": _names(c["event"], "cancel_on.event", _EVENT_NAME)[0]}
        if c.get("tainted"):  # opted in by name: docs/security/trust.md
            out["cancel_on"]["tainted"] = True
    if "on" in doc:
        on = doc["on"]
        if not isinstance(on, dict) or not on or set(on) - {"schedule", "webhook", "event"}:
            raise GraphError("on: must be an object with schedule, webhook and/or event")
        out["on"] = {
            k: _names(v, f"on.{k}", None if k == "schedule" else _EVENT_NAME)
            for k, v in on.items()}
    return out


def _on_failure(value: Any, known: frozenset[str]) -> set[str]:
    """The nodes of the graph's failure branch: they run only when the run is failing
    (after what they depend on has ended), and are skipped when it succeeds."""
    ids = [value] if isinstance(value, str) else value
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise GraphError("on_failure: a node id, or a list of them")
    for i in ids:
        if i not in known:
            raise GraphError(f"on_failure: {i!r} names no node")
    return set(ids)


def _check_acyclic(ids: list[str], deps: dict[str, list[str]]) -> None:
    cycle = find_cycle(ids, deps)
    if cycle:
        raise GraphError(f"node {cycle[0]}: edges form a cycle ({' -> '.join(cycle)})")


def _template(value: Any, known: frozenset[str]) -> dict[str, Any]:
    """A string field that may be a template: plain text, {"$template": t} or {"$expr": e}."""
    if isinstance(value, dict) and set(value) == {"$template"}:
        return parse_template(value["$template"], known)
    if isinstance(value, dict) and set(value) == {"$expr"}:
        return {"tpl": [parse(value["$expr"], known)]}
    if isinstance(value, str):
        return parse_template(value, known)
    raise ExprError("must be a string or a {\"$template\": ...}")


# Names the engine keeps in the clear as identities (a concurrency group, a state cell's
# key and entity) render their holes as text, exactly as any template does: a graph's
# `seen-{{ input.id }}` is the cell a script names `seen-1042`, and `deploy-{{ input.env }}`
# the lock a script takes as `deploy-prod` (issue 39 item 5; the spec: one cell and one
# lock whichever surface reaches it). Workflows compiled before kept {"op": "digest"}
# holes (issue 20); cryo._digest still evaluates them, and DIGEST_PREFIX / digest_part
# name what those rendered.
DIGEST_PREFIX = "h_"


def digest_part(value: Any) -> str:
    """What a hole of value `value` rendered as in a name compiled before issue 39 (its
    digest): the twin of cryo._digest (a test keeps the two equal)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    return DIGEST_PREFIX + hashlib.sha256(f"cryopg-digest/v1|{text}".encode()).hexdigest()[:24]


def _identifier(value: Any, known: frozenset[str]) -> dict[str, Any]:
    """A template for a name stored in the clear (a group, a cell's key or entity)."""
    return _template(value, known)


def _compile_value(value: Any, known: frozenset[str]) -> Any:
    """A config value with every $expr / $template compiled."""
    if isinstance(value, dict):
        if "$expr" in value or "$template" in value:
            if len(value) != 1:
                raise ExprError("$expr and $template stand alone in their object")
            if "$expr" in value:
                return {"$expr": parse(value["$expr"], known)}
            return {"$template": parse_template(value["$template"], known)}
        return {k: _compile_value(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [_compile_value(v, known) for v in value]
    return value


def _compile_node(n: dict[str, Any], known: frozenset[str],
                  deps: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    nid = n["id"]
    field = "id"
    try:
        node_keys.check(nid, n)  # every key beside config, against its schema
        ntype = n.get("type")
        if ntype not in NODE_TYPES:
            raise GraphError(f"node {nid}: type must be one of {', '.join(sorted(NODE_TYPES))}")
        config = n.get("config", {})
        if not isinstance(config, dict):
            raise GraphError(f"node {nid}: config must be an object")
        s: dict[str, Any] = {"id": nid, "type": ntype, "deps": deps}
        field = "if"
        if "if" in n:
            s["if"] = parse(n["if"], known)
        field = "concurrency"
        if "concurrency" in n:
            group, limits = gates.concurrency(n["concurrency"], f"node {nid}")
            s["concurrency"] = _identifier(group, known)
            s.update(limits)
        for flag in ("continue_on_error", "always"):
            if flag in n:
                if not isinstance(n[flag], bool):
                    raise GraphError(f"node {nid}: {flag} must be true or false")
                if n[flag]:
                    s[flag] = True
        field = "retry"
        if "retry" in n:
            s["retry"] = _retry(n["retry"], nid)
        field = "timeout"
        if "timeout" in n:
            if ntype not in TIMED_TYPES:
                raise GraphError(f"node {nid}: timeout bounds a node that runs a job or a child "
                                 f"run ({', '.join(sorted(TIMED_TYPES))}); a {ntype} node has "
                                 "none" + (" (its config.timeout bounds the wait)"
                                           if ntype == "wait" else ""))
            s["timeout"] = timeout(n["timeout"], f"node {nid}: timeout")
        field = "fan_out"
        if "fan_out" in n:
            fo = n["fan_out"]
            if not isinstance(fo, dict) or "items" not in fo or set(fo) - {"items", "max_parallel"}:
                raise GraphError(f"node {nid}: fan_out is {{\"items\": ..., \"max_parallel\": n}}")
            items = fo["items"]
            s["fan_out"] = parse(items["$expr"] if isinstance(items, dict) and "$expr" in items
                                 else items, known)
            if "max_parallel" in fo:
                mp = fo["max_parallel"]
                if not isinstance(mp, int) or isinstance(mp, bool) or mp < 1:
                    raise GraphError(f"node {nid}: fan_out.max_parallel must be an integer >= 1")
                s["max_parallel"] = mp
        field = "config"
        _check_config(nid, ntype, config, known)
        compiled = _compile_value(config, known)
        if n.keys() & flow.FLOW_KEYS:  # loop, stop_if, cache (cryopg/graphs/flow.py)
            field = sorted(n.keys() & flow.FLOW_KEYS)[0]
            flow_fields, flow_config = flow.compile_flow(n, known)
            s.update(flow_fields)
            compiled.update(flow_config)
            field = "config"
        if ntype == "http" and config.get("secrets"):  # names, in the clear, for the grant
            s["secrets"] = list(dict.fromkeys(config["secrets"]))
        if ntype == "approval" and (policy := approval_policy(nid, config)):
            s["approval"] = policy  # who may answer and how many: the database enforces it
        if ntype == "connector":  # its name, in the clear: the grant gives its secret
            s["connection"] = config["connection"]
    except ExprError as exc:
        raise GraphError(f"node {nid}: {field}: {exc}") from None
    return s, compiled


# The node types whose node-level timeout means something: each attempt's job (or child
# run) fails with exit code 124 when it passes. A wait node has its config.timeout; an
# approval's timeout is its own (graphgate); a state node runs in one transaction.
TIMED_TYPES = frozenset({"shell", "script", "code", "http", "connector", "workflow"})
RETRY_KEYS = ("attempts", "backoff", "delay", "max_delay", "on_exit", "retry_if")


def timeout(value: Any, where: str) -> float:
    """A timeout: a duration above zero, at most 366 days (what SQL accepts)."""
    secs = seconds(value, where)
    if not 0 < secs <= 366 * 86400:
        raise GraphError(f"{where}: a timeout is more than 0 and at most 366 days")
    return secs


def _retry(r: Any, nid: str) -> dict[str, Any]:
    """{attempts, backoff, on_exit} as before (backoff a constant wait), or with backoff
    "exponential" (or "constant") and delay, max_delay; retry_if an expression over
    failure.exit_code, failure.error and failure.status (an http node's status)."""
    if not isinstance(r, dict) or set(r) - set(RETRY_KEYS):
        raise GraphError(f"node {nid}: retry is {{{', '.join(map(json.dumps, RETRY_KEYS))}}}")
    attempts = r.get("attempts", 1)
    if not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= 100:
        raise GraphError(f"node {nid}: retry.attempts must be an integer from 1 to 100")
    backoff = r.get("backoff", 0)
    mode = backoff if backoff in ("exponential", "constant") else None
    if mode is None and "delay" in r:
        raise GraphError(f"node {nid}: retry.delay goes with backoff: exponential or constant")
    first = (seconds(r.get("delay", 1 if mode == "exponential" else 0), f"node {nid}: retry.delay")
             if mode else seconds(backoff, f"node {nid}: retry.backoff"))
    out: dict[str, Any] = {"attempts": attempts, "backoff": first}
    if mode == "exponential":
        out["factor"] = 2
    if "max_delay" in r:
        out["max_delay"] = seconds(r["max_delay"], f"node {nid}: retry.max_delay")
    if "retry_if" in r:
        try:
            out["retry_if"] = parse(r["retry_if"], frozenset(), frozenset({"failure"}))
        except ExprError as exc:
            raise GraphError(f"node {nid}: retry.retry_if: {exc}") from None
    if "on_exit" in r:
        codes = r["on_exit"]
        if not isinstance(codes, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in codes):
            raise GraphError(f"node {nid}: retry.on_exit must be a list of exit codes")
        out["on_exit"] = codes
    return out


def _check_config(nid: str, ntype: str, c: dict[str, Any], known: frozenset[str]) -> None:
    """A node's config against its type in the registry (cryopg/graphs/nodes/): no key
    its schema does not list (named, so a typo such as `evn` is not ignored), then the
    type's own checks."""
    node = TYPES[ntype]
    unknown = set(c) - node.keys
    if unknown:
        raise GraphError(f"node {nid}: config has unknown key {sorted(unknown)[0]!r} (a {ntype} "
                         f"node reads {', '.join(sorted(node.keys))})")
    node.check(nid, c)


def _input_schema(schema: Any) -> dict[str, Any]:
    """A graph's declared input: a JSON Schema object, its patterns runnable on RE2."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise GraphError('input_schema: must be a JSON Schema with "type": "object"')
    schemas.check(schema, "input_schema")
    return schema


