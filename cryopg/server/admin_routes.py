"""Members, projects and secrets: the routes an org's Admins (and Owners) use.

`/api/v1/orgs/{org}/members[/{login}]` and `/api/v1/orgs/{org}/projects[/{project}]`
are org-level; `/api/v1/orgs/{org}/projects/{project}/secrets[/{name}]` and
`…/retention` are a project's. Deleting a project is an Owner's call.
A secret's value is sealed here with the org key and never returned by any route: it
leaves the server only inside a claim grant.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument, NotFound
from cryopg.server.auth import ADMIN, OWNER, VIEWER, require_user
from cryopg.server.bodies import json_body
from cryopg.server.state import KEYS, POOL

# A secret is an environment variable's value; keep it to something a grant can carry.
SECRET_MAX_BYTES = 64 << 10


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty string")
    return value


# -- members -------------------------------------------------------------------------------

async def list_members(request: web.Request) -> web.Response:
    await require_user(request, VIEWER, project=False)
    async with connection(request.app[POOL]) as conn:
        members = await engine.list_members(conn, request.match_info["org"])
    return web.json_response({"members": [
        {"login": m.login, "role": m.role, "created_at": _iso(m.created_at)} for m in members]})


async def put_member(request: web.Request) -> web.Response:
    me = await require_user(request, ADMIN, project=False)
    body = await json_body(request)
    org, login = request.match_info["org"], request.match_info["login"]
    async with connection(request.app[POOL]) as conn:
        await engine.put_member(conn, org, login, _str(body, "role"), me.member)
    return web.json_response({"login": login, "role": body["role"]})


async def remove_member(request: web.Request) -> web.Response:
    me = await require_user(request, ADMIN, project=False)
    async with connection(request.app[POOL]) as conn:
        await engine.remove_member(conn, request.match_info["org"], request.match_info["login"],
                                   me.member)
    return web.json_response({})


# -- projects ------------------------------------------------------------------------------

async def create_project(request: web.Request) -> web.Response:
    await require_user(request, ADMIN, project=False)
    body = await json_body(request)
    slug = _str(body, "slug")
    name = body.get("name") if isinstance(body.get("name"), str) else slug
    async with connection(request.app[POOL]) as conn:
        created = await engine.ensure_project(conn, request.match_info["org"], slug, name)
    return web.json_response({"slug": slug, "created": created}, status=201 if created else 200)


async def rename_project(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    body = await json_body(request)
    if "slug" in body:
        raise InvalidArgument("a project's slug is permanent; only its name changes")
    async with connection(request.app[POOL]) as conn:
        await engine.rename_project(conn, request.match_info["org"],
                                    request.match_info["project"], _str(body, "name"))
    return web.json_response({})


async def delete_project(request: web.Request) -> web.Response:
    await require_user(request, OWNER)
    async with connection(request.app[POOL]) as conn:
        runs = await engine.delete_project(conn, request.match_info["org"],
                                           request.match_info["project"])
    return web.json_response({"runs_deleted": runs})


def _seconds(body: dict[str, Any], name: str) -> dt.timedelta | None:
    value = body.get(name)
    if value is None:
        return None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not 0 < value < 100 * 365 * 86400):
        raise InvalidArgument(f"{name} must be a positive number of seconds under 100 years")
    return dt.timedelta(seconds=value)


async def _retention_json(request: web.Request) -> web.Response:
    async with connection(request.app[POOL]) as conn:
        runs, events = await engine.get_retention(conn, request.match_info["org"],
                                                  request.match_info["project"])
    return web.json_response({"runs_seconds": runs.total_seconds(),
                              "events_seconds": events.total_seconds()})


async def get_retention(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    return await _retention_json(request)


async def put_retention(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    body = await json_body(request)
    runs, events = _seconds(body, "runs_seconds"), _seconds(body, "events_seconds")
    if runs is None and events is None:
        raise InvalidArgument("give runs_seconds, events_seconds or both")
    async with connection(request.app[POOL]) as conn:
        await engine.set_retention(conn, request.match_info["org"],
                                   request.match_info["project"], runs, events)
    return await _retention_json(request)


# -- secrets -------------------------------------------------------------------------------

async def list_secrets(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = request.match_info["org"], request.match_info["project"]
    async with connection(request.app[POOL]) as conn:
        names = await engine.list_secrets(conn, org, project)
    return web.json_response({"secrets": [
        {"name": s.name, "created_at": _iso(s.created_at), "updated_at": _iso(s.updated_at)}
        for s in names]})


async def put_secret(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = request.match_info["org"], request.match_info["project"]
    body = await json_body(request)
    value = body.get("value")
    if not isinstance(value, str) or not value:
        raise InvalidArgument("value must be a non-empty string")
    if len(value.encode()) > SECRET_MAX_BYTES or "\0" in value:
        raise InvalidArgument(f"a secret is at most {SECRET_MAX_BYTES} bytes, without NUL")
    sealed = (await request.app[KEYS].sealer(org)).seal_text(value)
    async with connection(request.app[POOL]) as conn:
        created = await engine.set_secret(conn, org, project, request.match_info["name"], sealed)
    return web.json_response({"name": request.match_info["name"], "created": created},
                             status=201 if created else 200)


async def delete_secret(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = request.match_info["org"], request.match_info["project"]
    async with connection(request.app[POOL]) as conn:
        found = await engine.delete_secret(conn, org, project, request.match_info["name"])
    if not found:
        raise NotFound(f"no secret {request.match_info['name']} in {org}/{project}")
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    org = "/api/v1/orgs/{org}"
    app.router.add_get(f"{org}/members", list_members)
    app.router.add_put(f"{org}/members/{{login}}", put_member)
    app.router.add_delete(f"{org}/members/{{login}}", remove_member)
    app.router.add_post(f"{org}/projects", create_project)
    app.router.add_patch(f"{org}/projects/{{project}}", rename_project)
    project = f"{org}/projects/{{project}}"
    app.router.add_delete(project, delete_project)
    app.router.add_get(f"{project}/retention", get_retention)
    app.router.add_put(f"{project}/retention", put_retention)
    app.router.add_get(f"{project}/secrets", list_secrets)
    app.router.add_put(f"{project}/secrets/{{name}}", put_secret)
    app.router.add_delete(f"{project}/secrets/{{name}}", delete_secret)
