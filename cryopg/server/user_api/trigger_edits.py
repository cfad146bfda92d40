"""Changing triggers after they exist, as the UI's trigger pages do: edit a schedule,
webhook or handler, pause and resume webhooks and handlers (schedules' pause is in
triggers.py), start a schedule's workflow now, and deliver a stored webhook delivery
again. Roles as for creating each: Members for schedules, handlers, running now and
redelivering; Admins for webhooks.

Each change is one SQL call; what SQL cannot do (cron arithmetic, opening and sealing
inputs) is done here first and handed over.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server import input_checks
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import ADMIN, MEMBER, require_user
from cryopg.server.bodies import json_body, optional_str_field, str_field
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of
from cryopg.server.user_api.triggers import (
    check_status_url,
    list_handlers,
    list_webhooks,
    schedule_json,
    schedule_spec,
)
from cryopg.triggers import cron


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


async def _one_schedule(conn: Any, org: str, project: str, name: str) -> dict[str, Any]:
    got = [s for s in await engine.list_schedules(conn, org, project) if s.name == name]
    return schedule_json(got[0])


async def update_schedule(request: web.Request) -> web.Response:
    """`PUT …/schedules/{name}`: a new workflow, cron or interval and (when given) input;
    without `input` the schedule keeps its own."""
    await require_user(request, MEMBER)
    org, project = project_of(request)
    name = request.match_info["name"]
    body = await json_body(request)
    workflow = str_field(body, "workflow")
    expr, timezone, every = schedule_spec(body)
    keep = "input" not in body
    sealer = await request.app[KEYS].sealer(org)
    sealed = sealer.seal_json(body["input"]) if body.get("input") is not None else None
    async with connection(request.app[POOL]) as conn:
        now = await engine.engine_now(conn)
        await engine.update_schedule(conn, org, project, name, workflow=workflow, cron=expr,
                                     timezone=timezone, every_seconds=every, input=sealed,
                                     keep_input=keep,
                                     next_fire_at=cron.next_after(expr, timezone, every, now))
        return web.json_response(await _one_schedule(conn, org, project, name))


async def run_schedule_now(request: web.Request) -> web.Response:
    """`POST …/schedules/{name}/run`: one run of the schedule's workflow now, with its
    input and a trigger saying it was started by hand; its ticks stay as they were."""
    user = await require_user(request, MEMBER)
    org, project = project_of(request)
    name = request.match_info["name"]
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        stored = await engine.read_schedule_input(conn, org, project, name)
        now = await engine.engine_now(conn)
        base = sealer.open_json(stored) if stored is not None else {}
        trigger = {"kind": "schedule", "name": name, "scheduled_at": _iso(now),
                   "catch_up": False, "manual": True, "by": user.member}
        value = ({**base, "trigger": trigger} if isinstance(base, dict)
                 else {"input": base, "trigger": trigger})
        run_id = await engine.run_schedule_now(conn, org, project, name,
                                               input=sealer.seal_json(value),
                                               scope={"trigger": trigger, "input": value})
    return web.json_response({"run_id": run_id, "skipped": run_id is None},
                             status=201 if run_id else 200)


async def update_webhook(request: web.Request) -> web.Response:
    """`PUT …/webhooks/{name}`: where deliveries go (a workflow, or none: the bus) and
    the commit status URL; the signing secret stays."""
    await require_user(request, ADMIN)
    org, project = project_of(request)
    body = await json_body(request)
    workflow = optional_str_field(body, "workflow")
    status_url = optional_str_field(body, "status_url", 2000)
    if status_url is not None:
        check_status_url(status_url)
    async with connection(request.app[POOL]) as conn:
        await engine.update_webhook(conn, org, project, request.match_info["name"],
                                    workflow=workflow, status_url=status_url)
    return await list_webhooks(request)


async def _pause_webhook(request: web.Request, paused: bool) -> web.Response:
    await require_user(request, ADMIN)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.pause_webhook(conn, org, project, request.match_info["name"], paused)
    return await list_webhooks(request)


async def pause_webhook(request: web.Request) -> web.Response:
    return await _pause_webhook(request, True)


async def resume_webhook(request: web.Request) -> web.Response:
    return await _pause_webhook(request, False)


async def update_handler(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    event, workflow = str_field(body, "event"), str_field(body, "workflow")
    async with connection(request.app[POOL]) as conn:
        await engine.update_handler(conn, org, project, request.match_info["name"],
                                    event=event, workflow=workflow)
    return await list_handlers(request)


async def _pause_handler(request: web.Request, paused: bool) -> web.Response:
    await require_user(request, MEMBER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        await engine.pause_handler(conn, org, project, request.match_info["name"], paused)
    return await list_handlers(request)


async def pause_handler(request: web.Request) -> web.Response:
    return await _pause_handler(request, True)


async def resume_handler(request: web.Request) -> web.Response:
    return await _pause_handler(request, False)


async def redeliver(request: web.Request) -> web.Response:
    """`POST …/webhook-deliveries/{id}/redeliver`: the stored delivery again, routed by
    the webhook as it is now (its dedup by body hash does not apply)."""
    user = await require_user(request, MEMBER)
    org, project = project_of(request)
    text = request.match_info["id"]
    if not text.isdigit() or len(text) > 18:
        raise InvalidArgument(f"delivery id {text[:20]!r} must be a positive integer")
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        stored = await engine.read_webhook_delivery(conn, org, project, int(text))
        opened = sealer.open_json(stored.input)
        trigger = {**opened.get("trigger", {}), "redelivery_of": int(text)}
        hook = await engine.get_webhook(conn, org, project, stored.webhook)
        # Checked against the workflow's input_schema as it is now, as a first delivery is.
        refused = (await input_checks.refusal(conn, org, project, hook.workflow,
                                              {"trigger": trigger})
                   if hook.workflow else None)
        got = await engine.redeliver_webhook(
            conn, org, project, int(text), trigger=trigger,
            input=sealer.seal_json({"trigger": trigger}),
            payload=sealer.seal_json({"answer": trigger}), by=user.member, refused=refused)
    return web.json_response({"id": got.id, "outcome": got.outcome, "run_id": got.run_id,
                              "event_id": got.event_id},
                             status=201 if got.outcome == "started" else 202)


def add_routes(app: web.Application) -> None:
    app.router.add_put(f"{PROJECT_ROUTE}/schedules/{{name}}", update_schedule)
    app.router.add_post(f"{PROJECT_ROUTE}/schedules/{{name}}/run", run_schedule_now)
    app.router.add_put(f"{PROJECT_ROUTE}/webhooks/{{name}}", update_webhook)
    app.router.add_post(f"{PROJECT_ROUTE}/webhooks/{{name}}/pause", pause_webhook)
    app.router.add_post(f"{PROJECT_ROUTE}/webhooks/{{name}}/resume", resume_webhook)
    app.router.add_put(f"{PROJECT_ROUTE}/handlers/{{name}}", update_handler)
    app.router.add_post(f"{PROJECT_ROUTE}/handlers/{{name}}/pause", pause_handler)
    app.router.add_post(f"{PROJECT_ROUTE}/handlers/{{name}}/resume", resume_handler)
    app.router.add_post(f"{PROJECT_ROUTE}/webhook-deliveries/{{id}}/redeliver", redeliver)
