"""Logs moved to the object store (sql/functions/82_log_store.sql)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class LogToMove:
    run_id: str
    org: str
    project: str
    bytes: int
    last_chunk_id: int


@dataclasses.dataclass(frozen=True)
class LogArchive:
    object_key: str
    last_chunk_id: int
    bytes: int


async def logs_to_archive(conn: AsyncConnection, older_than: dt.timedelta,
                          limit: int) -> list[LogToMove]:
    cur = conn.cursor(row_factory=class_row(LogToMove))
    await cur.execute("SELECT * FROM cryo.logs_to_archive(%s, %s)", (older_than, limit))
    return await cur.fetchall()


async def archive_run_log(conn: AsyncConnection, run_id: str, object_key: str,
                          last_chunk_id: int, nbytes: int) -> bool:
    return bool(await _one(conn, "SELECT cryo.archive_run_log(%s, %s, %s, %s)",
                           (run_id, object_key, last_chunk_id, nbytes)))


async def read_log_archive(conn: AsyncConnection, run_id: str) -> LogArchive | None:
    cur = conn.cursor(row_factory=class_row(LogArchive))
    await cur.execute("SELECT * FROM cryo.read_log_archive(%s)", (run_id,))
    return await cur.fetchone()


async def trim_run_log(conn: AsyncConnection, run_id: str, keep_bytes: int,
                       marker: bytes) -> int:
    return int(await _one(conn, "SELECT cryo.trim_run_log(%s, %s, %s)",
                          (run_id, keep_bytes, marker)))


async def log_objects_to_delete(conn: AsyncConnection, limit: int) -> list[tuple[int, str]]:
    cur = await conn.execute("SELECT id, object_key FROM cryo.log_objects_to_delete(%s)",
                             (limit,))
    return [(int(i), str(k)) for i, k in await cur.fetchall()]


async def forget_log_objects(conn: AsyncConnection, ids: list[int]) -> int:
    return int(await _one(conn, "SELECT cryo.forget_log_objects(%s)", (ids,)))
