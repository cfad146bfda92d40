"""A run's end: finished by its agent (one or a batch) or cancelled by a user."""

from __future__ import annotations

import uuid

from psycopg import AsyncConnection

from cryopg.engine._sql import _one


async def finish_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, outcome: str,
                     exit_code: int | None, error: str | None) -> None:
    await conn.execute("SELECT cryo.finish_run(%s, %s, %s, %s, %s)",
                       (run_id, token, outcome, exit_code, error))


# (run_id, token, outcome, exit_code, error, sealed last log bytes or None), and
# optionally (offset of those bytes in the pass's log or None, their plain length).
FinishItem = (tuple[str, uuid.UUID, str, int | None, str | None, bytes | None]
              | tuple[str, uuid.UUID, str, int | None, str | None, bytes | None, int | None,
                      int | None])


def log_offsets(runs: list[FinishItem]) -> tuple[list[int | None] | None,
                                                 list[int | None] | None]:
    """The finish_runs arrays of log offsets and lengths (NULL when no item has one)."""
    if all(len(r) < 7 or r[6] is None for r in runs):
        return None, None
    return ([r[6] if len(r) > 6 else None for r in runs],  # type: ignore[misc]
            [r[7] if len(r) > 7 else None for r in runs])  # type: ignore[misc]


async def finish_runs(
        conn: AsyncConnection,
        runs: list[FinishItem],
) -> dict[str, bool]:
    """Each item is (run_id, token, outcome, exit_code, error, last sealed log bytes or
    None[, their offset in the pass's log, their plain length]); returns run_id ->
    finished (False for a stale claim)."""
    cur = await conn.execute(
        "SELECT * FROM cryo.finish_runs(%s, %s, %s, %s, %s, %s, %s, %s)",
        ([r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs],
         [r[3] for r in runs], [r[4] for r in runs], [r[5] for r in runs],
         *log_offsets(runs)), prepare=True)
    return dict(await cur.fetchall())


async def cancel_run(conn: AsyncConnection, run_id: str) -> str:
    return await _one(conn, "SELECT cryo.cancel_run(%s)", (run_id,))
