"""Calls that park a run or reach past it: sleeps, signals, events, child runs,
activities, outputs and project leases.
"""

from __future__ import annotations

import datetime as dt
import uuid

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import Event, WaitAnswer


async def park_sleep(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                     ordinal: int, seconds: float) -> dt.datetime:
    return await _one(conn, "SELECT cryo.park_sleep(%s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, seconds))


async def send_signal(conn: AsyncConnection, run_id: str, name: str, payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.send_signal(%s, %s, %s)", (run_id, name, payload))


async def wait_signal(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                      name: str, ordinal: int, timeout: float | None) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_signal(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, ordinal, timeout))
    return await cur.fetchone()


async def wait_event(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                     name: str, ordinal: int, timeout: float | None) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_event(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, ordinal, timeout))
    return await cur.fetchone()


async def publish_event(conn: AsyncConnection, org: str, project: str, name: str,
                        payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.publish_event(%s, %s, %s, %s)",
                      (org, project, name, payload))


async def emit_from_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                        ordinal: int, name: str, payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.emit_from_run(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, name, payload))


async def list_events(conn: AsyncConnection, org: str, project: str, name: str | None,
                      limit: int) -> list[Event]:
    cur = conn.cursor(row_factory=class_row(Event))
    await cur.execute("SELECT * FROM cryo.list_events(%s, %s, %s, %s)", (org, project, name, limit))
    return await cur.fetchall()


async def spawn_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                    ordinal: int, filename: str, interpreter: str | None, source: bytes,
                    input: bytes | None, required_caps: list[str]) -> str:
    return await _one(conn, "SELECT cryo.spawn_run(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, filename, interpreter, source, input,
                       required_caps))


async def submit_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                          name: str, source: bytes, required_caps: list[str], retries: int,
                          retry_backoff: float, retry_on: list[int] | None) -> str:
    return await _one(conn, "SELECT cryo.submit_activity(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, source, required_caps, retries, retry_backoff,
                       retry_on))


async def collect_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                           ordinal: int, name: str) -> tuple[bool, str, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.collect_activity(%s, %s, %s, %s, %s)",
                             (run_id, token, path, ordinal, name))
    parked, child, code = await cur.fetchone()
    return parked, child, code


async def wait_all_activities(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                              path: str, ordinal: int) -> tuple[bool, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.wait_all_activities(%s, %s, %s, %s)",
                             (run_id, token, path, ordinal))
    parked, failed = await cur.fetchone()
    return parked, failed


async def set_output(conn: AsyncConnection, run_id: str, token: uuid.UUID, key: str,
                     value: bytes) -> None:
    await conn.execute("SELECT cryo.set_output(%s, %s, %s, %s)", (run_id, token, key, value))


async def read_outputs(conn: AsyncConnection, run_id: str) -> list[tuple[str, bytes]]:
    cur = await conn.execute("SELECT key, value FROM cryo.read_outputs(%s)", (run_id,))
    return [(k, v) for k, v in await cur.fetchall()]


async def acquire_lock(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                       ordinal: int, group: str, scoped: bool) -> bool:
    return await _one(conn, "SELECT cryo.acquire_lock(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, group, scoped))


async def release_lock(conn: AsyncConnection, run_id: str, token: uuid.UUID, group: str) -> bool:
    return await _one(conn, "SELECT cryo.release_lock(%s, %s, %s)", (run_id, token, group))
