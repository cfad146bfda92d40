"""Graph documents at submit and store time, a graph run's nodes, approvals and reruns."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import GraphJob
from cryopg.errors import InvalidArgument, NotFound, RunFinished
from cryopg.graphs import node_keys, nodes, schemas
from cryopg.graphs.document import (
    Compiled,
    GraphError,
    is_graph,
    load,
)
from cryopg.payloads import open_document
from cryopg.pipelines import PipelineError, is_pipeline
from cryopg.seal import Sealer
from cryopg.server import offload, work
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import MEMBER, require_user
from cryopg.server.bodies import approval_item, json_body, optional_str_field, str_field
from cryopg.server.render import run_json
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run
from cryopg.server.work import Prepared

__all__ = ["Prepared", "compiled_graph", "prepared_graph"]


def graph_kind(source: str, filename: str | None) -> bool | None:
    """True for a YAML pipeline (by its .yaml/.yml name or its `version:` line), False for
    a graph document (a .json file, or a JSON object naming a cryosleep version), None
    for a script. Cheap: the document itself is read in a worker."""
    if is_pipeline(source, filename):
        return True
    if is_graph(source, filename):
        return False
    return None


async def compiled_graph(source: str, filename: str | None = None) -> Compiled | None:
    """The compiled document when a submitted source is a graph or a YAML pipeline, else
    None (a script). One that does not compile is refused in one line naming the file,
    never run as a script. Compiled in a worker process (offload.py), off the loop."""
    pipeline = graph_kind(source, filename)
    if pipeline is None:
        return None
    return (await _prepared(source, filename, pipeline)).compiled


async def _prepared(source: str, filename: str | None, pipeline: bool) -> Prepared:
    try:
        return await offload.run(work.prepare, source, pipeline, timeout=work.COMPILE_SECONDS,
                                 what=f"reading {filename or 'the document'}")
    except (PipelineError, GraphError) as exc:
        raise InvalidArgument(f"{filename}: {exc}" if filename else str(exc)) from None


# The same document submitted again (a client submitting one graph many times) is not
# parsed, validated and expanded again: its compiled form is kept, keyed by the project
# and a digest of the source. Only documents that compiled are kept (a bad one is refused
# every time, with the same message); a few dozen, none over 256 KB of source and 4 MB
# of sources in all, so the cache stays small beside what it saves.
_PREPARED: OrderedDict[tuple[str, str, bytes, str | None], Prepared] = OrderedDict()
PREPARED_DOCS = 64
PREPARED_MAX_CHARS = 256 << 10
PREPARED_TOTAL_CHARS = 4 << 20


async def prepared_graph(org: str, project: str, source: str,
                         filename: str | None = None) -> Prepared | None:
    """compiled_graph's answer for a submit, from the cache when this project submitted
    the same source under the same name before."""
    pipeline = graph_kind(source, filename)
    if pipeline is None:
        return None
    key = (org, project, hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest(),
           filename)
    got = _PREPARED.get(key)
    if got is not None:
        _PREPARED.move_to_end(key)
        return got
    got = await _prepared(source, filename, pipeline)
    if len(got.text) <= PREPARED_MAX_CHARS:
        _PREPARED[key] = got
        total = sum(len(p.text) for p in _PREPARED.values())
        while len(_PREPARED) > PREPARED_DOCS or total > PREPARED_TOTAL_CHARS:
            total -= len(_PREPARED.popitem(last=False)[1].text)
    return got


async def admission_group(conn: AsyncConnection, compiled: Compiled,
                          input_value: Any) -> str | None:
    """A graph's own concurrency group, rendered over its input."""
    tpl = compiled.structure.get("concurrency")
    if tpl is None:
        return None
    group = await engine.eval_expression(conn, tpl, {"input": input_value})
    return group if isinstance(group, str) and group else None


async def graph_json(conn: AsyncConnection, sealer: Sealer, run_id: str) -> dict[str, Any]:
    """A graph run's nodes (status, attempt, output, approval fields) and edges."""
    got = await engine.read_graph(conn, run_id)
    if got is None:
        return {}
    structure, source = got
    document = json.loads(open_document(sealer, source))
    configs = document.get("configs", {})
    written = _written_nodes(document)
    rows = await engine.read_graph_nodes(conn, run_id)
    nodes: dict[str, dict[str, Any]] = {}
    outputs: dict[str, dict[int, Any]] = {}
    for r in rows:
        n = nodes.setdefault(r.node_id, {
            "id": r.node_id, "type": r.type, "status": r.status, "attempt": 0, "items": r.items,
            "output": None, "error": r.error,
            "started_at": r.started_at and r.started_at.isoformat(),
            "finished_at": r.finished_at and r.finished_at.isoformat()})
        if r.item is not None:
            n["attempt"] = max(n["attempt"], r.attempt or 0)
            if r.items is not None and r.item_status:  # a fan-out's items, counted by status
                counts = n.setdefault("item_statuses", {})
                counts[r.item_status] = counts.get(r.item_status, 0) + 1
            if r.item_status in ("succeeded", "seeded", "failed"):
                if r.output is not None:
                    outputs.setdefault(r.node_id, {})[r.item] = sealer.open_json(r.output)
                elif r.output_clear is not None:  # an output holding no user data
                    outputs.setdefault(r.node_id, {})[r.item] = r.output_clear
            if r.cached:
                n["cached"] = True
            if r.job_run_id:
                n.setdefault("runs", []).append(r.job_run_id)
            if r.wait_kind:
                n["waiting_for"] = r.wait_kind
        if r.error and not n["error"]:
            n["error"] = r.error
    loops = {d["id"] for d in structure.get("nodes", []) if "loop" in d}
    for nid, n in nodes.items():
        got_out = outputs.get(nid, {})
        n["output"] = (got_out.get(0) if n["items"] is None
                       else [got_out.get(i) for i in range(n["items"])])
        if nid in loops:  # its iterations are its instances; its output the last one's
            n["iterations"] = sum(1 for r in rows if r.node_id == nid and r.item is not None)
            n["output"] = got_out[max(got_out)] if got_out else None
        if n["type"] == "approval":
            c = configs.get(nid, {})
            answers = await engine.read_approvals(conn, run_id, nid)
            n["approval"] = {"fields": c.get("fields", {}), "needed": c.get("approvers", 1),
                             "approvals": [{"by": who, "answer": said, "at": at.isoformat()}
                                           for who, said, at in answers],
                             **{k: c[k] for k in ("role", "group", "timeout", "on_timeout")
                                if k in c}}
        if nid in written:  # its definition as written (secrets masked by the caller)
            n["definition"] = written[nid]
    failed = [n for n in nodes.values() if n["status"] == "failed"]
    if failed:
        jobs = await engine.graph_jobs(conn, run_id)
        for n in failed:
            tail = await failed_job_tail(conn, sealer, jobs, n["id"])
            if tail:
                n["log_tail"] = tail
    order = [d["id"] for d in structure.get("nodes", [])]
    edges = [{"from": dep, "to": d["id"]} for d in structure.get("nodes", []) for dep in d["deps"]]
    got_graph = {"nodes": [nodes[i] for i in order if i in nodes], "edges": edges}
    if structure.get("pipeline"):
        got_graph["pipeline"] = structure["pipeline"]
    return got_graph


def _written_nodes(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each node's definition as its author wrote it (config, if, retry, fan_out,
    concurrency), when the document kept its source; a pipeline's jobs have none."""
    try:
        doc = load(document["graph_source"]) if "graph_source" in document else {}
    except GraphError:
        return {}
    return {n["id"]: {k: v for k, v in n.items() if k not in ("id", "type")}
            for n in doc.get("nodes", []) if isinstance(n, dict) and isinstance(n.get("id"), str)}


# A failed node's JSON carries the last lines its failing job printed (log_tail), read
# from the job's sealed log when asked for: the clear error says only how it ended.
TAIL_BYTES = 16 << 10
TAIL_LINES = 5
TAIL_LINE_CHARS = 200


def text_tail(text: str) -> str:
    """The last few non-blank lines of a job's output, each cut to a readable length."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").splitlines()
             if ln.strip()]
    return "\n".join(ln if len(ln) <= TAIL_LINE_CHARS else ln[:TAIL_LINE_CHARS - 3] + "..."
                     for ln in lines[-TAIL_LINES:])


async def failed_job_tail(conn: AsyncConnection, sealer: Sealer, jobs: list[GraphJob],
                          node: str) -> str:
    """The tail of the log of the newest failed job of `node`: its own, a fan-out item's,
    or a job inside the graph a workflow node ran."""
    mine = [j for j in jobs if j.status == "failed" and (
        j.label == node or j.label.startswith((f"{node}#", f"{node}/")))]
    if not mine:
        return ""
    job = mine[-1].job_run_id
    start = await engine.log_tail_start(conn, job, TAIL_BYTES)
    chunks = await engine.read_logs(conn, job, start.after_id)
    text = b"".join(sealer.open(c.data) for c in chunks).decode("utf-8", errors="replace")
    return text_tail(text)


async def approve(request: web.Request) -> web.Response:
    """An approver's answer for a waiting approval node, checked against its fields."""
    user = await require_user(request, MEMBER)
    run = await own_run(request, MEMBER)
    node = request.match_info["node"]
    item = approval_item(request)
    answer = await json_body(request)
    # An optional comment goes to history with the answer, not through the fields' check.
    comment = optional_str_field(answer, "comment", limit=2000)
    answer.pop("comment", None)
    sealer = await request.app[KEYS].sealer(run.org)
    async with connection(request.app[POOL]) as conn:
        got = await engine.read_graph(conn, run.id)
        if got is None:
            raise NotFound(f"run {run.id} is not a graph run")
        config = json.loads(open_document(sealer, got[1])).get("configs", {}).get(node)
        kinds = {d["id"]: d["type"] for d in got[0].get("nodes", [])}
        if kinds.get(node) != "approval" or config is None:
            raise NotFound(f"run {run.id} has no approval node {node!r}")
    await _check_answer(config.get("fields", {}), answer)
    async with connection(request.app[POOL]) as conn:
        if run.finished:
            raise RunFinished(f"run {run.id} already finished ({run.status})")
        said = {**answer, "approved_by": user.member, **({"comment": comment} if comment else {})}
        taken = await engine.approve_node(conn, run.id, node, sealer.seal_json(said), user.member,
                                          user.token_id, item)
    if not taken:
        raise RunFinished(f"node {node}{_of_item(item)} of run {run.id} is not waiting for "
                          "an approval")
    # approved: whether this answer was the last one needed (approvals of needed so far)
    return web.json_response({"approved": taken["approved"], "node": node, "item": item,
                              "approved_by": user.member, "approvals": taken["approvals"],
                              "needed": taken["needed"]})


def _of_item(item: int | None) -> str:
    return "" if item is None else f" item {item}"


VALIDATE_SECONDS = 5.0  # an answer's check; RE2 patterns keep it linear, this bounds it


async def _check_answer(fields: dict[str, Any], answer: dict[str, Any]) -> None:
    """The answer against the approval's fields (local references only, RE2 patterns),
    off the event loop and within a bound, so no answer stalls other requests."""
    error = await offload.run(schemas.first_error, fields, answer, timeout=VALIDATE_SECONDS,
                              what="the answer's check against the approval's fields")
    if error is not None:
        raise InvalidArgument(error)


async def rerun(request: web.Request) -> web.Response:
    run = await own_run(request, MEMBER)
    body = await json_body(request)
    node = str_field(body, "from")
    async with connection(request.app[POOL]) as conn:
        new_id = await engine.rerun_graph(conn, run.id, node)
        new = await engine.get_run(conn, new_id)
    return web.json_response({**run_json(new), "rerun_of": run.id, "from": node}, status=201)


NODE_TYPES_PATH = "/api/v1/graphs/node-types"


async def node_types(request: web.Request) -> web.Response:
    """Every node type with the JSON Schema of its config (cryopg/graphs/nodes/), and the
    schema of the keys every node takes beside its config (`node_keys`: if, retry,
    concurrency, ...; cryopg/graphs/node_keys.py), for a canvas editor to build its forms
    from. The same for everyone: no secret is in it."""
    return web.json_response({"node_types": nodes.node_types(),
                              "node_keys": node_keys.schema()})


def add_routes(app: web.Application) -> None:
    app.router.add_get(NODE_TYPES_PATH, node_types)
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/approvals/{{node}}", approve)
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/rerun", rerun)
