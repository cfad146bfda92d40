"""Agents as operators see and steer them: `GET /api/v1/orgs/{org}/agents`,
`POST /api/v1/orgs/{org}/agents/drain` (by build or id), an agent's own
`POST /api/v1/agent/drain` (what `cryopg agent --drain` sends), and
`POST /api/v1/agent/state`, where an agent process says it is draining (SIGTERM) or gone
(exiting). A claim long-poll closed from the agent's end marks it gone too (claims.py).

A drain is a mark in the database (cryo.drain_agents), which notifies `cryo_drain` at
commit: every replica adds the agents named to its set at once (and re-reads all marks
on its tick, and after its notifier reconnects), so the claim path asks memory, not the
database, whether an agent is draining: a draining agent keeps the run it holds, its
finish hands it no next run, and its next claim is refused with `draining`, on which it
exits. An agent's refresh of its row (build, process instance, last run received) happens
now and then, never per claim; a new instance under the same id (a restarted agent)
clears an old drain.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from collections.abc import Callable
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import TokenInfo
from cryopg.errors import Draining, InvalidArgument
from cryopg.server.app_state import NOTIFIER, POOL
from cryopg.server.auth import ADMIN, VIEWER, agent_id_of, require_agent, require_user
from cryopg.server.bodies import json_body, optional_str_field
from cryopg.server.render import iso

REFRESH_SECONDS = 10.0  # how often a claiming agent's row is refreshed (its last contact)
DRAIN_CHANNEL = "cryo_drain"
DRAINING = web.AppKey("draining_agents", set)
SEEN = web.AppKey("agents_refreshed", dict)
LAST_GRANT = web.AppKey("agents_last_grant", dict)
# The request key of what a claim reported (build, instance); as limits.BODY.
REPORT: Any = (web.RequestKey("cryo_agent_report", tuple) if hasattr(web, "RequestKey")
               else "cryo_agent_report")


def note_report(request: web.Request, body: dict[str, Any]) -> None:
    """Keeps what a claim body says of its agent (build, process instance) for `seen`."""
    request[REPORT] = (optional_str_field(body, "build", 200),
                       optional_str_field(body, "instance", 64))


def draining(app: web.Application, org: str, agent_id: str) -> bool:
    return (org, agent_id) in app[DRAINING]


def note_grant(app: web.Application, org: str, agent_id: str) -> None:
    grants: dict[tuple[str, str], dt.datetime] = app[LAST_GRANT]
    if len(grants) > 10_000:
        grants.clear()
    grants[(org, agent_id)] = dt.datetime.now(dt.UTC)


async def seen(request: web.Request, info: TokenInfo, agent_id: str, caps: list[str]) -> None:
    """Refreshes the agent's row now and then; raises Draining when it is asked to drain."""
    app = request.app
    build, instance = request.get(REPORT) or (None, None)
    now = dt.datetime.now(dt.UTC).timestamp()
    refreshed = app[SEEN]
    key = (info.org, agent_id, tuple(caps), build, instance)
    if refreshed.get(key, 0.0) < now:
        async with connection(app[POOL]) as conn:
            asked = await engine.register_agent(
                conn, info.org, agent_id, caps, build, instance,
                app[LAST_GRANT].get((info.org, agent_id)))
        if asked:
            app[DRAINING].add((info.org, agent_id))
        else:  # a restarted agent: the drain was its predecessor's
            app[DRAINING].discard((info.org, agent_id))
        if len(refreshed) > 10_000:
            refreshed.clear()
        refreshed[key] = now + REFRESH_SECONDS
    if draining(app, info.org, agent_id):
        raise Draining(f"agent {agent_id} is draining: it takes no new run")


async def refresh_drains(app: web.Application) -> None:
    """A tick round: the drain marks as the database holds them."""
    async with connection(app[POOL]) as conn:
        _replace(app, await engine.draining_agents(conn))


def drain_hook(app: web.Application) -> Callable[[str | None], None]:
    """What the notifier calls on `cryo_drain`: the agents named are refused from now on,
    before any later notify wakes a claim; then every mark is re-read (None: a reconnect,
    notes may have been missed)."""
    refreshing: set[asyncio.Task[None]] = set()

    async def reread() -> None:
        try:
            await refresh_drains(app)
        except Exception as exc:  # noqa: BLE001 - the tick reads them again
            if not app[POOL].closed:  # a server that is stopping has nothing to say
                print(f"cryopg: reading drain marks failed ({exc})", file=sys.stderr)

    def heard(payload: str | None) -> None:
        try:
            note = json.loads(payload) if payload else {}
            org, ids = note.get("org"), note.get("ids") or []
            app[DRAINING].update((str(org), str(i)) for i in ids)
        except (ValueError, AttributeError, TypeError):
            pass  # not ours to fail on: the re-read below has the marks
        if NOTIFIER in app and app[NOTIFIER].closing:
            return  # shutting down (close_waiters wakes every hook): the pool is going
        task = asyncio.ensure_future(reread())
        refreshing.add(task)
        task.add_done_callback(refreshing.discard)
        if payload and NOTIFIER in app:
            app[NOTIFIER].wake_work()  # a held claim of a draining agent answers now

    return heard


def _replace(app: web.Application, marks: set[tuple[str, str]]) -> None:
    held = app[DRAINING]  # in place: the app's state is frozen once it runs
    held.clear()
    held.update(marks)


def _agent_json(a: engine.AgentRow) -> dict[str, Any]:
    return {"id": a.id, "build": a.build, "capabilities": a.capabilities, "state": a.state,
            "registered_at": iso(a.registered_at), "last_seen_at": iso(a.last_seen_at),
            "last_claim_at": iso(a.last_claim_at), "claimed_run": a.claimed_run,
            "drain_requested_at": iso(a.drain_requested_at), "replica": a.replica,
            "last_contact_at": iso(a.last_contact_at)}


async def list_agents(request: web.Request) -> web.Response:
    await require_user(request, VIEWER, project=False)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_agents(conn, request.match_info["org"])
    return web.json_response({"agents": [_agent_json(a) for a in rows]})


async def _drain(app: web.Application, org: str, build: str | None,
                 agent_id: str | None) -> web.Response:
    async with connection(app[POOL]) as conn:
        n = await engine.drain_agents(conn, org, build=build, agent_id=agent_id)
        _replace(app, await engine.draining_agents(conn))  # this replica at once
    return web.json_response({"draining": n})


async def drain_agents(request: web.Request) -> web.Response:
    await require_user(request, ADMIN, project=False)
    body = await json_body(request)
    build = optional_str_field(body, "build", 200)
    agent_id = body.get("agent_id")
    return await _drain(request.app, request.match_info["org"], build,
                        None if agent_id is None else agent_id_of(agent_id))


async def note_state(request: web.Request) -> web.Response:
    """An agent process's own word: "draining" (it got SIGTERM: every replica refuses its
    claims from now on, and `cryopg agents` says so) or "gone" (it is exiting)."""
    info = await require_agent(request)
    body = await json_body(request)
    agent_id = agent_id_of(body.get("agent_id"))
    instance = optional_str_field(body, "instance", 64)
    state = body.get("state")
    if state not in ("draining", "gone"):
        raise InvalidArgument("state must be draining or gone")
    if state == "draining":
        request.app[DRAINING].add((info.org, agent_id))  # this replica at once
    async with connection(request.app[POOL]) as conn:
        noted = await engine.note_agent(conn, info.org, agent_id, instance, state)
    if state == "gone":
        forget_seen(request.app, info.org, agent_id)
    return web.json_response({"noted": noted})


async def gone(app: web.Application, org: str, agent_id: str, instance: str | None) -> None:
    """The agent's long-poll was closed from its end: it was killed or went away. A live
    agent's next claim refreshes its row (forget_seen makes sure of it here)."""
    forget_seen(app, org, agent_id)
    try:
        async with connection(app[POOL]) as conn:
            await engine.note_agent(conn, org, agent_id, instance, "gone")
    except Exception as exc:  # noqa: BLE001 - a listing detail; the claim path goes on
        print(f"cryopg: noting agent {agent_id} gone failed ({exc})", file=sys.stderr)


def forget_seen(app: web.Application, org: str, agent_id: str) -> None:
    """The agent's next claim refreshes its row (and so clears a `gone`)."""
    refreshed = app[SEEN]
    for key in [k for k in refreshed if k[0] == org and k[1] == agent_id]:
        del refreshed[key]


async def drain_self(request: web.Request) -> web.Response:
    """An agent token asks for the drain of its org's agent(s) of one id."""
    info = await require_agent(request)
    body = await json_body(request)
    return await _drain(request.app, info.org, None, agent_id_of(body.get("agent_id")))


def add_routes(app: web.Application) -> None:
    app[DRAINING], app[SEEN], app[LAST_GRANT] = set(), {}, {}
    app.router.add_get("/api/v1/orgs/{org}/agents", list_agents)
    app.router.add_post("/api/v1/orgs/{org}/agents/drain", drain_agents)
    app.router.add_post("/api/v1/agent/drain", drain_self)
    app.router.add_post("/api/v1/agent/state", note_state)
