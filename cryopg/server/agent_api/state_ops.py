"""Durable state for a running script: `POST /api/v1/agent/runs/{run}/state/{op}` with
op one of get, list, set, delete, add, cas, incr. Every op carries the run's live claim
token (bound to the calling agent token): reads check it in their own transaction
(cryo.check_claim), writes in the SQL function that writes.

Values are sealed here with the org's key before they reach SQL and opened here after;
SQL sees keys, scopes and versions only. incr is the one operation that needs the
value to compute the write, so it runs a compare-and-set loop against
cryo.state_incr (see 60_state.sql for why that keeps the count exact).
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, InvalidArgument, NotANumber, NotFound
from cryopg.seal import Sealer
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import agent_claim, agent_run
from cryopg.server.bodies import (
    int_field,
    json_body,
    optional_str_field,
    recorded_at,
    str_field,
)
from cryopg.server.render import cell_json
from cryopg.server.trust_flags import PUBLIC, TAINTED, flag

# An incr that keeps losing its compare-and-set gives up after this many tries (each
# loss means another run's increment landed, so the cell is making progress).
INCR_MAX_TRIES = 500


class Contended(CryoError):
    """An incr lost its compare-and-set too many times in a row; nothing was written."""

    code, http_status = "contended", 503


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


async def agent_state(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    op = request.match_info["op"]
    body = await json_body(request)
    entity = optional_str_field(body, "entity")
    token = await agent_claim(request, body)
    sealer = await request.app[KEYS].sealer(org)
    pool = request.app[POOL]
    # What a run reads, SQL decides from its trust (docs/security/trust.md).
    tainted = flag(body, TAINTED)
    if op == "list":
        async with connection(pool) as conn, conn.transaction():
            cells = await engine.run_state_list(conn, run_id, token, entity, tainted)
        return web.json_response({"cells": [cell_json(sealer, c) for c in cells]})
    key = str_field(body, "key")
    if op == "get":
        async with connection(pool) as conn, conn.transaction():
            cell = await engine.run_state_get(conn, run_id, token, entity, key, tainted)
        if cell is None:
            return web.json_response({"found": False, "value": None, "version": None})
        return web.json_response({"found": True, **cell_json(sealer, cell)})
    if op == "set":
        if "value" not in body:
            raise InvalidArgument("set needs a value")
        async with connection(pool) as conn:
            version = await engine.state_set(conn, run_id, token, entity, key,
                                             sealer.seal_json(body["value"]),
                                             flag(body, PUBLIC))
        return web.json_response({"version": version})
    if op == "delete":
        async with connection(pool) as conn:
            deleted = await engine.state_delete(conn, run_id, token, entity, key)
        return web.json_response({"deleted": deleted})
    call = {"name": str_field(body, "name"), "ordinal": int_field(body, "ordinal"),
            **recorded_at(body)}
    if op == "add":
        value = body.get("value", True)
        async with connection(pool) as conn:
            got = await engine.state_add(conn, run_id, token, entity, key,
                                         sealer.seal_json(value), **call)
        return web.json_response({"claimed": got.won, "version": got.version,
                                  "replayed": got.replayed})
    if op == "cas":
        if "value" not in body:
            raise InvalidArgument("cas needs a value")
        expect = int_field(body, "expect")
        async with connection(pool) as conn:
            got = await engine.state_cas(conn, run_id, token, entity, key,
                                         sealer.seal_json(body["value"]), expect, **call)
        return web.json_response({"swapped": got.won, "version": got.version,
                                  "replayed": got.replayed})
    if op == "incr":
        by = body.get("by", 1)
        if not _is_number(by):
            raise InvalidArgument("by must be a number")
        answer = await incr_cell(pool, sealer, run_id, token, entity, key, by, call)
        return web.json_response(answer)
    raise NotFound(f"no state operation {op!r}")


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
        if not _is_number(current):
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


def add_routes(app: web.Application) -> None:
    add_run_route(app, "state/{op}", agent_state)
