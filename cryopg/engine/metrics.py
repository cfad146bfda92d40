"""Metrics the database counts (97_metrics.sql): the fold every tick, the read a scrape
makes, and the trace a run belongs to."""

from __future__ import annotations

import dataclasses
import datetime as dt

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class MetricRow:
    metric: str
    org: str
    project: str
    label: str
    label2: str
    value: float
    total: float


async def read_metrics(conn: AsyncConnection, log_move_after: dt.timedelta | None = None,
                       gone_after: dt.timedelta = dt.timedelta(minutes=2)) -> list[MetricRow]:
    cur = conn.cursor(row_factory=class_row(MetricRow))
    await cur.execute("SELECT * FROM cryo.read_metrics(%s, %s)", (log_move_after, gone_after))
    return await cur.fetchall()


async def fold_metrics(conn: AsyncConnection,
                       recount_after: dt.timedelta = dt.timedelta(seconds=10)) -> int:
    """recount_after: how old the queue's depth may grow before a fold recounts it."""
    return int(await _one(conn, "SELECT cryo.fold_metrics(p_recount_after => %s)",
                          (recount_after,)))


async def set_run_traceparent(conn: AsyncConnection, run_id: str, traceparent: str) -> bool:
    return bool(await _one(conn, "SELECT cryo.set_run_traceparent(%s, %s)",
                           (run_id, traceparent)))


async def run_traceparent(conn: AsyncConnection, run_id: str) -> str | None:
    got = await _one(conn, "SELECT cryo.run_traceparent(%s)", (run_id,))
    return None if got is None else str(got)
