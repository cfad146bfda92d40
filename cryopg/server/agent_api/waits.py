"""The waits a script reaches, and the runs it starts: signals, bus events, emits,
child runs, fan-out activities, outputs and project leases.

Payloads are sealed here as {"answer": value} (see cryopg/payloads.py for why that shape).
"""

from __future__ import annotations

import shlex

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.payloads import answer, child_output
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import agent_claim, agent_run
from cryopg.server.bodies import (
    INT4,
    duration,
    json_body,
    recorded_at,
    str_field,
    to_int,
)
from cryopg.server.trust_flags import PUBLIC, TAINTED, flag


async def wait(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    kind = request.match_info["kind"]
    waiter = {"signal": engine.wait_signal, "event": engine.wait_event}.get(kind)
    if waiter is None:
        raise InvalidArgument(f"no wait of kind {kind}")
    sealer = await request.app[KEYS].sealer(org)
    # A trusted run's opt-in to untrusted runs' events of the name (events only).
    extra = {"tainted": True} if kind == "event" and flag(body, TAINTED) else {}
    async with connection(request.app[POOL]) as conn:
        got = await waiter(conn, run_id, token, **recorded_at(body),
                           name=str_field(body, "name"), ordinal=to_int(body, "ordinal"),
                           timeout=duration(body, "timeout"), **extra)
    return web.json_response({"parked": got.parked, "timed_out": got.timed_out,
                              "payload": answer(sealer, got.payload, got.payload_clear)})


async def emit(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        event_id = await engine.emit_from_run(
            conn, run_id, token, **recorded_at(body),
            ordinal=to_int(body, "ordinal"), name=str_field(body, "name"),
            payload=sealer.seal_json({"answer": body.get("payload")}),
            public=flag(body, PUBLIC))
    return web.json_response({"event_id": event_id})


async def spawn(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sealer = await request.app[KEYS].sealer(org)
    filename, source = str_field(body, "filename"), body.get("source")
    if not isinstance(source, str):
        raise InvalidArgument("source must be a string")
    interpreter = body.get("interpreter") or None
    child_input = body.get("input")
    async with connection(request.app[POOL]) as conn:
        child = await engine.spawn_run(
            conn, run_id, token, **recorded_at(body),
            ordinal=to_int(body, "ordinal"), filename=filename, interpreter=interpreter,
            source=sealer.seal_text(source),
            input=None if child_input is None else sealer.seal_json(child_input),
            required_caps=None)  # cryo._required_caps decides
    return web.json_response({"run_id": child})


async def submit_activity(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    argv = body.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise InvalidArgument("argv must be a non-empty list of strings")
    retry_on = body.get("retry_on")
    if retry_on is not None and (not isinstance(retry_on, list)
                                 or not all(isinstance(c, int) and not isinstance(c, bool)
                                            and INT4[0] <= c <= INT4[1] for c in retry_on)):
        raise InvalidArgument("retry_on must be a list of exit codes")
    sealer = await request.app[KEYS].sealer(org)
    # The child is a one-line shell script running the command exactly as given.
    source = "exec " + shlex.join(argv) + "\n"
    async with connection(request.app[POOL]) as conn:
        child = await engine.submit_activity(
            conn, run_id, token, **recorded_at(body),
            name=str_field(body, "name"), source=sealer.seal_text(source),
            required_caps=["shell"], retries=to_int({"r": body.get("retries", 0)}, "r"),
            retry_backoff=duration(body, "retry_backoff", 0.0) or 0.0, retry_on=retry_on)
    return web.json_response({"run_id": child})


async def collect_activity(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        parked, child, code = await engine.collect_activity(
            conn, run_id, token, **recorded_at(body),
            ordinal=to_int(body, "ordinal"), name=str_field(body, "name"))
        stdout = "" if parked else await child_output(conn, sealer, child)
    return web.json_response({"parked": parked, "run_id": child, "exit_code": code,
                              "stdout": stdout})


async def wait_all(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    async with connection(request.app[POOL]) as conn:
        parked, failed = await engine.wait_all_activities(
            conn, run_id, token, **recorded_at(body),
            ordinal=to_int(body, "ordinal"))
    return web.json_response({"parked": parked, "failed": failed})


async def set_output(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        await engine.set_output(conn, run_id, token, str_field(body, "key"),
                                sealer.seal_json({"answer": body.get("value")}))
    return web.json_response({})


async def acquire_lease(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    async with connection(request.app[POOL]) as conn:
        granted = await engine.acquire_lease(
            conn, run_id, token, **recorded_at(body),
            ordinal=to_int(body, "ordinal"), group=str_field(body, "group"),
            scoped=bool(body.get("scoped", True)))
    return web.json_response({"granted": granted})


async def release_lease(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    async with connection(request.app[POOL]) as conn:
        released = await engine.release_lease(conn, run_id, token,
                                             str_field(body, "group"))
    return web.json_response({"released": released})


def add_routes(app: web.Application) -> None:
    add_run_route(app, "waits/{kind}", wait)
    add_run_route(app, "emit", emit)
    add_run_route(app, "spawn", spawn)
    add_run_route(app, "activities", submit_activity)
    add_run_route(app, "activities/collect", collect_activity)
    add_run_route(app, "activities/wait-all", wait_all)
    add_run_route(app, "outputs", set_output)
    add_run_route(app, "locks/acquire", acquire_lease)
    add_run_route(app, "locks/release", release_lease)
