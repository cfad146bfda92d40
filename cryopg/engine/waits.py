"""Calls that park a run or reach past it: sleeps, signals, events, child runs,
activities, outputs and leases on concurrency groups.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import Event, WaitAnswer


async def park_sleep(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                     position: int | None = None, ordinal: int, seconds: float,
                     path: str | None = None) -> dt.datetime:
    return await _one(conn, "SELECT cryo.park_sleep(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, ordinal, seconds, path))


async def send_signal(conn: AsyncConnection, run_id: str, name: str, payload: bytes) -> int:
    """Sends a sealed payload (applications pass jsonb to the same SQL function)."""
    return await _one(conn, "SELECT cryo.send_signal(%s, %s, p_sealed => %s)",
                      (run_id, name, payload))


async def wait_signal(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                      position: int | None = None, name: str, ordinal: int,
                      timeout: float | None, path: str | None = None) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_signal(%s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, name, ordinal, timeout, path))
    return await cur.fetchone()


async def wait_event(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                     position: int | None = None, name: str, ordinal: int,
                     timeout: float | None, path: str | None = None,
                     tainted: bool = False) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_event(%s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, name, ordinal, timeout, path, tainted))
    return await cur.fetchone()


async def publish_event(conn: AsyncConnection, org: str, project: str, name: str,
                        payload: bytes, public: bool = False) -> int:
    return await _one(conn, "SELECT cryo.publish_event(%s, %s, %s, p_sealed => %s, "
                      "p_public => %s)", (org, project, name, payload, public))


async def emit_from_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                        position: int | None = None, ordinal: int, name: str, payload: bytes,
                        path: str | None = None, public: bool = False) -> int:
    return await _one(conn, "SELECT cryo.emit_from_run(%s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, ordinal, name, payload, path, public))


async def list_events(conn: AsyncConnection, org: str, project: str, name: str | None,
                      limit: int) -> list[Event]:
    cur = conn.cursor(row_factory=class_row(Event))
    await cur.execute("SELECT * FROM cryo.list_events(%s, %s, %s, %s)", (org, project, name, limit))
    return await cur.fetchall()


async def spawn_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                    position: int | None = None, ordinal: int, filename: str,
                    interpreter: str | None, source: bytes, input: bytes | None,
                    required_caps: list[str] | None, path: str | None = None) -> str:
    return await _one(conn, "SELECT cryo.spawn_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, ordinal, filename, interpreter, source, input,
                       required_caps, path))


async def submit_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                          position: int | None = None, name: str, source: bytes,
                          required_caps: list[str], retries: int, retry_backoff: float,
                          retry_on: list[int] | None, path: str | None = None) -> str:
    return await _one(conn,
                      "SELECT cryo.submit_activity(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, name, source, required_caps, retries,
                       retry_backoff, retry_on, path))


async def collect_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                           position: int | None = None, ordinal: int, name: str,
                           path: str | None = None) -> tuple[bool, str, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.collect_activity(%s, %s, %s, %s, %s, %s)",
                             (run_id, token, position, ordinal, name, path))
    parked, child, code = await cur.fetchone()
    return parked, child, code


async def wait_all_activities(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                              position: int | None = None, ordinal: int,
                              path: str | None = None) -> tuple[bool, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.wait_all_activities(%s, %s, %s, %s, %s)",
                             (run_id, token, position, ordinal, path))
    parked, failed = await cur.fetchone()
    return parked, failed


async def set_output(conn: AsyncConnection, run_id: str, token: uuid.UUID, key: str,
                     value: bytes) -> None:
    await conn.execute("SELECT cryo.set_output(%s, %s, %s, %s)", (run_id, token, key, value))


async def read_outputs(conn: AsyncConnection,
                       run_id: str) -> list[tuple[str, bytes | None, Any]]:
    """(key, sealed value, clear value): one of the two is set."""
    cur = await conn.execute("SELECT key, value, value_clear FROM cryo.read_outputs(%s)",
                             (run_id,))
    return [(k, v, c) for k, v, c in await cur.fetchall()]


async def acquire_lease(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                        position: int | None = None, ordinal: int, group: str, scoped: bool,
                        path: str | None = None) -> bool:
    return await _one(conn, "SELECT cryo.acquire_lease(%s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, position, ordinal, group, scoped, path))


async def release_lease(conn: AsyncConnection, run_id: str, token: uuid.UUID, group: str) -> bool:
    return await _one(conn, "SELECT cryo.release_lease(%s, %s, %s)", (run_id, token, group))
