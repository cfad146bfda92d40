"""Members and projects: the routes an org's Admins (and Owners) use.

`/api/v1/orgs/{org}/members[/{login}]` and `/api/v1/orgs/{org}/projects[/{project}]`
are org-level; `…/projects/{project}/retention` is a project's. Deleting a project is
an Owner's call. Listing and deleting a project's stored workflows live here too (putting
and reading one is in runs.py).
"""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.app_state import POOL
from cryopg.server.auth import ADMIN, MEMBER, OWNER, VIEWER, require_user
from cryopg.server.bodies import json_body, seconds_field, str_field
from cryopg.server.render import iso

ORG_ROUTE = "/api/v1/orgs/{org}"


async def whoami(request: web.Request) -> web.Response:
    """The token's member and role in the org: what the web UI shows and lets one do."""
    me = await require_user(request, VIEWER, project=False)
    return web.json_response({"org": request.match_info["org"], "login": me.member,
                              "role": me.role})


# -- members -------------------------------------------------------------------------------

async def list_members(request: web.Request) -> web.Response:
    await require_user(request, VIEWER, project=False)
    async with connection(request.app[POOL]) as conn:
        members = await engine.list_members(conn, request.match_info["org"])
    return web.json_response({"members": [
        {"login": m.login, "role": m.role, "created_at": iso(m.created_at)} for m in members]})


async def put_member(request: web.Request) -> web.Response:
    me = await require_user(request, ADMIN, project=False)
    body = await json_body(request)
    org, login = request.match_info["org"], request.match_info["login"]
    async with connection(request.app[POOL]) as conn:
        await engine.put_member(conn, org, login, str_field(body, "role"), me.member)
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
    slug = str_field(body, "slug")
    name = body.get("name") if isinstance(body.get("name"), str) else slug
    async with connection(request.app[POOL]) as conn:
        created = await engine.ensure_project(conn, request.match_info["org"], slug, name)
    return web.json_response({"slug": slug, "created": created}, status=201 if created else 200)


async def list_projects(request: web.Request) -> web.Response:
    await require_user(request, VIEWER, project=False)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_projects(conn, request.match_info["org"])
    return web.json_response({"projects": [
        {"slug": p.slug, "name": p.name, "created_at": iso(p.created_at)} for p in rows]})


async def rename_project(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    body = await json_body(request)
    if "slug" in body:
        raise InvalidArgument("a project's slug is permanent; only its name changes")
    async with connection(request.app[POOL]) as conn:
        await engine.rename_project(conn, request.match_info["org"],
                                    request.match_info["project"], str_field(body, "name"))
    return web.json_response({})


async def delete_project(request: web.Request) -> web.Response:
    await require_user(request, OWNER)
    async with connection(request.app[POOL]) as conn:
        runs = await engine.delete_project(conn, request.match_info["org"],
                                           request.match_info["project"])
    return web.json_response({"runs_deleted": runs})


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
    runs, events = seconds_field(body, "runs_seconds"), seconds_field(body, "events_seconds")
    if runs is None and events is None:
        raise InvalidArgument("give runs_seconds, events_seconds or both")
    async with connection(request.app[POOL]) as conn:
        await engine.set_retention(conn, request.match_info["org"],
                                   request.match_info["project"], runs, events)
    return await _retention_json(request)


# -- stored workflows: listed and deleted here, put and read in runs.py -----------------------

async def list_workflows(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_workflows(conn, request.match_info["org"],
                                           request.match_info["project"])
    return web.json_response({"workflows": [
        {"name": w.name, "filename": w.filename, "kind": w.kind, "pipeline": w.pipeline,
         "updated_at": iso(w.updated_at), "schedules": w.schedules, "handlers": w.handlers,
         "webhooks": w.webhooks, "version": w.version, "updated_by": w.updated_by}
        for w in rows]})


async def delete_workflow(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    async with connection(request.app[POOL]) as conn:
        await engine.delete_workflow(conn, request.match_info["org"],
                                     request.match_info["project"], request.match_info["name"])
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{ORG_ROUTE}/me", whoami)
    app.router.add_get(f"{ORG_ROUTE}/members", list_members)
    app.router.add_put(f"{ORG_ROUTE}/members/{{login}}", put_member)
    app.router.add_delete(f"{ORG_ROUTE}/members/{{login}}", remove_member)
    app.router.add_get(f"{ORG_ROUTE}/projects", list_projects)
    app.router.add_post(f"{ORG_ROUTE}/projects", create_project)
    app.router.add_patch(f"{ORG_ROUTE}/projects/{{project}}", rename_project)
    project = f"{ORG_ROUTE}/projects/{{project}}"
    app.router.add_delete(project, delete_project)
    app.router.add_get(f"{project}/retention", get_retention)
    app.router.add_put(f"{project}/retention", put_retention)
    app.router.add_get(f"{project}/workflows", list_workflows)
    app.router.add_delete(f"{project}/workflows/{{name}}", delete_workflow)
