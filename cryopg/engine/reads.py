"""A user's view of runs, and the subscription that makes a run NOTIFY."""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine.types import Run


async def get_run(conn: AsyncConnection, run_id: str) -> Run:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.get_run(%s)", (run_id,))
    return await cur.fetchone()


async def list_runs(conn: AsyncConnection, org: str, project: str, limit: int = 50) -> list[Run]:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.list_runs(%s, %s, %s)", (org, project, limit))
    return await cur.fetchall()


async def watch_run(conn: AsyncConnection, run_id: str) -> None:
    await conn.execute("SELECT cryo.watch_run(%s)", (run_id,))
