"""Durable state for a running script: `POST /api/v1/agent/runs/{run}/state/{op}` with
op one of get, list, set, delete, add, cas, incr. Every op carries the run's live claim
token (bound to the calling agent token): reads check it in their own transaction
(cryo.check_claim), writes in the SQL function that writes.

Values are sealed here with the org's key before they reach SQL and opened here after;
SQL sees keys, scopes and versions only. incr is the one operation that needs the
value to compute the write, so it runs a compare-and-set loop against
cryo.state_incr (cryopg/state_incr.py).
"""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument, NotFound
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
from cryopg.state_incr import incr_cell, is_number


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
        if not is_number(by):
            raise InvalidArgument("by must be a number")
        answer = await incr_cell(pool, sealer, run_id, token, entity, key, by, call)
        return web.json_response(answer)
    raise NotFound(f"no state operation {op!r}")


def add_routes(app: web.Application) -> None:
    add_run_route(app, "state/{op}", agent_state)
