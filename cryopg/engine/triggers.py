"""Triggers: schedules, webhooks and event handlers (sql/functions/85_triggers.sql)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class Schedule:
    name: str
    workflow: str
    cron: str | None
    timezone: str
    every_seconds: float | None
    paused: bool
    source_workflow: str | None
    next_fire_at: dt.datetime | None
    last_fire_at: dt.datetime | None
    last_run_id: str | None
    created_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class DueSchedule:
    org: str
    project: str
    name: str
    workflow: str
    cron: str | None
    timezone: str
    every_seconds: float | None
    input: bytes | None
    next_fire_at: dt.datetime | None
    now: dt.datetime


@dataclasses.dataclass(frozen=True)
class Webhook:
    workflow: str | None
    secret: bytes
    status_url: str | None


@dataclasses.dataclass(frozen=True)
class WebhookRow:
    name: str
    workflow: str | None
    status_url: str | None
    created_at: dt.datetime
    deliveries: int
    last_delivery_at: dt.datetime | None
    paused: bool


@dataclasses.dataclass(frozen=True)
class Delivery:
    outcome: str
    run_id: str | None
    event_id: int | None
    duplicate: bool


@dataclasses.dataclass(frozen=True)
class StatusPost:
    run_id: str
    org: str
    project: str
    webhook: str
    url: str
    sha: str | None
    status: str
    exit_code: int | None
    error: str | None


@dataclasses.dataclass(frozen=True)
class StatusPostState:
    webhook: str
    url: str
    state: str
    attempts: int
    last_error: str | None


@dataclasses.dataclass(frozen=True)
class Handler:
    name: str
    event: str
    workflow: str
    source_workflow: str | None
    created_at: dt.datetime
    paused: bool


@dataclasses.dataclass(frozen=True)
class StoredDelivery:
    webhook: str
    event: str
    input: bytes
    untrusted: bool


@dataclasses.dataclass(frozen=True)
class Redelivery:
    id: int
    outcome: str
    run_id: str | None
    event_id: int | None


# -- schedules ------------------------------------------------------------------------------

async def create_schedule(conn: AsyncConnection, org: str, project: str, name: str, *,
                          workflow: str, cron: str | None, timezone: str,
                          every_seconds: float | None, input: bytes | None,
                          next_fire_at: dt.datetime | None) -> None:
    await conn.execute("SELECT cryo.create_schedule(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                       (org, project, name, workflow, cron, timezone, every_seconds, input,
                        next_fire_at))


async def list_schedules(conn: AsyncConnection, org: str, project: str) -> list[Schedule]:
    cur = conn.cursor(row_factory=class_row(Schedule))
    await cur.execute("SELECT * FROM cryo.list_schedules(%s, %s)", (org, project))
    return await cur.fetchall()


async def pause_schedule(conn: AsyncConnection, org: str, project: str, name: str,
                         paused: bool) -> None:
    await conn.execute("SELECT cryo.pause_schedule(%s, %s, %s, %s)", (org, project, name, paused))


async def update_schedule(conn: AsyncConnection, org: str, project: str, name: str, *,
                          workflow: str, cron: str | None, timezone: str,
                          every_seconds: float | None, input: bytes | None, keep_input: bool,
                          next_fire_at: dt.datetime | None) -> None:
    await conn.execute("SELECT cryo.update_schedule(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                       (org, project, name, workflow, cron, timezone, every_seconds, input,
                        keep_input, next_fire_at))


async def read_schedule_input(conn: AsyncConnection, org: str, project: str,
                              name: str) -> bytes | None:
    return await _one(conn, "SELECT cryo.read_schedule_input(%s, %s, %s)", (org, project, name))


async def run_schedule_now(conn: AsyncConnection, org: str, project: str, name: str, *,
                           input: bytes, scope: dict[str, Any]) -> str | None:
    return await _one(conn, "SELECT cryo.run_schedule_now(%s, %s, %s, %s, %s)",
                      (org, project, name, input, Jsonb(scope)))


async def delete_schedule(conn: AsyncConnection, org: str, project: str, name: str) -> None:
    await conn.execute("SELECT cryo.delete_schedule(%s, %s, %s)", (org, project, name))


async def claim_schedules(conn: AsyncConnection, limit: int = 100) -> list[DueSchedule]:
    cur = conn.cursor(row_factory=class_row(DueSchedule))
    await cur.execute("SELECT * FROM cryo.claim_schedules(%s)", (limit,))
    return await cur.fetchall()


async def plan_schedule(conn: AsyncConnection, org: str, project: str, name: str,
                        next_fire_at: dt.datetime | None) -> None:
    await conn.execute("SELECT cryo.plan_schedule(%s, %s, %s, %s)",
                       (org, project, name, next_fire_at))


async def fire_schedule(conn: AsyncConnection, org: str, project: str, name: str, *,
                        scheduled_at: dt.datetime, next_fire_at: dt.datetime, input: bytes,
                        scope: dict[str, Any], refused: str | None = None) -> str | None:
    return await _one(conn, "SELECT cryo.fire_schedule(%s, %s, %s, %s, %s, %s, %s, %s)",
                      (org, project, name, scheduled_at, next_fire_at, input, Jsonb(scope),
                       refused))


# -- webhooks -------------------------------------------------------------------------------

async def create_webhook(conn: AsyncConnection, org: str, project: str, name: str, *,
                         workflow: str | None, secret: bytes, status_url: str | None) -> None:
    await conn.execute("SELECT cryo.create_webhook(%s, %s, %s, %s, %s, %s)",
                       (org, project, name, workflow, secret, status_url))


async def get_webhook(conn: AsyncConnection, org: str, project: str, name: str) -> Webhook:
    cur = conn.cursor(row_factory=class_row(Webhook))
    await cur.execute("SELECT * FROM cryo.get_webhook(%s, %s, %s)", (org, project, name))
    return await cur.fetchone()  # type: ignore[return-value]


async def list_webhooks(conn: AsyncConnection, org: str, project: str) -> list[WebhookRow]:
    cur = conn.cursor(row_factory=class_row(WebhookRow))
    await cur.execute("SELECT * FROM cryo.list_webhooks(%s, %s)", (org, project))
    return await cur.fetchall()


async def update_webhook(conn: AsyncConnection, org: str, project: str, name: str, *,
                         workflow: str | None, status_url: str | None) -> None:
    await conn.execute("SELECT cryo.update_webhook(%s, %s, %s, %s, %s)",
                       (org, project, name, workflow, status_url))


async def pause_webhook(conn: AsyncConnection, org: str, project: str, name: str,
                        paused: bool) -> None:
    await conn.execute("SELECT cryo.pause_webhook(%s, %s, %s, %s)", (org, project, name, paused))


async def read_webhook_delivery(conn: AsyncConnection, org: str, project: str,
                                delivery: int) -> StoredDelivery:
    cur = conn.cursor(row_factory=class_row(StoredDelivery))
    await cur.execute("SELECT * FROM cryo.read_webhook_delivery(%s, %s, %s)",
                      (org, project, delivery))
    return await cur.fetchone()  # type: ignore[return-value]


async def redeliver_webhook(conn: AsyncConnection, org: str, project: str, delivery: int, *,
                            trigger: dict[str, Any], input: bytes, payload: bytes,
                            by: str | None, refused: str | None = None) -> Redelivery:
    cur = conn.cursor(row_factory=class_row(Redelivery))
    await cur.execute("SELECT * FROM cryo.redeliver_webhook(%s, %s, %s, %s, %s, %s, %s, %s)",
                      (org, project, delivery, Jsonb(trigger), input, payload, by, refused))
    return await cur.fetchone()  # type: ignore[return-value]


async def delete_webhook(conn: AsyncConnection, org: str, project: str, name: str) -> None:
    await conn.execute("SELECT cryo.delete_webhook(%s, %s, %s)", (org, project, name))


async def deliver_webhook(conn: AsyncConnection, org: str, project: str, name: str, *,
                          body_hash: bytes, event: str, trigger: dict[str, Any], input: bytes,
                          payload: bytes, untrusted: bool, refused: str | None = None) -> Delivery:
    cur = conn.cursor(row_factory=class_row(Delivery))
    await cur.execute("SELECT * FROM cryo.deliver_webhook(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (org, project, name, body_hash, event, Jsonb(trigger), input, payload,
                       untrusted, refused))
    return await cur.fetchone()  # type: ignore[return-value]


async def take_status_posts(conn: AsyncConnection, limit: int = 20) -> list[StatusPost]:
    cur = conn.cursor(row_factory=class_row(StatusPost))
    await cur.execute("SELECT * FROM cryo.take_status_posts(%s)", (limit,))
    return await cur.fetchall()


async def finish_status_post(conn: AsyncConnection, run_id: str, error: str | None) -> None:
    await conn.execute("SELECT cryo.finish_status_post(%s, %s)", (run_id, error))


async def read_status_post(conn: AsyncConnection, run_id: str) -> StatusPostState | None:
    cur = conn.cursor(row_factory=class_row(StatusPostState))
    await cur.execute("SELECT * FROM cryo.read_status_post(%s)", (run_id,))
    return await cur.fetchone()


# -- event handlers ---------------------------------------------------------------------------

async def create_handler(conn: AsyncConnection, org: str, project: str, name: str, *,
                         event: str, workflow: str) -> None:
    await conn.execute("SELECT cryo.create_handler(%s, %s, %s, %s, %s)",
                       (org, project, name, event, workflow))


async def list_handlers(conn: AsyncConnection, org: str, project: str) -> list[Handler]:
    cur = conn.cursor(row_factory=class_row(Handler))
    await cur.execute("SELECT * FROM cryo.list_handlers(%s, %s)", (org, project))
    return await cur.fetchall()


async def update_handler(conn: AsyncConnection, org: str, project: str, name: str, *,
                         event: str, workflow: str) -> None:
    await conn.execute("SELECT cryo.update_handler(%s, %s, %s, %s, %s)",
                       (org, project, name, event, workflow))


async def pause_handler(conn: AsyncConnection, org: str, project: str, name: str,
                        paused: bool) -> None:
    await conn.execute("SELECT cryo.pause_handler(%s, %s, %s, %s)", (org, project, name, paused))


async def delete_handler(conn: AsyncConnection, org: str, project: str, name: str) -> None:
    await conn.execute("SELECT cryo.delete_handler(%s, %s, %s)", (org, project, name))


async def engine_now(conn: AsyncConnection) -> dt.datetime:
    """The engine's clock (cryo.now(), which honours cryo.fake_now)."""
    return await _one(conn, "SELECT cryo.now()", ())
