"""A project's secrets: `/api/v1/orgs/{org}/projects/{project}/secrets[/{name}]`, Admins only.

A secret's value is sealed here with the org key and never returned by any route: it
leaves the server only inside a claim grant, and is masked in the logs and in every
payload a user reads (agent/logs.py, cryopg/server/redact.py). A value too short to
mask without hiding ordinary words is refused.
"""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument, NotFound
from cryopg.redaction import MIN_SECRET_CHARS
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import ADMIN, require_user
from cryopg.server.bodies import json_body, str_field
from cryopg.server.redact import add_to as add_masks
from cryopg.server.render import iso
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of

# A secret is an environment variable's value; keep it to something a grant can carry.
SECRET_MAX_BYTES = 64 << 10


async def list_secrets(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        names = await engine.list_secrets(conn, org, project)
    return web.json_response({"secrets": [
        {"name": s.name, "created_at": iso(s.created_at), "updated_at": iso(s.updated_at)}
        for s in names]})


async def put_secret(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    body = await json_body(request)
    value = str_field(body, "value", 1 << 20)  # a key or certificate: not a name
    if len(value.encode()) > SECRET_MAX_BYTES or "\0" in value:
        raise InvalidArgument(f"a secret is at most {SECRET_MAX_BYTES} bytes, without NUL")
    if len(value.strip()) < MIN_SECRET_CHARS:
        raise InvalidArgument(f"a secret must be at least {MIN_SECRET_CHARS} characters (a "
                              "shorter one cannot be masked without hiding ordinary text)")
    sealed = (await request.app[KEYS].sealer(org)).seal_text(value)
    async with connection(request.app[POOL]) as conn:
        created = await engine.set_secret(conn, org, project, request.match_info["name"], sealed)
    return web.json_response({"name": request.match_info["name"], "created": created},
                             status=201 if created else 200)


async def delete_secret(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        found = await engine.delete_secret(conn, org, project, request.match_info["name"])
    if not found:
        raise NotFound(f"no secret {request.match_info['name']} in {org}/{project}")
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    add_masks(app)
    app.router.add_get(f"{PROJECT_ROUTE}/secrets", list_secrets)
    app.router.add_put(f"{PROJECT_ROUTE}/secrets/{{name}}", put_secret)
    app.router.add_delete(f"{PROJECT_ROUTE}/secrets/{{name}}", delete_secret)
