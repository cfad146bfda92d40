"""Send a signal to a run; publish and list a project's bus events.

Payloads are sealed here as {"answer": value} (see cryopg/payloads.py for why that shape).
"""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.payloads import answer
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import MEMBER, require_user
from cryopg.server.bodies import optional_json_body, query_int
from cryopg.server.redact import masked
from cryopg.server.trust_flags import PUBLIC, flag
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of, run_in_project


async def send_signal(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, _ = project_of(request)
    run_id = run_in_project(request)
    body = await optional_json_body(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        signal_id = await engine.send_signal(conn, run_id, request.match_info["name"],
                                             sealer.seal_json({"answer": body.get("payload")}))
    return web.json_response({"signal_id": signal_id}, status=201)


async def publish_event(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await optional_json_body(request)
    public = flag(body, PUBLIC)  # a member is a trusted writer; public reaches untrusted runs
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        event_id = await engine.publish_event(conn, org, project, request.match_info["name"],
                                              sealer.seal_json({"answer": body.get("payload")}),
                                              public)
    return web.json_response({"event_id": event_id}, status=201)


async def list_events(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = project_of(request)
    limit = query_int(request, "limit", 50)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        events = await engine.list_events(conn, org, project, request.query.get("name"), limit)
        return web.json_response(await masked(request, conn, org, project, {"events": [
            {"id": e.id, "name": e.name, "payload": answer(sealer, e.payload, e.payload_clear),
             "emitted_by_run": e.emitted_by_run, "created_at": e.created_at.isoformat(),
             "depth": e.depth, "untrusted": e.untrusted, "refused": e.refused}
            for e in events]}))


def add_routes(app: web.Application) -> None:
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/signal/{{name}}", send_signal)
    app.router.add_get(f"{PROJECT_ROUTE}/events", list_events)
    app.router.add_post(f"{PROJECT_ROUTE}/events/{{name}}", publish_event)
