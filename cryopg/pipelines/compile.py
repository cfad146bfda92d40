"""A whole pipeline: its top-level keys, its jobs and their `needs`, checked here with
errors in the pipeline's own words (`job deploy: needs: 'buidl' names no job`), then
compiled by the graph tier. Nothing here touches a database: a refused file stores
nothing because nothing gets that far.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from cryopg.graphs.checks import find_cycle
from cryopg.graphs.document import VERSION as GRAPH_VERSION
from cryopg.graphs.document import Compiled, GraphError, compile_graph
from cryopg.graphs.expr import ExprError, parse, parse_template, paths
from cryopg.pipelines.jobs import KINDS, JobError, env_map, node_of
from cryopg.pipelines.yaml_load import YamlError, load_yaml

VERSION = "cryosleep/pipeline/v1"
TOP_KEYS = frozenset({"version", "name", "if", "concurrency", "cancel_on", "env", "on", "jobs",
                      "output", "on_failure",
                      "input_schema", "timeout"})
SUFFIXES = (".yaml", ".yml")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_VERSION_LINE = re.compile(r"^version:\s*['\"]?cryosleep/pipeline/")


class PipelineError(ValueError):
    """A pipeline that cannot run, said in one line that names the job and the key."""


def is_pipeline(source: str, filename: str | None = None) -> bool:
    """A .yaml/.yml file, or a file whose first line (after blank lines, comments and a
    `---`) is `version: cryosleep/pipeline/...`. Only the first line counts, so a shell
    script that writes a pipeline with a heredoc stays a script."""
    if filename and filename.lower().endswith(SUFFIXES):
        return True
    for line in source.splitlines():
        text = line.strip()
        if text and not text.startswith("#") and text != "---":
            return bool(_VERSION_LINE.match(line))
    return False


def compile_pipeline(source: str) -> Compiled:
    """The compiled graph of a pipeline file. The structure carries "pipeline" (the
    version) so a stored workflow or a run can say it came from one; the sealed document
    keeps the YAML text for `workflow get --source`."""
    graph = to_graph(load(source))
    try:
        compiled = compile_graph(graph)
    except GraphError as exc:
        raise PipelineError(_job_words(str(exc), graph)) from None
    return dataclasses.replace(
        compiled, structure={**compiled.structure, "pipeline": VERSION},
        document={**compiled.document, "pipeline_source": source})


def load(source: str) -> dict[str, Any]:
    try:
        doc = load_yaml(source)
    except YamlError as exc:
        raise PipelineError(str(exc)) from None
    if not isinstance(doc, dict):
        raise PipelineError("a pipeline is a YAML mapping with version and jobs")
    return doc


def to_graph(doc: dict[str, Any]) -> dict[str, Any]:
    """The cryosleep-graph/v1 document of a pipeline: one node per job, an edge per need."""
    if doc.get("version") != VERSION:
        raise PipelineError(f"version: must be {VERSION} (got {doc.get('version')!r})")
    unknown = sorted(set(doc) - TOP_KEYS)
    if unknown:
        raise PipelineError(f"{unknown[0]}: unknown top-level key (a pipeline takes "
                            f"{', '.join(sorted(TOP_KEYS))})")
    jobs = doc.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        raise PipelineError("jobs: a pipeline needs a mapping of at least one job")
    try:
        env = env_map(doc.get("env", {}), "env")
    except JobError as exc:
        raise PipelineError(str(exc)) from None
    ids = frozenset(jobs)
    needs: dict[str, list[str]] = {}
    no_files: dict[str, set[str]] = {}  # needs given with artifacts: false
    nodes = []
    for job_id, job in jobs.items():
        if not _ID.match(job_id):
            raise PipelineError(f"job {job_id!r}: a job's name is 1-64 letters, digits, _ or - "
                                "(starting with a letter or digit)")
        if not isinstance(job, dict):
            raise PipelineError(f"job {job_id}: a job is a mapping of keys (such as steps, "
                                "needs, if)")
        try:
            needs[job_id], no_files[job_id] = _needs(job.get("needs", []), ids)
            nodes.append(node_of(job_id, job, env))
        except JobError as exc:
            raise PipelineError(f"job {job_id}: {exc}") from None
    _check_acyclic(list(jobs), needs)
    _downloads(nodes, needs, no_files)
    graph: dict[str, Any] = {"version": GRAPH_VERSION, "nodes": nodes,
                             "edges": [{"from": d, "to": j} for j in jobs for d in needs[j]]}
    _top_level(doc, ids, graph)
    return graph


def _needs(value: Any, ids: frozenset[str]) -> tuple[list[str], set[str]]:
    """The jobs needed, and those of them whose artifacts are not wanted: a need is a
    job's name, or {job, artifacts: false} (GitLab's form) to wait without the files."""
    items = [value] if isinstance(value, (str, dict)) else value
    if not isinstance(items, list):
        raise JobError("needs: a job name, or a list of them")
    names, no_files = [], set()
    for i, v in enumerate(items):
        if isinstance(v, dict):
            if "job" not in v or set(v) - {"job", "artifacts"} or not isinstance(
                    v.get("artifacts", True), bool):
                raise JobError(f"needs[{i}]: a job name, or {{job, artifacts: true|false}}")
            if not v.get("artifacts", True):
                no_files.add(v["job"])
            v = v["job"]
        if not isinstance(v, str):
            raise JobError("needs: a job name, or a list of them")
        if v not in ids:
            raise JobError(f"needs: {v!r} names no job")
        names.append(v)
    return list(dict.fromkeys(names)), no_files


def _downloads(nodes: list[dict[str, Any]], needs: dict[str, list[str]],
               no_files: dict[str, set[str]]) -> None:
    """A steps or script job downloads the artifacts of every job it needs that declares
    some (unless that need says artifacts: false), as a GitLab CI job does."""
    uploads = {n["id"] for n in nodes if "artifacts" in n["config"]}
    for n in nodes:
        if n["type"] not in ("shell", "script"):
            continue
        wanted = [d for d in needs[n["id"]] if d in uploads and d not in no_files[n["id"]]]
        if wanted:
            n["config"]["artifacts_from"] = wanted


def _check_acyclic(order: list[str], needs: dict[str, list[str]]) -> None:
    cycle = find_cycle(order, needs)
    if cycle:
        raise PipelineError(f"job {cycle[0]}: needs: a cycle ({' -> '.join(reversed(cycle))})")


def _top_level(doc: dict[str, Any], ids: frozenset[str], graph: dict[str, Any]) -> None:
    """if, concurrency and output checked here so an error names the key; cancel_on,
    on and input_schema are carried as they are (the graph tier checks their shape, the
    trigger code reads them)."""
    for key in ("name", "cancel_on", "on", "on_failure", "input_schema",  # on_failure: job names
                "timeout"):
        if key in doc:
            graph[key] = doc[key]
    key = "if"
    try:
        if "if" in doc:
            cond = doc["if"]
            cond = ("true" if cond else "false") if isinstance(cond, bool) else cond
            ast = parse(cond, ids)
            if any(p[0] not in ("trigger", "input") for p in paths(ast)):
                raise ExprError("the top-level if reads trigger and input only")
            graph["if"] = cond
        key = "concurrency"
        if "concurrency" in doc:
            group = doc["concurrency"]
            if isinstance(group, dict):  # {group, limit, window}: the graph tier checks the rest
                group = group.get("group")
            if not isinstance(group, str):
                raise ExprError("must be text, such as deploy-{{ input.env }}, "
                                "or {group, limit, window}")
            parse_template(group, ids)
            graph["concurrency"] = doc["concurrency"]
        key = "output"
        if "output" in doc:
            parse(doc["output"], ids)
            graph["output"] = {"$expr": doc["output"]}
    except ExprError as exc:
        raise PipelineError(f"{key}: {_job_words(str(exc), graph)}") from None


_FIELD_KEYS = {  # (job kind, node config field) -> the pipeline key a user wrote
    ("steps", "run"): "steps", ("steps", "env"): "env",
    ("wait_for_event", "event"): "wait_for_event.name",
    ("wait_for_event", "timeout"): "wait_for_event.timeout",
    ("wait_for_signal", "signal"): "wait_for_signal.name",
    ("wait_for_signal", "timeout"): "wait_for_signal.timeout",
    ("sleep", "sleep"): "sleep", ("script", "workflow"): "script", ("script", "input"): "input",
    ("steps", "artifacts"): "artifacts", ("script", "artifacts"): "artifacts",
    ("steps", "artifacts_from"): "needs", ("script", "artifacts_from"): "needs",
    ("workflow", "graph"): "workflow", ("workflow", "input"): "input"}


def _job_words(msg: str, graph: dict[str, Any]) -> str:
    """A graph-tier error in the pipeline's words: job, not node; the job's key, not the
    node's config field."""
    kinds = {}
    for n in graph.get("nodes", []):
        kinds[n["id"]] = next((k for k, t in KINDS.items() if t == n["type"] and (
            t != "wait" or _wait_key(n) == k)), n["type"])
    m = re.match(r"^node (\S+): (.*)$", msg)
    if m:
        nid, rest = m.groups()
        kind = kinds.get(nid, "config")
        rest = re.sub(r"\bconfig\.(\w+)",
                      lambda f: _FIELD_KEYS.get((kind, f.group(1)), f"{kind}.{f.group(1)}"), rest)
        rest = re.sub(r"^config\b", kind, rest)
        msg = f"job {nid}: {rest}"
    msg = re.sub(r"^graph: ", "", msg)
    return msg.replace("no node ", "no job ").replace("in this graph", "in this pipeline")


def _wait_key(node: dict[str, Any]) -> str:
    c = node.get("config", {})
    return "sleep" if "sleep" in c else "wait_for_signal" if "signal" in c else "wait_for_event"
