"""A project's connections for connector nodes:
`/api/v1/orgs/{org}/projects/{project}/connections[/{name}]`. Reading needs a Viewer;
creating, replacing and deleting need an Admin, as secrets do.

A connection holds no credential: it names the project secret that does, whose value
never leaves the server except in a connector job's claim grant.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.app_state import POOL
from cryopg.server.auth import ADMIN, VIEWER, require_user
from cryopg.server.bodies import json_body, optional_str_field, str_field
from cryopg.server.render import iso
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of


def shown(c: engine.Connection) -> dict[str, Any]:
    return {"name": c.name, "base_url": c.base_url, "auth": c.auth, "secret": c.secret,
            "username": c.username, "header": c.header, "headers": c.headers,
            "created_at": iso(c.created_at), "updated_at": iso(c.updated_at)}


def _headers(body: dict[str, Any]) -> dict[str, str]:
    headers = body.get("headers")
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise InvalidArgument("headers must be an object of header names to strings")
    return headers


async def list_connections(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        got = await engine.list_connections(conn, org, project)
    return web.json_response({"connections": [shown(c) for c in got]})


async def show_connection(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        got = await engine.get_connection(conn, org, project, request.match_info["name"])
    return web.json_response(shown(got))


async def create_connection(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    body = await json_body(request)
    replace = body.get("replace", False)
    if not isinstance(replace, bool):
        raise InvalidArgument("replace must be true or false")
    name = str_field(body, "name", 63)
    async with connection(request.app[POOL]) as conn:
        created = await engine.create_connection(
            conn, org, project, name, base_url=str_field(body, "base_url", 2000),
            auth=optional_str_field(body, "auth", 16) or "none",
            secret=optional_str_field(body, "secret", 128),
            username=optional_str_field(body, "username", 200),
            header=optional_str_field(body, "header", 64), headers=_headers(body),
            replace=replace)
        got = await engine.get_connection(conn, org, project, name)
    return web.json_response({**shown(got), "created": created}, status=201 if created else 200)


async def delete_connection(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.delete_connection(conn, org, project, request.match_info["name"])
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/connections", list_connections)
    app.router.add_post(f"{PROJECT_ROUTE}/connections", create_connection)
    app.router.add_get(f"{PROJECT_ROUTE}/connections/{{name}}", show_connection)
    app.router.add_delete(f"{PROJECT_ROUTE}/connections/{{name}}", delete_connection)
