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
class LogMove:
    """A mover's lease on one run's log: the attempt and the key only it writes."""

    run_id: str
    org: str
    project: str
    attempt_id: str
    object_key: str
    last_chunk_id: int
    bytes: int
    attempts: int


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


async def claim_log_moves(conn: AsyncConnection, holder: str, prefix: str,
                          older_than: dt.timedelta, lease: dt.timedelta,
                          limit: int) -> list[LogMove]:
    cur = conn.cursor(row_factory=class_row(LogMove))
    await cur.execute("SELECT * FROM cryo.claim_log_moves(%s, %s, %s, %s, %s)",
                      (holder, prefix, older_than, lease, limit))
    return await cur.fetchall()


async def renew_log_move(conn: AsyncConnection, run_id: str, attempt_id: str,
                         lease: dt.timedelta) -> dt.datetime:
    return await _one(conn, "SELECT cryo.renew_log_move(%s, %s, %s)",  # type: ignore[no-any-return]
                      (run_id, attempt_id, lease))


async def read_log_page(conn: AsyncConnection, run_id: str, after: int, upto: int,
                        max_bytes: int) -> list[tuple[int, bytes]]:
    cur = await conn.execute("SELECT id, data FROM cryo.read_log_page(%s, %s, %s, %s)",
                             (run_id, after, upto, max_bytes))
    return [(int(i), bytes(d)) for i, d in await cur.fetchall()]


async def archive_run_log(conn: AsyncConnection, run_id: str, attempt_id: str,
                          object_key: str, nbytes: int, object_bytes: int,
                          sha256: bytes) -> bool:
    return bool(await _one(conn, "SELECT cryo.archive_run_log(%s, %s, %s, %s, %s, %s)",
                           (run_id, attempt_id, object_key, nbytes, object_bytes, sha256)))


async def abandon_log_move(conn: AsyncConnection, run_id: str, attempt_id: str,
                           object_key: str | None) -> bool:
    return bool(await _one(conn, "SELECT cryo.abandon_log_move(%s, %s, %s)",
                           (run_id, attempt_id, object_key)))


async def read_log_archive(conn: AsyncConnection, run_id: str) -> LogArchive | None:
    cur = conn.cursor(row_factory=class_row(LogArchive))
    await cur.execute("SELECT * FROM cryo.read_log_archive(%s)", (run_id,))
    return await cur.fetchone()


async def log_trim_point(conn: AsyncConnection, run_id: str, keep_bytes: int) -> int | None:
    got = await _one(conn, "SELECT cryo.log_trim_point(%s, %s)", (run_id, keep_bytes))
    return None if got is None else int(got)


async def trim_run_log(conn: AsyncConnection, run_id: str, attempt_id: str, upto: int,
                       marker: bytes) -> int:
    return int(await _one(conn, "SELECT cryo.trim_run_log(%s, %s, %s, %s)",
                          (run_id, attempt_id, upto, marker)))


async def log_objects_to_delete(conn: AsyncConnection, limit: int) -> list[tuple[int, str]]:
    cur = await conn.execute("SELECT id, object_key FROM cryo.log_objects_to_delete(%s)",
                             (limit,))
    return [(int(i), str(k)) for i, k in await cur.fetchall()]


async def forget_log_objects(conn: AsyncConnection, ids: list[int]) -> int:
    return int(await _one(conn, "SELECT cryo.forget_log_objects(%s)", (ids,)))
