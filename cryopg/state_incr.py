"""A state cell's incr: the compare-and-set loop over cryo.state_incr that keeps the
count exact (see 70_state.sql). A running script's incr (agent_api/state_ops.py) and a
graph's state node (graphs/nodes/state_node.py, inside its driver's turn) both run it.
It is the one state operation that opens the value to compute the write."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, NotANumber
from cryopg.seal import Sealer

# An incr that keeps losing its compare-and-set gives up after this many tries (each
# loss means another run's increment landed, so the cell is making progress).
INCR_MAX_TRIES = 500


class Contended(CryoError):
    """An incr lost its compare-and-set too many times in a row; nothing was written."""

    code, http_status = "contended", 503


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


async def incr_cell(pool: AsyncConnectionPool, sealer: Sealer, run_id: str, token: uuid.UUID,
                    entity: str | None, key: str, by: int | float,
                    call: dict[str, Any]) -> dict[str, Any]:
    """Read, add, compare-and-set, until the write lands or a memo answers. `call` is
    the durable call's identity and position: {"path", "name", "ordinal", "position"}.

    All in one transaction: the first (reading) call locks an existing cell, so the
    compare-and-set after it cannot lose and writers to a hot key queue on the row lock
    instead of retrying. Only two runs creating the cell at once can still race."""
    async with connection(pool) as conn, conn.transaction():
        return await incr_in(conn, sealer, run_id, token, entity, key, by, call)


async def incr_in(conn: AsyncConnection, sealer: Sealer, run_id: str, token: uuid.UUID,
                  entity: str | None, key: str, by: int | float,
                  call: dict[str, Any]) -> dict[str, Any]:
    """incr_cell's loop on a connection the caller holds, inside its transaction (the
    graph driver increments within its own turn)."""
    expect: int | None = None
    value: bytes | None = None
    result: bytes | None = None
    total: int | float = 0
    for attempt in range(INCR_MAX_TRIES):
        step = await engine.state_incr(conn, run_id, token, entity, key, expect, value,
                                       result, **call)
        if step.outcome == "recorded":
            memo = sealer.open_json(step.sealed) if step.sealed is not None else {}
            answer = dict(memo.get("answer") or {})
            answer["replayed"] = True
            return answer
        if step.outcome == "done":
            return {"value": total, "version": step.version, "replayed": False}
        current = sealer.open_json(step.sealed) if step.sealed is not None else 0
        if not is_number(current):
            raise NotANumber(f"cell {key!r} holds {json.dumps(current)[:60]}, not a number; "
                             "it was left as it was")
        total = current + by
        expect = int(step.version or 0)
        value = sealer.seal_json(total)
        # The memo: what a later pass prints and answers without asking again.
        result = sealer.seal_json({"stdout": json.dumps(total),
                                   "answer": {"value": total, "version": expect + 1}})
        if attempt >= 2:  # someone else keeps landing first: step aside a moment
            await asyncio.sleep(random.uniform(0, min(0.001 * attempt, 0.02)))
    raise Contended(f"incr of {key!r} lost its compare-and-set {INCR_MAX_TRIES} times; "
                    "nothing was written")
