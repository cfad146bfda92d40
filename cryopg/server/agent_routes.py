"""`/api/v1/agent/…`: long-poll claims and the reports of a claimed run.

Every report carries the claim token; the SQL function refuses a stale one (CR002),
which reaches the agent as 409 stale_claim.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import uuid
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Claim
from cryopg.errors import InvalidArgument, Unreadable
from cryopg.server.auth import agent_run, require_agent
from cryopg.server.bodies import claim_token, json_body, position
from cryopg.server.state import CONFIG, KEYS, NOTIFIER, POOL

DEFAULT_CAPS = ["shell", "polyglot"]
# How often a claiming agent's row in cryo.agents is refreshed (last_seen_at, caps).
AGENT_REFRESH_SECONDS = 30.0
AGENTS_SEEN = web.AppKey("agents_seen", dict)



async def _grant(request: web.Request, org: str, claim: Claim) -> dict[str, Any] | None:
    """Opens what the claim carries. A payload that will not open (altered bytes, or an
    org key this server's master key cannot unwrap) ends the run as unreadable rather
    than letting it run without its recorded answers."""
    from cryopg.server.wait_routes import grant_entry  # it builds on this module

    app = request.app
    try:
        sealer = await app[KEYS].sealer(org)
        source = sealer.open_text(claim.source)
        if claim.input_clear is not None:
            input_value = claim.input_clear
            async with connection(app[POOL]) as conn:
                await engine.seal_run_input(conn, claim.run_id, claim.claim_token,
                                            sealer.seal_json(input_value))
        else:
            input_value = sealer.open_json(claim.input) if claim.input is not None else None
        async with connection(app[POOL]) as conn:
            memos = await engine.read_journal(conn, claim.run_id, claim.claim_token)
            found = await engine.claim_secrets(conn, claim.run_id, claim.claim_token)
            journal = [await grant_entry(conn, sealer, m) for m in memos]
        # Plaintext secrets exist only here, in the grant of a trusted run's live claim.
        secrets = {s.name: sealer.open_text(s.value) for s in found
                   if not s.withheld and s.value is not None}
        withheld = [s.name for s in found if s.withheld]
    except Unreadable as exc:
        await finish_unreadable(request, claim.run_id, claim.claim_token, exc)
        return None
    return {"run_id": claim.run_id, "claim_token": str(claim.claim_token),
            "attempt": claim.attempt, "filename": claim.filename,
            "interpreter": claim.interpreter, "source": source, "input": input_value,
            "lease_seconds": app[CONFIG].lease_seconds, "journal": journal,
            "secrets": secrets, "withheld": withheld}


async def finish_unreadable(request: web.Request, run_id: str, token: uuid.UUID,
                            exc: Unreadable) -> None:
    async with connection(request.app[POOL]) as conn:
        await engine.finish_run(conn, run_id, token, "unreadable", None, f"unreadable: {exc}")


async def unreadable_in_run(request: web.Request, exc: Unreadable) -> None:
    """An agent's in-run call met a payload that will not open (a memo, a state value, or
    the org key itself): the run ends unreadable, and the agent's next call finds its
    claim gone and stops the script. Best effort: without a claim token nothing ends."""
    run_id = request.match_info.get("run")
    if not run_id or not request.path.startswith("/api/v1/agent/runs/"):
        return
    try:
        body = await request.json()
        token = uuid.UUID(str(body.get("claim_token")))
    except (ValueError, TypeError, AttributeError):
        return
    try:
        await finish_unreadable(request, run_id, token, exc)
    except Exception:  # noqa: BLE001 - a stale claim here means someone else ended it
        pass


async def claim(request: web.Request) -> web.StreamResponse:
    info = await require_agent(request)
    body = await json_body(request)
    agent_id = str(body.get("agent_id") or "")
    if not agent_id:
        raise InvalidArgument("agent_id is required")
    asked = [str(c) for c in body.get("capabilities") or DEFAULT_CAPS]
    # The token's ceiling bounds what a claim may serve, whatever the agent advertises.
    caps = [c for c in asked if c in info.capabilities]
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
    while True:
        woken = request.app[NOTIFIER].work_event()
        transport = request.transport
        if transport is None or transport.is_closing() or request.app[NOTIFIER].closing:
            # The agent hung up, or the server is stopping: claim nothing for it.
            return web.Response(status=204)
        async with connection(request.app[POOL]) as conn:
            got = await engine.claim_job(conn, info.org, agent_id, caps, cfg.lease_seconds)
        if got is not None:
            grant = await _grant(request, info.org, got)
            if grant is not None:
                return web.json_response(grant)
            continue
        remaining = deadline - loop.time()
        if remaining <= 0:
            return web.Response(status=204)
        try:
            # Re-check every few seconds even without a notify: the poll backstop.
            await asyncio.wait_for(woken.wait(), min(remaining, 5.0))
        except TimeoutError:
            pass


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
                                         request.app[CONFIG].lease_seconds)
    return web.json_response({"cancel": bool(cancel)})


async def steps(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    try:
        ordinal = int(body["ordinal"])
        exit_code = None if body.get("exit_code") is None else int(body["exit_code"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument("ordinal and exit_code must be integers") from exc
    sealer = await request.app[KEYS].sealer(org)
    result = sealer.seal_json({"stdout": str(body.get("stdout") or "")})
    async with connection(request.app[POOL], position(body)) as conn:
        seq = await engine.record_step(
            conn, run_id, claim_token(body), path=str(body.get("path") or ""),
            family=str(body.get("family") or ""), name=str(body.get("name") or ""),
            ordinal=ordinal, label=body.get("label"), result=result, exit_code=exit_code)
    return web.json_response({"seq": seq})


async def park(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    try:
        seconds = float(body["seconds"])
        ordinal = int(body["ordinal"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument("seconds must be a number and ordinal an integer") from exc
    async with connection(request.app[POOL], position(body)) as conn:
        wake_at = await engine.park_sleep(conn, run_id, claim_token(body),
                                          path=str(body.get("path") or ""),
                                          ordinal=ordinal, seconds=seconds)
    return web.json_response({"wake_at": wake_at.isoformat()})


async def annotate(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    sealed = (await request.app[KEYS].sealer(org)).seal_text(str(body.get("text") or ""))
    async with connection(request.app[POOL]) as conn:
        await engine.annotate_run(conn, run_id, claim_token(body), sealed)
    return web.json_response({})


async def finish(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    exit_code = body.get("exit_code")
    if exit_code is not None and not isinstance(exit_code, int):
        raise InvalidArgument("exit_code must be an integer")
    error = body.get("error")
    async with connection(request.app[POOL]) as conn:
        await engine.finish_run(conn, run_id, claim_token(body), str(body.get("outcome") or ""),
                                exit_code, None if error is None else str(error))
    return web.json_response({})


async def release(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    async with connection(request.app[POOL]) as conn:
        await engine.release_claim(conn, run_id, claim_token(body))
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    base = "/api/v1/agent"
    app.router.add_post(f"{base}/claim", claim)
    app.router.add_post(f"{base}/runs/{{run}}/logs", logs)
    app.router.add_post(f"{base}/runs/{{run}}/steps", steps)
    app.router.add_post(f"{base}/runs/{{run}}/park", park)
    app.router.add_post(f"{base}/runs/{{run}}/annotate", annotate)
    app.router.add_post(f"{base}/runs/{{run}}/finish", finish)
    app.router.add_post(f"{base}/runs/{{run}}/release", release)
