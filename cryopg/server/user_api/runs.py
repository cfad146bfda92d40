"""Submit, list, show and cancel runs; store named workflows."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine, tracing
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.graphs.document import GraphError
from cryopg.graphs.document import timeout as graph_timeout
from cryopg.graphs.fan_out import check_input_fan_outs
from cryopg.graphs.nodes import state_node
from cryopg.payloads import run_input, run_outputs
from cryopg.seal import Sealer
from cryopg.server import input_checks, traces
from cryopg.server.app_state import KEYS, POOL, TIMERS
from cryopg.server.auth import MEMBER, VIEWER, require_user
from cryopg.server.bodies import json_body, optional_str_field, query_int, script_fields
from cryopg.server.redact import masked
from cryopg.server.render import iso, run_json
from cryopg.server.user_api import operators, workflow_versions
from cryopg.server.user_api.graphs import (
    Prepared,
    admission_group,
    compiled_graph,
    graph_json,
    prepared_graph,
)
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run, project_of
from cryopg.triggers import cron


async def submit(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    source, filename, interpreter = script_fields(body)
    key = body.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise InvalidArgument("idempotency_key must be a string")
    untrusted = body.get("untrusted", False)
    if not isinstance(untrusted, bool):
        raise InvalidArgument("untrusted must be true or false")
    group, policy = body.get("concurrency"), body.get("policy")
    if any(v is not None and not isinstance(v, str) for v in (group, policy)):
        raise InvalidArgument("concurrency and policy must be strings")
    timeout, priority = timeout_field(body), priority_field(body)
    graph = await prepared_graph(org, project, source, filename)
    workdir = body.get("workdir")
    if workdir is not None and not isinstance(workdir, str):
        raise InvalidArgument("workdir must be a string (an absolute path)")
    sealer = await request.app[KEYS].sealer(org)
    sealed_input = sealer.seal_json(body["input"]) if body.get("input") is not None else None
    async with connection(request.app[POOL]) as conn:
        if graph is not None:
            return await _submit_graph(request.app, conn, sealer, graph, org, project,
                                       filename, interpreter, sealed_input, key, untrusted,
                                       group, policy, workdir, body.get("input"),
                                       traces.incoming(request), timeout, priority)
        run_id, created = await engine.submit_script(
            conn, org, project, filename=filename, interpreter=interpreter,
            source=sealer.seal_text(source), input=sealed_input, idempotency_key=key,
            required_caps=None, untrusted=untrusted,  # what it needs: cryo._required_caps
            concurrency=group, policy=policy, workdir=workdir, timeout=timeout,
            priority=priority)
        if run_id is None:  # policy skip, and the group was held
            return web.json_response({"run_id": None, "created": False, "skipped": True})
        if created:
            await traces.start_run_trace(conn, run_id, "cryopg submit", traces.incoming(request),
                                         org=org, project=project, kind="script")
            await operators.index_input(conn, sealer, project, run_id, body.get("input"), untrusted)
        run = await engine.get_run(conn, run_id)
    return web.json_response({"run_id": run_id, "created": created, "status": run.status,
                              "position": run.queue_position},
                             status=201 if created else 200)


async def _submit_graph(app: web.Application, conn: AsyncConnection, sealer: Sealer,
                        graph: Prepared, org: str, project: str, filename: str,
                        interpreter: str | None, sealed_input: bytes | None, key: str | None,
                        untrusted: bool, group: str | None, policy: str | None,
                        workdir: str | None, input_value: Any,
                        traceparent: str | None = None, timeout: float | None = None,
                        priority: int | None = None) -> web.Response:
    """A graph run in one call: one whose every node is a constant state node goes with
    its state calls sealed, and the database runs it whole before answering."""
    compiled = graph.compiled
    await input_checks.check(compiled.structure, input_value)  # its own input_schema
    check_input_fan_outs(compiled.structure, input_value)  # past the bound: a 400
    group = group or await admission_group(conn, compiled, input_value)
    calls = (state_node.constant_calls(compiled.structure, compiled.document.get("configs", {}),
                                       sealer, graph.wanted)
             if graph.maybe_constant else None)
    run_id, created, status, position = await engine.submit_graph(
        conn, org, project, filename=filename, interpreter=interpreter,
        source=sealer.seal_text(graph.text), input=sealed_input, idempotency_key=key,
        untrusted=untrusted, concurrency=group, policy=policy, workdir=workdir,
        graph=compiled.structure, calls=calls, timeout=timeout, priority=priority)
    if run_id is None:  # policy skip, and the group was held
        return web.json_response({"run_id": None, "created": False, "skipped": True})
    if created:
        await traces.start_run_trace(conn, run_id, "cryopg submit", traceparent, org=org,
                                     project=project, kind="graph")
        await operators.index_input(conn, sealer, project, run_id, input_value, untrusted)
    if status == "parked" and TIMERS in app:  # its retry's deadline may be the earliest now
        app[TIMERS].rearm()
    return web.json_response({"run_id": run_id, "created": created, "status": status,
                              "position": position}, status=201 if created else 200)


def timeout_field(body: dict[str, Any]) -> float | None:
    """A submit's `timeout`: seconds, or a duration text such as 30s, 10m (docs/graphs.md)."""
    if body.get("timeout") is None:
        return None
    try:
        return graph_timeout(body["timeout"], "timeout")
    except GraphError as exc:
        raise InvalidArgument(str(exc)) from None


def priority_field(body: dict[str, Any]) -> int | None:
    """A submit's `priority`: an integer from -1000 to 1000, higher claimed first."""
    value = body.get("priority")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -1000 <= value <= 1000:
        raise InvalidArgument("priority must be an integer from -1000 to 1000")
    return value


# The runs list's filters; any of them selects the paginated view (cryo.list_runs_page).
PAGE_FILTERS = ("status", "workflow", "parent", "before", "top")
LIST_MAX = 10_000  # the plain list's bound; a page holds at most PAGE_MAX
PAGE_MAX = 200


async def list_runs(request: web.Request) -> web.Response:
    """A project's newest runs. With `top=1`, `parent=ID`, `status`, `workflow` or
    `before=ID` (the cursor: the last id of the previous page), one bounded page of the
    top-level runs (or of one parent's children) and the cursor of the next page."""
    await require_user(request)
    org, project = project_of(request)
    limit = query_int(request, "limit", 50)
    if limit < 0 or limit > LIST_MAX:
        raise InvalidArgument(f"limit must be between 0 and {LIST_MAX}")
    q = request.query
    if any(name in q for name in operators.SEARCH_FILTERS) or "sort" in q:
        return await operators.search(request, min(limit, PAGE_MAX))
    async with connection(request.app[POOL]) as conn:
        if not any(name in q for name in PAGE_FILTERS):
            runs = await engine.list_runs(conn, org, project, limit)
            return web.json_response(await masked(request, conn, org, project,
                                                  {"runs": [run_json(r) for r in runs]}))
        rows = await engine.list_runs_page(
            conn, org, project, status=q.get("status") or None,
            workflow=q.get("workflow") or None, parent=q.get("parent") or None,
            before=q.get("before") or None, limit=min(limit, PAGE_MAX))
        return web.json_response(await masked(request, conn, org, project, {
            "runs": [{**run_json(r), "parent_run_id": r.parent_run_id, "trigger": r.trig,
                      "children": r.children} for r in rows],
            "next": rows[-1].id if rows and len(rows) == min(limit, PAGE_MAX) else None}))


async def show_run(request: web.Request) -> web.Response:
    run = await own_run(request)
    sealer = await request.app[KEYS].sealer(run.org)
    async with connection(request.app[POOL]) as conn:
        events = await engine.read_history(conn, run.id)
        outputs = await run_outputs(conn, sealer, run.id)
        graph = await graph_json(conn, sealer, run.id) if run.kind == "graph" else None
    history = []
    for ev in events:
        item: dict[str, Any] = {"kind": ev.kind, "at": iso(ev.created_at)}
        if ev.family:
            item.update(family=ev.family, name=ev.name, ordinal=ev.ordinal)
        if ev.label is not None:
            item["label"] = ev.label
        if ev.attempt is not None:
            item["attempt"] = ev.attempt
        if ev.kind == "annotation" and ev.payload is not None:
            item["text"] = sealer.open_text(ev.payload)
        if ev.kind in ("node_approved", "node_rejected") and ev.payload is not None:
            said = sealer.open_json(ev.payload)  # who answered and their comment
            item["by"] = said.get("approved_by") or said.get("rejected_by")
            if said.get("comment"):
                item["comment"] = said["comment"]
        history.append(item)
    detail = await _detail(request, run)
    extra: dict[str, Any] = {"graph": graph} if graph is not None else {}
    if graph and graph.get("pipeline"):
        extra["pipeline"] = graph["pipeline"]
    body = {**run_json(run), **detail, "outputs": outputs, "history": history, **extra}
    async with connection(request.app[POOL]) as conn:  # what a run copied of a secret
        return web.json_response(await masked(request, conn, run.org, run.project, body))


async def _detail(request: web.Request, run: engine.Run) -> dict[str, Any]:
    """The run page's extras: the input, and what started the run."""
    async with connection(request.app[POOL]) as conn:
        detail = await engine.read_run_detail(conn, run.id)
        trace = (tracing.trace_id(await engine.run_traceparent(conn, run.id))
                 if detail is not None else None)
    if detail is None:
        return {}
    opened = run_input(await request.app[KEYS].sealer(run.org), detail.input, detail.input_clear)
    trigger = ("parent" if detail.parent_run_id else detail.trigger_kind or "manual")
    extra: dict[str, Any] = {}
    if detail.trigger_kind:
        extra["triggered_by"] = {"kind": detail.trigger_kind, "name": detail.trigger_name,
                                 "depth": detail.trigger_depth}
    if trace:
        extra["trace_id"] = trace
    return {"input": opened, "parent_run_id": detail.parent_run_id, "trigger": trigger,
            "untrusted": detail.untrusted, **extra}


async def checkpoints(request: web.Request) -> web.Response:
    """The run's durable calls in position order; a pending step is running now."""
    run = await own_run(request)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.read_checkpoints(conn, run.id)
        return web.json_response(await masked(request, conn, run.org, run.project, {
            "checkpoints": [
                {"seq": c.seq, "family": c.family, "name": c.name, "ordinal": c.ordinal,
                 "label": c.label, "attempt": c.attempt, "status": c.status,
                 "exit_code": c.exit_code, "due_at": iso(c.due_at),
                 "created_at": iso(c.created_at), "completed_at": iso(c.completed_at),
                 "child_run_id": c.ref_run_id}
                for c in rows]}))


async def cancel(request: web.Request) -> web.Response:
    run = await own_run(request, MEMBER)
    async with connection(request.app[POOL]) as conn:
        outcome = await engine.cancel_run(conn, run.id)
        run = await engine.get_run(conn, run.id)
    return web.json_response({**run_json(run), "cancel": outcome})


async def put_workflow(request: web.Request) -> web.Response:
    """Stores a workflow after the checks a submit makes; a definition that does not
    compile is a 400 naming the line it is about (`error.line`) and stores nothing.
    `base_version` (the version an editor started from; 0 for a new one) refuses a save
    over someone else's later one (409)."""
    user = await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    source, filename, interpreter = script_fields(body)
    # Where the workflow was stored from: runs started by name run there on a local agent.
    workdir = optional_str_field(body, "workdir", limit=4096)
    timeout, priority = timeout_field(body), priority_field(body)
    base = body.get("base_version")
    if base is not None and (isinstance(base, bool) or not isinstance(base, int)
                             or not 0 <= base < 2**31):
        raise InvalidArgument("base_version must be a version number (0: a new workflow)")
    try:
        graph = await compiled_graph(source, filename)
        for expr in (graph.structure.get("on", {}).get("schedule", []) if graph else []):
            try:  # on.schedule registers schedules (in UTC): each cron text must read
                cron.check_cron(expr)
            except cron.ScheduleError as exc:
                raise InvalidArgument(f"on.schedule: {exc}") from None
    except InvalidArgument as exc:
        return workflow_versions.refused(exc, source)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        version = await engine.put_workflow(
            conn, org, project, request.match_info["name"], filename=filename,
            interpreter=interpreter, source=sealer.seal_text(graph.source() if graph else source),
            graph=graph and graph.structure, workdir=workdir, digest=sealer.digest(source),
            by=user.member, base_version=base, timeout=timeout, priority=priority)
    return web.json_response({"name": request.match_info["name"], "version": version,
                              **_kind(graph and graph.structure)})


def _kind(structure: dict[str, Any] | None) -> dict[str, Any]:
    """What a stored workflow or a run is: a script, a graph, or a graph compiled from a
    YAML pipeline (its structure carries the pipeline's version)."""
    if structure is None:
        return {"kind": "script"}
    if structure.get("pipeline"):
        return {"kind": "pipeline", "pipeline": structure["pipeline"]}
    return {"kind": "graph"}


async def get_workflow(request: web.Request) -> web.Response:
    """A stored workflow: its name, kind (script, graph or pipeline), filename and, with
    `source=1` (Members), what was stored (a pipeline's YAML as written)."""
    with_source = request.query.get("source") in ("1", "true")
    await require_user(request, MEMBER if with_source else VIEWER)
    org, project = project_of(request)
    name = request.match_info["name"]
    async with connection(request.app[POOL]) as conn:
        filename, interpreter, sealed, _, structure = await engine.get_workflow(
            conn, org, project, name)
        workdir = await engine.workflow_workdir(conn, org, project, name)
        version = await engine.workflow_version(conn, org, project, name)
    got: dict[str, Any] = {"name": name, "filename": filename, "interpreter": interpreter,
                           "workdir": workdir, "version": version, **_kind(structure)}
    if structure is not None:
        got["nodes"] = [{"id": n["id"], "type": n["type"], "needs": n.get("deps", [])}
                        for n in structure.get("nodes", [])]
        got.update({k: structure[k] for k in ("on", "cancel_on", "input_schema")
                    if k in structure})
    if with_source:  # what was written: a pipeline's YAML, a graph's JSON
        got["source"] = workflow_versions.stored_text(await request.app[KEYS].sealer(org),
                                                      sealed, structure)
    return web.json_response(got)


def add_routes(app: web.Application) -> None:
    app.router.add_post(f"{PROJECT_ROUTE}/runs", submit)
    app.router.add_get(f"{PROJECT_ROUTE}/runs", list_runs)
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}", show_run)
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/checkpoints", checkpoints)
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/cancel", cancel)
    app.router.add_put(f"{PROJECT_ROUTE}/workflows/{{name}}", put_workflow)
    app.router.add_get(f"{PROJECT_ROUTE}/workflows/{{name}}", get_workflow)
