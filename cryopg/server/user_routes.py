"""`/api/v1/orgs/{org}/projects/{project}/…`: submit, inspect, follow and cancel runs.

A run id that is not of the project in the path is a 404, never a 403: the route must
not confirm that a run exists elsewhere.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Run
from cryopg.errors import InvalidArgument, RunNotFound
from cryopg.server.auth import MEMBER, VIEWER, require_user
from cryopg.server.bodies import json_body
from cryopg.server.state import KEYS, NOTIFIER, POOL

SHELL_SUFFIXES = (".sh", ".bash")
SHELL_INTERPRETERS = {"bash", "sh", "dash", "zsh"}


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_json(run: Run) -> dict[str, Any]:
    return {"id": run.id, "org": run.org, "project": run.project, "workflow": run.workflow,
            "filename": run.filename, "status": run.status, "substate": run.substate,
            "attempt": run.attempt, "exit_code": run.exit_code, "error": run.error,
            "idempotency_key": run.idempotency_key, "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at), "finished_at": _iso(run.finished_at),
            "wake_at": _iso(run.wake_at), "agent_id": run.agent_id,
            "concurrency_group": run.concurrency_group, "queue_position": run.queue_position}


def required_caps(filename: str, interpreter: str | None) -> list[str]:
    """Shell scripts need `shell`; anything run by another interpreter needs `polyglot`."""
    if interpreter:
        program = interpreter.split()[0].rsplit("/", 1)[-1]
        return ["shell"] if program in SHELL_INTERPRETERS else ["polyglot"]
    base = filename.rsplit("/", 1)[-1]
    return ["shell"] if base.endswith(SHELL_SUFFIXES) or "." not in base else ["polyglot"]


def _scope(request: web.Request) -> tuple[str, str]:
    return request.match_info["org"], request.match_info["project"]


async def _own_run(request: web.Request, need: str = VIEWER) -> Run:
    await require_user(request, need)
    org, project = _scope(request)
    run_id = request.match_info["run"]
    if not run_id.startswith(f"{org}:{project}:"):
        raise RunNotFound(f"no run {run_id} in {org}/{project}")
    async with connection(request.app[POOL]) as conn:
        return await engine.get_run(conn, run_id)


def _script_fields(body: dict[str, Any]) -> tuple[str, str, str | None]:
    source, filename = body.get("source"), body.get("filename")
    if not isinstance(source, str) or not isinstance(filename, str) or not filename:
        raise InvalidArgument("source and filename are required strings")
    interpreter = body.get("interpreter")
    if interpreter is not None and not isinstance(interpreter, str):
        raise InvalidArgument("interpreter must be a string")
    return source, filename, interpreter or None


async def submit(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = _scope(request)
    body = await json_body(request)
    source, filename, interpreter = _script_fields(body)
    key = body.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise InvalidArgument("idempotency_key must be a string")
    untrusted = body.get("untrusted", False)
    if not isinstance(untrusted, bool):
        raise InvalidArgument("untrusted must be true or false")
    group, policy = body.get("concurrency"), body.get("policy")
    if any(v is not None and not isinstance(v, str) for v in (group, policy)):
        raise InvalidArgument("concurrency and policy must be strings")
    sealer = await request.app[KEYS].sealer(org)
    sealed_input = sealer.seal_json(body["input"]) if body.get("input") is not None else None
    async with connection(request.app[POOL]) as conn:
        run_id, created = await engine.submit_script(
            conn, org, project, filename=filename, interpreter=interpreter,
            source=sealer.seal_text(source), input=sealed_input, idempotency_key=key,
            required_caps=required_caps(filename, interpreter), untrusted=untrusted,
            concurrency=group, policy=policy)
        if run_id is None:  # policy skip, and the group was held
            return web.json_response({"run_id": None, "created": False, "skipped": True})
        run = await engine.get_run(conn, run_id)
    return web.json_response({"run_id": run_id, "created": created, "status": run.status,
                              "position": run.queue_position},
                             status=201 if created else 200)


async def list_runs(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = _scope(request)
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError as exc:
        raise InvalidArgument("limit must be an integer") from exc
    async with connection(request.app[POOL]) as conn:
        runs = await engine.list_runs(conn, org, project, limit)
    return web.json_response({"runs": [run_json(r) for r in runs]})


async def show_run(request: web.Request) -> web.Response:
    run = await _own_run(request)
    sealer = await request.app[KEYS].sealer(run.org)
    from cryopg.server.wait_routes import run_outputs  # it builds on this module

    async with connection(request.app[POOL]) as conn:
        events = await engine.read_history(conn, run.id)
        outputs = await run_outputs(conn, sealer, run.id)
    history = []
    for ev in events:
        item: dict[str, Any] = {"kind": ev.kind, "at": _iso(ev.created_at)}
        if ev.family:
            item.update(family=ev.family, name=ev.name, ordinal=ev.ordinal)
        if ev.attempt is not None:
            item["attempt"] = ev.attempt
        if ev.kind == "annotation" and ev.payload is not None:
            item["text"] = sealer.open_text(ev.payload)
        history.append(item)
    return web.json_response({**run_json(run), "outputs": outputs, "history": history})


async def cancel(request: web.Request) -> web.Response:
    run = await _own_run(request, MEMBER)
    async with connection(request.app[POOL]) as conn:
        outcome = await engine.cancel_run(conn, run.id)
        run = await engine.get_run(conn, run.id)
    return web.json_response({**run_json(run), "cancel": outcome})


async def logs(request: web.Request) -> web.StreamResponse:
    run = await _own_run(request)
    follow = request.query.get("follow") in ("1", "true", "yes")
    try:
        after = int(request.query.get("after", "0"))
    except ValueError as exc:
        raise InvalidArgument("after must be an integer") from exc
    sealer = await request.app[KEYS].sealer(run.org)
    pool, notifier = request.app[POOL], request.app[NOTIFIER]
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",
                                       "X-Cryo-Run": run.id})
    await resp.prepare(request)
    finished = run.finished
    if follow and not finished:
        async with connection(pool) as conn:
            await engine.watch_run(conn, run.id)  # from now on its changes NOTIFY
    while True:
        woken = notifier.run_event(run.id)
        async with connection(pool) as conn:
            chunks = await engine.read_logs(conn, run.id, after)
        for chunk in chunks:
            await resp.write(sealer.open(chunk.data))
            after = chunk.id
        if chunks:
            continue  # drain before deciding anything
        if finished or not follow or notifier.closing:
            break
        async with connection(pool) as conn:
            finished = (await engine.get_run(conn, run.id)).finished
        if not finished:  # when it is, loop once more for the bytes sent before the end
            try:
                await asyncio.wait_for(woken.wait(), 2.0)
            except TimeoutError:
                pass
    await resp.write_eof()
    return resp


async def put_workflow(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = _scope(request)
    body = await json_body(request)
    source, filename, interpreter = _script_fields(body)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        await engine.put_workflow(conn, org, project, request.match_info["name"], filename=filename,
                                  interpreter=interpreter, source=sealer.seal_text(source))
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    base = "/api/v1/orgs/{org}/projects/{project}"
    app.router.add_post(f"{base}/runs", submit)
    app.router.add_get(f"{base}/runs", list_runs)
    app.router.add_get(f"{base}/runs/{{run}}", show_run)
    app.router.add_post(f"{base}/runs/{{run}}/cancel", cancel)
    app.router.add_get(f"{base}/runs/{{run}}/logs", logs)
    app.router.add_put(f"{base}/workflows/{{name}}", put_workflow)
