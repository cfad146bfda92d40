"""A user's view of runs, and the subscription that makes a run NOTIFY."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row

from cryopg.engine.types import Checkpoint, EntityCell, LogTail, Run, RunDetail, RunRow


async def get_run(conn: AsyncConnection, run_id: str) -> Run:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.get_run(%s)", (run_id,))
    return await cur.fetchone()


async def list_runs(conn: AsyncConnection, org: str, project: str, limit: int = 50) -> list[Run]:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.list_runs(%s, %s, %s)", (org, project, limit))
    return await cur.fetchall()


async def list_runs_page(conn: AsyncConnection, org: str, project: str, *,
                         status: str | None = None, workflow: str | None = None,
                         parent: str | None = None, before: str | None = None,
                         limit: int = 50) -> list[RunRow]:
    cur = conn.cursor(row_factory=class_row(RunRow))
    await cur.execute("SELECT * FROM cryo.list_runs_page(%s, %s, %s, %s, %s, %s, %s)",
                      (org, project, status, workflow, parent, before, limit))
    return await cur.fetchall()


async def read_checkpoints(conn: AsyncConnection, run_id: str,
                           limit: int = 1000) -> list[Checkpoint]:
    cur = conn.cursor(row_factory=class_row(Checkpoint))
    await cur.execute("SELECT * FROM cryo.read_checkpoints(%s, %s)", (run_id, limit))
    return await cur.fetchall()


async def log_tail_start(conn: AsyncConnection, run_id: str, max_bytes: int) -> LogTail:
    cur = conn.cursor(row_factory=class_row(LogTail))
    await cur.execute("SELECT * FROM cryo.log_tail_start(%s, %s)", (run_id, max_bytes))
    return await cur.fetchone()


async def read_run_detail(conn: AsyncConnection, run_id: str) -> RunDetail | None:
    cur = conn.cursor(row_factory=class_row(RunDetail))
    await cur.execute("SELECT * FROM cryo.read_run_detail(%s)", (run_id,))
    return await cur.fetchone()


async def run_entity_cells(conn: AsyncConnection, run_id: str,
                           limit: int = 200) -> list[EntityCell]:
    cur = conn.cursor(row_factory=class_row(EntityCell))
    await cur.execute("SELECT * FROM cryo.run_entity_cells(%s, %s)", (run_id, limit))
    return await cur.fetchall()


async def watch_run(conn: AsyncConnection, run_id: str) -> None:
    await conn.execute("SELECT cryo.watch_run(%s)", (run_id,))


async def list_webhook_deliveries(conn: AsyncConnection, org: str, project: str,
                                  limit: int = 20) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute("SELECT * FROM cryo.list_webhook_deliveries(%s, %s, %s)",
                      (org, project, limit))
    return await cur.fetchall()
