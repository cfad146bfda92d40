"""Schedules, webhooks and event handlers of a project:
`/api/v1/orgs/{org}/projects/{project}/schedules|webhooks|handlers[/{name}]`.

Schedules and handlers need a Member (they start runs as a submit does); webhooks an
Admin, since creating one hands out a signing secret. The secret is returned once, by
the create call, and sealed at rest; no route shows it again.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import ADMIN, MEMBER, require_user
from cryopg.server.bodies import json_body, optional_str_field, str_field
from cryopg.server.render import iso
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of
from cryopg.triggers import cron, forge, webhook

HOOK_ROUTE = "/api/v1/hooks/{org}/{project}/{name}"


NEXT_FIRES = 5  # the fire times a schedule lists ahead (the UI shows them)


def _next_fires(s: engine.Schedule) -> list[str]:
    """The schedule's next few ticks from its next one (none while paused)."""
    if s.paused or s.next_fire_at is None:
        return []
    ticks = [s.next_fire_at]
    try:
        while len(ticks) < NEXT_FIRES:
            ticks.append(cron.next_after(s.cron, s.timezone, s.every_seconds, ticks[-1],
                                         anchor=s.next_fire_at))
    except cron.ScheduleError:
        pass
    return [iso(t) for t in ticks]


def schedule_json(s: engine.Schedule) -> dict[str, Any]:
    return {"name": s.name, "workflow": s.workflow, "cron": s.cron, "timezone": s.timezone,
            "every_seconds": s.every_seconds, "paused": s.paused,
            "registered_by": s.source_workflow, "next_fire_at": iso(s.next_fire_at),
            "next_fires": _next_fires(s),
            "last_fire_at": iso(s.last_fire_at), "last_run_id": s.last_run_id,
            "created_at": iso(s.created_at)}


def schedule_spec(body: dict[str, Any]) -> tuple[str | None, str, float | None]:
    """(cron, timezone, every_seconds) of a create body, checked; one line on error."""
    expr, every = body.get("cron"), body.get("every")
    timezone = body.get("timezone") or "UTC"
    if not isinstance(timezone, str):
        raise InvalidArgument("timezone must be a string")
    if (expr is None) == (every is None):
        raise InvalidArgument("give either cron or every")
    try:
        if expr is not None:
            if not isinstance(expr, str):
                raise InvalidArgument("cron must be a string")
            cron.check_cron(expr, timezone)
            return expr, timezone, None
        if body.get("timezone") is not None:
            raise InvalidArgument("timezone goes with cron, not with every")
        if isinstance(every, bool) or not isinstance(every, (str, int, float)):
            raise InvalidArgument("every must be a duration such as 30s, 10m, 1h")
        return None, timezone, cron.every_seconds(every)
    except cron.ScheduleError as exc:
        raise InvalidArgument(str(exc)) from None


async def create_schedule(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    name, workflow = str_field(body, "name"), str_field(body, "workflow")
    expr, timezone, every = schedule_spec(body)
    sealer = await request.app[KEYS].sealer(org)
    sealed = sealer.seal_json(body["input"]) if body.get("input") is not None else None
    async with connection(request.app[POOL]) as conn:
        now = await engine.engine_now(conn)
        await engine.create_schedule(conn, org, project, name, workflow=workflow, cron=expr,
                                     timezone=timezone, every_seconds=every, input=sealed,
                                     next_fire_at=cron.next_after(expr, timezone, every, now))
        got = [s for s in await engine.list_schedules(conn, org, project) if s.name == name]
    return web.json_response(schedule_json(got[0]), status=201)


async def list_schedules(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_schedules(conn, org, project)
    return web.json_response({"schedules": [schedule_json(s) for s in rows]})


async def _pause(request: web.Request, paused: bool) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    name = request.match_info["name"]
    async with connection(request.app[POOL]) as conn:
        await engine.pause_schedule(conn, org, project, name, paused)
        if not paused:  # plan its next tick now, so `schedule list` shows it
            now = await engine.engine_now(conn)
            s = next(s for s in await engine.list_schedules(conn, org, project) if s.name == name)
            if s.next_fire_at is None:
                try:
                    nxt = cron.next_after(s.cron, s.timezone, s.every_seconds, now)
                except cron.ScheduleError as exc:
                    raise InvalidArgument(str(exc)) from None
                await engine.plan_schedule(conn, org, project, name, nxt)
        got = [s for s in await engine.list_schedules(conn, org, project) if s.name == name]
    return web.json_response(schedule_json(got[0]))


async def pause_schedule(request: web.Request) -> web.Response:
    return await _pause(request, True)


async def resume_schedule(request: web.Request) -> web.Response:
    return await _pause(request, False)


async def delete_schedule(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.delete_schedule(conn, org, project, request.match_info["name"])
    return web.json_response({})


def check_status_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. an unclosed [ of an IPv6 address
        host = None
    if len(url) > 2000 or not host:
        raise InvalidArgument(f"status_url {url[:100]!r} is not a URL")
    if parts.scheme != "https" and not (parts.scheme == "http"
                                        and host.lower() in forge.allowlist()):
        raise InvalidArgument("status_url must be https (http only for a host named in "
                              f"{forge.ALLOWLIST_ENV})")


async def create_webhook(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    body = await json_body(request)
    name = str_field(body, "name")
    workflow = optional_str_field(body, "workflow")
    status_url = optional_str_field(body, "status_url", 2000)
    if status_url is not None:
        check_status_url(status_url)
    secret = webhook.new_secret()
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        await engine.create_webhook(conn, org, project, name, workflow=workflow,
                                    secret=sealer.seal_text(secret), status_url=status_url)
    path = HOOK_ROUTE.format(org=org, project=project, name=name)
    return web.json_response({"name": name, "workflow": workflow, "status_url": status_url,
                              "path": path, "url": f"{request.url.origin()}{path}",
                              "secret": secret}, status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_webhooks(conn, org, project)
    return web.json_response({"webhooks": [
        {"name": w.name, "workflow": w.workflow, "status_url": w.status_url,
         "path": HOOK_ROUTE.format(org=org, project=project, name=w.name),
         "deliveries": w.deliveries, "last_delivery_at": iso(w.last_delivery_at),
         "paused": w.paused, "created_at": iso(w.created_at)} for w in rows]})


async def delete_webhook(request: web.Request) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.delete_webhook(conn, org, project, request.match_info["name"])
    return web.json_response({})


async def create_handler(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    name, event, workflow = (str_field(body, k) for k in ("name", "event", "workflow"))
    async with connection(request.app[POOL]) as conn:
        await engine.create_handler(conn, org, project, name, event=event, workflow=workflow)
    return web.json_response({"name": name, "event": event, "workflow": workflow}, status=201)


async def list_handlers(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_handlers(conn, org, project)
    return web.json_response({"handlers": [
        {"name": h.name, "event": h.event, "workflow": h.workflow,
         "registered_by": h.source_workflow, "paused": h.paused,
         "created_at": iso(h.created_at)} for h in rows]})


async def delete_handler(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.delete_handler(conn, org, project, request.match_info["name"])
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/schedules", list_schedules)
    app.router.add_post(f"{PROJECT_ROUTE}/schedules", create_schedule)
    app.router.add_post(f"{PROJECT_ROUTE}/schedules/{{name}}/pause", pause_schedule)
    app.router.add_post(f"{PROJECT_ROUTE}/schedules/{{name}}/resume", resume_schedule)
    app.router.add_delete(f"{PROJECT_ROUTE}/schedules/{{name}}", delete_schedule)
    app.router.add_get(f"{PROJECT_ROUTE}/webhooks", list_webhooks)
    app.router.add_post(f"{PROJECT_ROUTE}/webhooks", create_webhook)
    app.router.add_delete(f"{PROJECT_ROUTE}/webhooks/{{name}}", delete_webhook)
    app.router.add_get(f"{PROJECT_ROUTE}/handlers", list_handlers)
    app.router.add_post(f"{PROJECT_ROUTE}/handlers", create_handler)
    app.router.add_delete(f"{PROJECT_ROUTE}/handlers/{{name}}", delete_handler)
