"""Signals, the event bus, child runs, activities and outputs.

Agent routes record the waits a script reaches; user routes send signals, publish and
list events. Payloads are sealed here as {"answer": value}, the same shape a journal
memo carries, so the database can hand a signal's sealed bytes to the waiting run's
memo without ever opening them.
"""

from __future__ import annotations

import shlex
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Memo
from cryopg.errors import InvalidArgument, RunNotFound
from cryopg.seal import Sealer
from cryopg.server.auth import MEMBER, agent_run, require_user
from cryopg.server.bodies import claim_token, json_body, position
from cryopg.server.state import KEYS, POOL
from cryopg.server.user_routes import required_caps

ANSWER_FAMILIES = ("signal", "event")


def _answer(sealer: Sealer, sealed: bytes | None, clear: Any) -> Any:
    return sealer.open_json(sealed).get("answer") if sealed is not None else clear


async def child_output(conn: AsyncConnection, sealer: Sealer, run_id: str) -> str:
    """What collecting an activity prints: the log of the child's latest attempt."""
    chunks = await engine.read_last_attempt_log(conn, run_id)
    return b"".join(sealer.open(c.data) for c in chunks).decode("utf-8", errors="replace")


async def grant_entry(conn: AsyncConnection, sealer: Sealer, m: Memo) -> dict[str, Any]:
    """One journal memo as the agent's grant carries it, opened."""
    result = sealer.open_json(m.result) if m.result is not None else {}
    entry: dict[str, Any] = {"seq": m.seq, "path": m.path, "family": m.family, "name": m.name,
                             "ordinal": m.ordinal, "status": m.status,
                             "stdout": result.get("stdout", ""), "exit_code": m.exit_code}
    if "answer" in result:
        entry["answer"] = result["answer"]
    elif m.answer_clear is not None:
        entry["answer"] = m.answer_clear
    if m.family == "activity.collect" and m.status == "done" and m.ref_run_id:
        entry["stdout"] = await child_output(conn, sealer, m.ref_run_id)
    return entry


def _float(body: dict[str, Any], key: str, default: float | None = None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{key} must be a number") from exc


def _int(body: dict[str, Any], key: str) -> int:
    try:
        return int(body[key])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"{key} must be an integer") from exc


def _str(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{key} must be a non-empty string")
    return value


# -- agent routes -----------------------------------------------------------------------------

async def wait(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    kind = request.match_info["kind"]
    waiter = {"signal": engine.wait_signal, "event": engine.wait_event}.get(kind)
    if waiter is None:
        raise InvalidArgument(f"no wait of kind {kind}")
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL], position(body)) as conn:
        got = await waiter(conn, run_id, claim_token(body), path=_str(body, "path"),
                           name=_str(body, "name"), ordinal=_int(body, "ordinal"),
                           timeout=_float(body, "timeout"))
    return web.json_response({"parked": got.parked, "timed_out": got.timed_out,
                              "payload": _answer(sealer, got.payload, got.payload_clear)})


async def emit(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL], position(body)) as conn:
        event_id = await engine.emit_from_run(
            conn, run_id, claim_token(body), path=_str(body, "path"), ordinal=_int(body, "ordinal"),
            name=_str(body, "name"), payload=sealer.seal_json({"answer": body.get("payload")}))
    return web.json_response({"event_id": event_id})


async def spawn(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    sealer = await request.app[KEYS].sealer(org)
    filename, source = _str(body, "filename"), body.get("source")
    if not isinstance(source, str):
        raise InvalidArgument("source must be a string")
    interpreter = body.get("interpreter") or None
    child_input = body.get("input")
    async with connection(request.app[POOL], position(body)) as conn:
        child = await engine.spawn_run(
            conn, run_id, claim_token(body), path=_str(body, "path"), ordinal=_int(body, "ordinal"),
            filename=filename, interpreter=interpreter, source=sealer.seal_text(source),
            input=None if child_input is None else sealer.seal_json(child_input),
            required_caps=required_caps(filename, interpreter))
    return web.json_response({"run_id": child})


async def submit_activity(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    argv = body.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidArgument("argv must be a non-empty list of strings")
    retry_on = body.get("retry_on")
    if retry_on is not None and (not isinstance(retry_on, list)
                                 or not all(isinstance(c, int) for c in retry_on)):
        raise InvalidArgument("retry_on must be a list of exit codes")
    sealer = await request.app[KEYS].sealer(org)
    # The child is a one-line shell script running the command exactly as given.
    source = "exec " + shlex.join(argv) + "\n"
    async with connection(request.app[POOL], position(body)) as conn:
        child = await engine.submit_activity(
            conn, run_id, claim_token(body), path=_str(body, "path"), name=_str(body, "name"),
            source=sealer.seal_text(source), required_caps=["shell"],
            retries=_int({"r": body.get("retries", 0)}, "r"),
            retry_backoff=_float(body, "retry_backoff", 0.0) or 0.0, retry_on=retry_on)
    return web.json_response({"run_id": child})


async def collect_activity(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL], position(body)) as conn:
        parked, child, code = await engine.collect_activity(
            conn, run_id, claim_token(body), path=_str(body, "path"), ordinal=_int(body, "ordinal"),
            name=_str(body, "name"))
        stdout = "" if parked else await child_output(conn, sealer, child)
    return web.json_response({"parked": parked, "run_id": child, "exit_code": code,
                              "stdout": stdout})


async def wait_all(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    async with connection(request.app[POOL], position(body)) as conn:
        parked, failed = await engine.wait_all_activities(
            conn, run_id, claim_token(body), path=_str(body, "path"), ordinal=_int(body, "ordinal"))
    return web.json_response({"parked": parked, "failed": failed})


async def set_output(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        await engine.set_output(conn, run_id, claim_token(body), _str(body, "key"),
                                sealer.seal_json({"answer": body.get("value")}))
    return web.json_response({})


async def acquire_lock(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    async with connection(request.app[POOL], position(body)) as conn:
        granted = await engine.acquire_lock(
            conn, run_id, claim_token(body), path=_str(body, "path"), ordinal=_int(body, "ordinal"),
            group=_str(body, "group"), scoped=bool(body.get("scoped", True)))
    return web.json_response({"granted": granted})


async def release_lock(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    async with connection(request.app[POOL]) as conn:
        released = await engine.release_lock(conn, run_id, claim_token(body), _str(body, "group"))
    return web.json_response({"released": released})


# -- user routes ------------------------------------------------------------------------------

async def send_signal(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = request.match_info["org"], request.match_info["project"]
    run_id = request.match_info["run"]
    if not run_id.startswith(f"{org}:{project}:"):
        raise RunNotFound(f"no run {run_id} in {org}/{project}")
    body = await json_body(request) if request.can_read_body else {}
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        signal_id = await engine.send_signal(conn, run_id, request.match_info["name"],
                                             sealer.seal_json({"answer": body.get("payload")}))
    return web.json_response({"signal_id": signal_id}, status=201)


async def publish_event(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = request.match_info["org"], request.match_info["project"]
    body = await json_body(request) if request.can_read_body else {}
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        event_id = await engine.publish_event(conn, org, project, request.match_info["name"],
                                              sealer.seal_json({"answer": body.get("payload")}))
    return web.json_response({"event_id": event_id}, status=201)


async def list_events(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = request.match_info["org"], request.match_info["project"]
    try:
        limit = int(request.query.get("limit", "50"))
    except ValueError as exc:
        raise InvalidArgument("limit must be an integer") from exc
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        events = await engine.list_events(conn, org, project, request.query.get("name"), limit)
    return web.json_response({"events": [
        {"id": e.id, "name": e.name, "payload": _answer(sealer, e.payload, e.payload_clear),
         "emitted_by_run": e.emitted_by_run, "created_at": e.created_at.isoformat()}
        for e in events]})


async def run_outputs(conn: AsyncConnection, sealer: Sealer, run_id: str) -> dict[str, Any]:
    return {key: sealer.open_json(value).get("answer")
            for key, value in await engine.read_outputs(conn, run_id)}


def add_routes(app: web.Application) -> None:
    agent = "/api/v1/agent/runs/{run}"
    app.router.add_post(f"{agent}/waits/{{kind}}", wait)
    app.router.add_post(f"{agent}/emit", emit)
    app.router.add_post(f"{agent}/spawn", spawn)
    app.router.add_post(f"{agent}/activities", submit_activity)
    app.router.add_post(f"{agent}/activities/collect", collect_activity)
    app.router.add_post(f"{agent}/activities/wait-all", wait_all)
    app.router.add_post(f"{agent}/outputs", set_output)
    app.router.add_post(f"{agent}/locks/acquire", acquire_lock)
    app.router.add_post(f"{agent}/locks/release", release_lock)
    user = "/api/v1/orgs/{org}/projects/{project}"
    app.router.add_post(f"{user}/runs/{{run}}/signal/{{name}}", send_signal)
    app.router.add_get(f"{user}/events", list_events)
    app.router.add_post(f"{user}/events/{{name}}", publish_event)
