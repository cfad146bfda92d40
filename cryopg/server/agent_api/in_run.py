"""What every in-run agent route (`/api/v1/agent/runs/{run}/…`) shares: its
registration, and ending the run when a payload it needs will not open.

A memo, a state value or the org key itself that will not open (altered bytes, or an
org key this server's master key cannot unwrap) must not let the script go on without
its recorded answers: the run ends unreadable, and the agent's next call finds its
claim gone and stops the script. The error then reaches the agent as usual, mapped by
the app's error middleware.

Every one of these routes needs the run's live claim, presented with the agent token
that took it: writes check it in the SQL function that writes, reads first call
cryo.check_claim in their transaction.
"""

from __future__ import annotations

import functools
import uuid

from aiohttp import web
from aiohttp.typedefs import Handler

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, Unreadable
from cryopg.server.app_state import POOL
from cryopg.server.auth import agent_claim

RUN_ROUTE = "/api/v1/agent/runs/{run}"


async def finish_unreadable(request: web.Request, run_id: str, token: uuid.UUID,
                            exc: Unreadable) -> None:
    async with connection(request.app[POOL]) as conn:
        await engine.finish_run(conn, run_id, token, "unreadable", None, f"unreadable: {exc}")


async def _end_run(request: web.Request, exc: Unreadable) -> None:
    """Best effort: without a claim token in the body nothing ends."""
    run_id = request.match_info.get("run")
    if not run_id:
        return
    try:
        body = await request.json()
        token = await agent_claim(request, body)
    except (CryoError, ValueError, TypeError, AttributeError):
        return
    try:
        await finish_unreadable(request, run_id, token, exc)
    except Exception:  # noqa: BLE001 - a stale claim here means someone else ended it
        pass


def ends_run_when_unreadable(handler: Handler) -> Handler:
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Unreadable as exc:
            await _end_run(request, exc)
            raise

    return wrapped


def add_run_route(app: web.Application, suffix: str, handler: Handler) -> None:
    """POST `/api/v1/agent/runs/{run}/<suffix>`, ending the run on an unreadable payload."""
    app.router.add_post(f"{RUN_ROUTE}/{suffix}", ends_run_when_unreadable(handler))
