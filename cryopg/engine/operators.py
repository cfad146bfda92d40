"""What an operator does beyond submit, signal and cancel: search runs, run one again,
turn down an approval (sql/functions/96_operators.sql and 76_graph_operators.sql,
cryo.search_runs in 95_reads)."""

from __future__ import annotations

from datetime import datetime

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import RunRow


async def search_runs(conn: AsyncConnection, org: str, project: str, *, text: str | None,
                      status: str | None, workflow: str | None, trigger: str | None,
                      since: datetime | None, until: datetime | None, before: str | None,
                      limit: int, order: str | None = None, top: bool = False,
                      input_hash: bytes | None = None) -> list[RunRow]:
    """One page of the runs search; order is a runs-list order (cryo._run_sort_key), top
    keeps top-level runs only, input_hash matches a sealed input's value by its keyed hash."""
    cur = conn.cursor(row_factory=class_row(RunRow))
    await cur.execute("SELECT * FROM cryo.search_runs(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                      " %s, %s, %s)",
                      (org, project, text, status, workflow, trigger, since, until, before, limit,
                       order, top, input_hash))
    return await cur.fetchall()


async def count_runs(conn: AsyncConnection, org: str, project: str, *, search: bool,
                     text: str | None, status: str | None, workflow: str | None,
                     match: str | None, trigger: str | None, since: datetime | None,
                     until: datetime | None, parent: str | None,
                     input_hash: bytes | None = None) -> int:
    """How many runs the runs list holds under its filters (cryo.count_runs)."""
    got = await _one(conn, "SELECT cryo.count_runs(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
                     " %s)", (org, project, search, text, status, workflow, match, trigger,
                              since, until, parent, input_hash))
    return int(got or 0)


async def index_run_input(conn: AsyncConnection, run_id: str, hashes: list[bytes]) -> bool:
    """Stores a trusted run's input digests for the search (cryo.index_run_input)."""
    return bool(await _one(conn, "SELECT cryo.index_run_input(%s, %s)", (run_id, hashes)))


async def rerun_run(conn: AsyncConnection, run_id: str) -> str:
    return await _one(conn, "SELECT cryo.rerun_run(%s)", (run_id,))


async def rerun_run_with_input(conn: AsyncConnection, run_id: str,
                               sealed_input: bytes | None) -> str:
    return await _one(conn, "SELECT cryo.rerun_run_with_input(%s, %s)", (run_id, sealed_input))


async def reject_node(conn: AsyncConnection, run_id: str, node: str, payload: bytes,
                      by: str, auth: str | None = None, item: int | None = None) -> bool:
    return await _one(conn, "SELECT cryo.reject_node(%s, %s, %s, %s, %s, %s)",
                      (run_id, node, payload, by, auth, item))
