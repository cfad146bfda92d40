"""An org's sign-in settings and sessions: `/api/v1/orgs/{org}/role-maps[/{claim}/{value}]`
(which ID token claim values make which role; an Owner's, since a map can grant owner)
and `/api/v1/orgs/{org}/sessions[/{session}]` (who is signed in; an Admin ends one)."""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.server.app_state import POOL
from cryopg.server.auth import ADMIN, OWNER, require_user
from cryopg.server.bodies import json_body, str_field
from cryopg.server.render import iso

ORG_ROUTE = "/api/v1/orgs/{org}"


async def list_role_maps(request: web.Request) -> web.Response:
    await require_user(request, ADMIN, project=False)
    async with connection(request.app[POOL]) as conn:
        maps = await engine.list_role_maps(conn, request.match_info["org"])
    return web.json_response({"role_maps": [
        {"claim": m.claim, "value": m.value, "role": m.role, "created_at": iso(m.created_at)}
        for m in maps]})


async def put_role_map(request: web.Request) -> web.Response:
    await require_user(request, OWNER, project=False)
    body = await json_body(request)
    m = request.match_info
    role = str_field(body, "role")
    async with connection(request.app[POOL]) as conn:
        created = await engine.put_role_map(conn, m["org"], m["claim"], m["value"], role)
    return web.json_response({"claim": m["claim"], "value": m["value"], "role": role,
                              "created": created}, status=201 if created else 200)


async def delete_role_map(request: web.Request) -> web.Response:
    await require_user(request, OWNER, project=False)
    m = request.match_info
    async with connection(request.app[POOL]) as conn:
        deleted = await engine.delete_role_map(conn, m["org"], m["claim"], m["value"])
    return web.json_response({"deleted": deleted})


async def list_sessions(request: web.Request) -> web.Response:
    await require_user(request, ADMIN, project=False)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_sessions(conn, request.match_info["org"])
    return web.json_response({"sessions": [
        {"id": r.id, "member": r.member, "kind": r.kind, "subject": r.subject,
         "created_at": iso(r.created_at), "expires_at": iso(r.expires_at)} for r in rows]})


async def revoke_session(request: web.Request) -> web.Response:
    await require_user(request, ADMIN, project=False)
    async with connection(request.app[POOL]) as conn:
        revoked = await engine.revoke_session(conn, request.match_info["org"],
                                              request.match_info["session"])
    return web.json_response({"revoked": revoked})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{ORG_ROUTE}/role-maps", list_role_maps)
    app.router.add_put(f"{ORG_ROUTE}/role-maps/{{claim}}/{{value}}", put_role_map)
    app.router.add_delete(f"{ORG_ROUTE}/role-maps/{{claim}}/{{value}}", delete_role_map)
    app.router.add_get(f"{ORG_ROUTE}/sessions", list_sessions)
    app.router.add_delete(f"{ORG_ROUTE}/sessions/{{session}}", revoke_session)
