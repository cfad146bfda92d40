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
import sys
import uuid
from collections.abc import Awaitable
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import ClaimGrant, TokenInfo
from cryopg.errors import Draining, InvalidArgument, LogGap
from cryopg.seal import Sealer
from cryopg.server import agents
from cryopg.server.agent_api.batching import CLAIMS, FINISHES, ClaimAsk
from cryopg.server.agent_api.grant import grant, held_token
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.app_state import CONFIG, KEYS, POOL
from cryopg.server.auth import agent_claim, agent_id_of, agent_run, require_agent
from cryopg.server.bodies import json_body

DEFAULT_CAPS = ["shell", "polyglot"]
# Notes of agents gone, made after their cancelled handler returned.
_NOTING: set[asyncio.Future[None]] = set()


async def claim(request: web.Request) -> web.StreamResponse:
    info = await require_agent(request)
    ask = _claim_ask(request, info, await json_body(request))
    got = await _long_poll(request, info, *ask)
    if got is None:
        return web.Response(status=204)
    return await _deliver(request, got, got[0])


def connected(request: web.Request) -> bool:
    """The agent's end of the request is still open (behind a balancer: the balancer's,
    which with `option abortonclose` closes it when the agent's closes)."""
    transport = request.transport
    return transport is not None and not transport.is_closing()


async def _deliver(request: web.Request, got: tuple[dict[str, Any], ClaimGrant],
                   body: dict[str, Any]) -> web.StreamResponse:
    """Answers with a grant, or hands the claim back (attempt uncounted) when the agent's
    connection closed before the answer could be written: a grant nobody reads would
    hold the run until its claim expired, and then run it at the next attempt."""
    granted, claim = got
    resp = web.json_response(body)
    if connected(request):
        try:
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        except (ConnectionError, RuntimeError):
            pass
    await _hand_back(request.app, claim)
    _log_returned(granted["run_id"])
    return resp


async def _hand_back(app: web.Application, claim: ClaimGrant) -> None:
    try:
        async with connection(app[POOL]) as conn:
            await engine.return_claim(conn, claim.claim.run_id, held_token(claim))
    except Exception as exc:  # noqa: BLE001 - it expires as any unanswered claim does
        print(f"cryopg: handing back run {claim.claim.run_id} failed ({exc}); it resumes "
              "when its claim expires", file=sys.stderr)


def _log_returned(run_id: str) -> None:
    print(f"cryopg: the agent's connection closed before run {run_id} reached it; handed "
          "it back", file=sys.stderr)


def _claim_ask(request: web.Request, info: TokenInfo,
               body: dict[str, Any]) -> tuple[str, list[str], float]:
    """(agent_id, capabilities, wait) from a claim's body, checked."""
    agent_id = agent_id_of(body.get("agent_id"))
    asked = body.get("capabilities") or DEFAULT_CAPS
    if not isinstance(asked, list):
        raise InvalidArgument("capabilities must be a list")
    agents.note_report(request, body)  # build and instance, for the agent's refresh
    # The token's ceiling bounds what a claim may serve, whatever the agent advertises.
    # "graph" is the server drivers' own: no agent ever takes a graph run.
    # "isolated" is no privilege but a promise the agent confines untrusted jobs; it only
    # widens what it takes to runs that carry no secrets.
    caps = [str(c) for c in asked
            if (str(c) in info.capabilities or c == "isolated") and c != "graph"]
    cfg = request.app[CONFIG]
    wait = body.get("wait", cfg.claim_wait_max)
    if isinstance(wait, bool) or not isinstance(wait, int | float):
        raise InvalidArgument("wait must be a number of seconds")
    return agent_id, caps, max(0.0, min(float(wait), cfg.claim_wait_max))


async def _long_poll(request: web.Request, info: TokenInfo, agent_id: str, caps: list[str],
                     wait: float) -> tuple[dict[str, Any], ClaimGrant] | None:
    """The grant of a run claimed for this agent (and the claim), or None when nothing
    came within `wait` seconds or the agent hung up (then it is noted gone)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    await _seen(request, info, agent_id, caps)

    def alive() -> bool:  # an agent that hung up (or is draining) gets nothing claimed
        return connected(request) and not agents.draining(request.app, info.org, agent_id)

    def hung_up() -> Awaitable[None]:
        _, instance = request.get(agents.REPORT) or (None, None)
        return agents.gone(request.app, info.org, agent_id, instance)

    while True:
        try:
            got = await request.app[CLAIMS].claim(info.org, agent_id, caps,
                                                  max(0.0, deadline - loop.time()), alive,
                                                  agent_token=info.token_id)
        except asyncio.CancelledError:  # a server that cancels handlers of closed requests
            if not connected(request):
                task = asyncio.ensure_future(hung_up())
                _NOTING.add(task)
                task.add_done_callback(_NOTING.discard)
            raise
        if got is None:
            if not connected(request):
                await hung_up()
            return None
        if not connected(request):  # closed while the claim was made: never opened
            await _hand_back(request.app, got)
            _log_returned(got.claim.run_id)
            continue  # and the loop notes it gone
        granted = await grant(request, info.org, got)
        if granted is not None:
            agents.note_grant(request.app, info.org, agent_id)
            return granted, got


async def _seen(request: web.Request, info: TokenInfo, agent_id: str, caps: list[str]) -> None:
    """Refreshes the agent's row in cryo.agents now and then (a write per claim would tax
    every job); a draining agent is refused here (server/agents.py)."""
    await agents.seen(request, info, agent_id, caps)


async def logs(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    try:
        data = base64.b64decode(body.get("data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidArgument("data must be base64") from exc
    offset = _log_offset(body)
    sealer = await request.app[KEYS].sealer(org)
    context = _log_context(body)
    answer: dict[str, Any] = {}
    async with connection(request.app[POOL]) as conn:
        if offset is None:  # an agent from before offsets: every post is stored
            cancel = await engine.append_log(conn, run_id, token,
                                             sealer.seal(data) if data else None,
                                             request.app[CONFIG].claim_seconds)
        else:
            try:
                cancel, answer["log_end"] = await _append_at(
                    conn, sealer, request.app[CONFIG].claim_seconds, run_id, token, offset,
                    data)
            except LogGap as exc:
                return _gap(exc)
        if context is not None:  # a pass that may park hands its log masker's context on
            await engine.keep_log_context(conn, run_id, token,
                                          sealer.seal(context) if context else None)
    return web.json_response({"cancel": bool(cancel), **answer})


async def _append_at(conn: AsyncConnection, sealer: Sealer, seconds: float, run_id: str,
                     token: uuid.UUID, offset: int, data: bytes) -> tuple[bool, int]:
    """Stores `data` (plain) at `offset` of the pass's log unless it is stored already
    (cryo.append_log_at); a repeat that runs past the stored end (the answer to an
    earlier post was lost, and the agent's buffer grew meanwhile) has its new tail sealed
    and stored at that end. Returns (cancel, the stored end)."""
    cancel, end = await engine.append_log_at(conn, run_id, token, offset, len(data),
                                             sealer.seal(data) if data else None, seconds)
    if offset < end < offset + len(data):
        tail = data[end - offset:]
        cancel, end = await engine.append_log_at(conn, run_id, token, end, len(tail),
                                                 sealer.seal(tail), seconds)
    return cancel, end


def _gap(exc: LogGap) -> web.Response:
    """409 log_gap, with the stored end the agent's next chunk must start at."""
    return web.json_response({"error": {"code": exc.code, "message": str(exc),
                                        "log_end": exc.log_end}}, status=exc.http_status)


def _log_offset(body: dict[str, Any]) -> int | None:
    """`offset`: where the post's first byte falls in the pass's log (sent after
    masking), so a repeat is stored once; absent from agents that predate it."""
    got = body.get("offset")
    if got is None:
        return None
    if isinstance(got, bool) or not isinstance(got, int) or not 0 <= got < 2**62:
        raise InvalidArgument("offset must be a whole number of bytes, at least 0")
    return got


MAX_LOG_CONTEXT = 64 << 10


def _log_context(body: dict[str, Any]) -> bytes | None:
    """`context`: the agent's log masker's last bytes (base64), for the next pass."""
    got = body.get("context")
    if got is None:
        return None
    try:
        context = base64.b64decode(got, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidArgument("context must be base64") from exc
    if len(context) > MAX_LOG_CONTEXT:
        raise InvalidArgument(f"context must be at most {MAX_LOG_CONTEXT} bytes")
    return context


async def finish(request: web.Request) -> web.Response:
    """Ends the run. With "claim" (what a claim's body holds), the same transaction also
    claims the agent's next run, and the answer is {"next": grant or null}; with nothing
    pending and a wait, the request then long-polls like a claim."""
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    ask = body.get("claim")
    if ask is not None and not isinstance(ask, dict):
        raise InvalidArgument("claim must be an object")
    info = await require_agent(request)
    claim_ask = None if ask is None else _claim_ask(request, info, ask)
    exit_code = body.get("exit_code")
    if exit_code is not None and (not isinstance(exit_code, int) or isinstance(exit_code, bool)
                                  or not -2**31 <= exit_code < 2**31):
        raise InvalidArgument("exit_code must be an integer (32-bit)")
    error = body.get("error")
    # The script's last output comes with its end, so a short job costs one request.
    try:
        data = base64.b64decode(body.get("data") or "", validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidArgument("data must be base64") from exc
    offset = _log_offset(body)
    sealer = await request.app[KEYS].sealer(org)
    sealed = sealer.seal(data) if data else None
    ask = None
    drain = False
    if claim_ask is not None:
        try:
            await _seen(request, info, claim_ask[0], claim_ask[1])
        except Draining:  # it ends this run and gets no next one; its next claim is refused
            claim_ask, drain = None, True
    if claim_ask is not None:
        ask = ClaimAsk(info.org, claim_ask[0], tuple(claim_ask[1]), info.token_id)
    outcome, said = str(body.get("outcome") or ""), None if error is None else str(error)
    try:
        got = await request.app[FINISHES].finish(run_id, token, outcome, exit_code, said,
                                                 sealed, ask, offset, len(data))
    except LogGap as exc:
        # The last bytes overlap the stored log (an earlier post's answer was lost):
        # the new tail alone goes with the finish; a real gap is the agent's to mend.
        end = exc.log_end
        if offset is None or end is None or not offset < end < offset + len(data):
            return _gap(exc)
        tail = data[end - offset:]
        got = await request.app[FINISHES].finish(run_id, token, outcome, exit_code, said,
                                                 sealer.seal(tail), ask, end, len(tail))
    if claim_ask is None:
        return web.json_response({"next": None, "drain": True} if drain else {})
    granted = None if got is None else await grant(request, info.org, got)
    if granted is not None and got is not None:
        agents.note_grant(request.app, info.org, claim_ask[0])
        return await _deliver(request, (granted, got), {"next": granted})
    if claim_ask[2] > 0:
        try:
            polled = await _long_poll(request, info, *claim_ask)
        except Draining:  # asked while it finished: the run is ended all the same
            return web.json_response({"next": None, "drain": True})
        if polled is not None:
            return await _deliver(request, polled, {"next": polled[0]})
    return web.json_response({"next": None})


async def release(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    async with connection(request.app[POOL]) as conn:
        await engine.release_claim(conn, run_id, token)
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/agent/claim", claim)
    add_run_route(app, "logs", logs)
    add_run_route(app, "finish", finish)
    add_run_route(app, "release", release)
