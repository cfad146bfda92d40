"""`/api/v1/agent/claim` (the long poll) and the calls that keep or end a claim: logs
(which double as the heartbeat), finish and release.

A claim is one round trip: the long poll answers with the whole grant (script, input,
memos, secrets), read in the claim's own transaction. A finish is one round trip too:
it carries the script's last log bytes. Both go through batching.py, which commits
what several agents ask at once in one transaction."""

from __future__ import annotations

import asyncio
import base64
import binascii

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.agent_api.batching import CLAIMS, FINISHES
from cryopg.server.agent_api.grant import grant
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.auth import agent_run, require_agent
from cryopg.server.bodies import claim_token, json_body
from cryopg.server.state import CONFIG, KEYS, POOL

DEFAULT_CAPS = ["shell", "polyglot"]
# How often a claiming agent's row in cryo.agents is refreshed (last_seen_at, caps).
AGENT_REFRESH_SECONDS = 30.0
AGENTS_SEEN = web.AppKey("agents_seen", dict)


async def claim(request: web.Request) -> web.StreamResponse:
    info = await require_agent(request)
    body = await json_body(request)
    agent_id = str(body.get("agent_id") or "")
    if not agent_id:
        raise InvalidArgument("agent_id is required")
    asked = [str(c) for c in body.get("capabilities") or DEFAULT_CAPS]
    # The token's ceiling bounds what a claim may serve, whatever the agent advertises.
    # "graph" is the server drivers' own: no agent ever takes a graph run.
    caps = [c for c in asked if c in info.capabilities and c != "graph"]
    cfg = request.app[CONFIG]
    wait = max(0.0, min(float(body.get("wait", cfg.claim_wait_max)), cfg.claim_wait_max))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    seen = request.app[AGENTS_SEEN]
    key = (info.org, agent_id, tuple(caps))
    if seen.get(key, 0.0) < loop.time():  # a write per claim would tax every job
        async with connection(request.app[POOL]) as conn:
            await engine.register_agent(conn, info.org, agent_id, caps)
        if len(seen) > 10_000:
            seen.clear()
        seen[key] = loop.time() + AGENT_REFRESH_SECONDS

    def alive() -> bool:  # an agent that hung up gets nothing claimed for it
        transport = request.transport
        return transport is not None and not transport.is_closing()

    while True:
        got = await request.app[CLAIMS].claim(info.org, agent_id, caps,
                                              max(0.0, deadline - loop.time()), alive)
        if got is None:
            return web.Response(status=204)
        granted = await grant(request, info.org, got)
        if granted is not None:
            return web.json_response(granted)


async def logs(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    try:
        data = base64.b64decode(body.get("data") or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgument("data must be base64") from exc
    sealed = (await request.app[KEYS].sealer(org)).seal(data) if data else None
    async with connection(request.app[POOL]) as conn:
        cancel = await engine.append_log(conn, run_id, claim_token(body), sealed,
                                         request.app[CONFIG].claim_seconds)
    return web.json_response({"cancel": bool(cancel)})


async def finish(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    exit_code = body.get("exit_code")
    if exit_code is not None and not isinstance(exit_code, int):
        raise InvalidArgument("exit_code must be an integer")
    error = body.get("error")
    # The script's last output comes with its end, so a short job costs one request.
    try:
        data = base64.b64decode(body.get("data") or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgument("data must be base64") from exc
    sealed = (await request.app[KEYS].sealer(org)).seal(data) if data else None
    await request.app[FINISHES].finish(run_id, claim_token(body), str(body.get("outcome") or ""),
                                       exit_code, None if error is None else str(error), sealed)
    return web.json_response({})


async def release(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    async with connection(request.app[POOL]) as conn:
        await engine.release_claim(conn, run_id, claim_token(body))
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/agent/claim", claim)
    add_run_route(app, "logs", logs)
    add_run_route(app, "finish", finish)
    add_run_route(app, "release", release)
