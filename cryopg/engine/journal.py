"""The journal of durable calls, the history and the logs a run leaves."""

from __future__ import annotations

import datetime as dt
import uuid

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine.types import HistoryEvent, LogChunk

# (run_id, token, position, family, name, ordinal, label, result, exit_code, path,
#  started_at: when the agent began the step)
StepItem = tuple[str, uuid.UUID, int | None, str, str, int, str | None, bytes | None,
                 int | None, str | None, dt.datetime | None]


async def record_steps(conn: AsyncConnection,
                       items: list[StepItem]) -> list[tuple[int | None, str | None, str | None]]:
    """Each item as record_step takes it; returns per item, in order, (seq, None, None) or
    (None, SQLSTATE, message) for one refused alone."""
    cols = list(zip(*items, strict=True)) if items else [()] * 11
    cur = await conn.execute(
        "SELECT * FROM cryo.record_steps(%s::text[], %s::uuid[], %s::int[], %s::text[],"
        " %s::text[], %s::int[], %s::text[], %s::bytea[], %s::int[], %s::text[],"
        " %s::timestamptz[])",
        [list(c) for c in cols], prepare=True)
    rows = {r[0]: (r[1], r[2], r[3]) for r in await cur.fetchall()}
    return [rows[i + 1] for i in range(len(items))]


async def mark_step(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                    position: int | None = None, family: str, name: str, ordinal: int,
                    path: str | None = None) -> None:
    await conn.execute("SELECT cryo.mark_step(%s, %s, %s, %s, %s, %s, %s)",
                       (run_id, token, position, family, name, ordinal, path))


async def annotate_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, text: bytes) -> None:
    await conn.execute("SELECT cryo.annotate_run(%s, %s, %s)", (run_id, token, text))


async def read_history(conn: AsyncConnection, run_id: str) -> list[HistoryEvent]:
    cur = conn.cursor(row_factory=class_row(HistoryEvent))
    await cur.execute("SELECT * FROM cryo.read_history(%s)", (run_id,))
    return await cur.fetchall()


async def read_logs(conn: AsyncConnection, run_id: str, after: int = 0,
                    limit: int = 500) -> list[LogChunk]:
    # Binary results: bytea in text format travels as hex, twice its size to send and parse.
    cur = conn.cursor(row_factory=class_row(LogChunk), binary=True)
    await cur.execute("SELECT * FROM cryo.read_logs(%s, %s, %s)", (run_id, after, limit))
    return await cur.fetchall()


async def read_logs_before(conn: AsyncConnection, run_id: str, before: int,
                           limit: int = 64) -> list[LogChunk]:
    """Chunks before chunk id `before`, newest first."""
    cur = conn.cursor(row_factory=class_row(LogChunk), binary=True)
    await cur.execute("SELECT * FROM cryo.read_logs_before(%s, %s, %s)", (run_id, before, limit))
    return await cur.fetchall()


async def read_last_attempt_log(conn: AsyncConnection, run_id: str) -> list[LogChunk]:
    cur = conn.cursor(row_factory=class_row(LogChunk))
    await cur.execute("SELECT * FROM cryo.read_last_attempt_log(%s)", (run_id,))
    return await cur.fetchall()
