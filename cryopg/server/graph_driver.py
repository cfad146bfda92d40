"""The graph driver: every server process runs one. It takes graph runs that need a step
forward (cryo.drive_graphs, SKIP LOCKED), and in ONE transaction per run: records what
ended (children, waits, approvals), unseals what the interpreter's expressions read,
asks SQL what to skip and start (cryo.graph_plan), starts it, and settles the run -- so
any replica may drive any run, and none can drive one twice. A driver that dies rolls
back and the run is pending again.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Driven, NodeRow
from cryopg.server import graph_nodes
from cryopg.server.render import open_document, run_input
from cryopg.server.state import KEYS, NOTIFIER, POOL

DRIVER_ID = f"driver:{socket.gethostname()}"
# Turns run one per transaction; a few at once keep one slow turn from holding up the
# rest (SKIP LOCKED keeps them on different runs).
DRIVERS = 4
MAX_ROUNDS = 200  # plan/record rounds in one turn; a graph that keeps going yields


def referenced(graph: dict[str, Any], configs: dict[str, Any]) -> set[str] | None:
    """The nodes any expression of the graph reads: only their outputs go into the scope,
    so a turn on a large graph does not carry every output across. None (all of them)
    when a code node is there: its program reads the whole scope."""
    from cryopg.graphs.expr import paths

    if any(n.get("type") == "code" for n in graph.get("nodes", [])):
        return None
    found = paths(graph) + paths(configs)
    return {p[1] for p in found if len(p) > 1 and p[0] == "nodes"}


def scope_of(run_id: str, input_value: Any, rows: list[NodeRow], open_json: Any,
             wanted: set[str] | None = None) -> dict[str, Any]:
    """What expressions read: input, nodes.<id>.output / .status, run.id."""
    nodes: dict[str, dict[str, Any]] = {}
    items: dict[str, dict[int, Any]] = {}
    if wanted is not None:
        rows = [r for r in rows if r.node_id in wanted]
    for r in rows:
        n = nodes.setdefault(r.node_id, {"status": r.node_status, "output": None})
        if r.item is not None and r.output is not None and r.item_status in ("succeeded", "seeded"):
            items.setdefault(r.node_id, {})[r.item] = open_json(r.output)
        if r.items is None and r.item is None and r.output is not None:
            n["output"] = open_json(r.output)
    for r in rows:
        if r.item is None:
            continue
        got = items.get(r.node_id, {})
        if r.items is None:
            nodes[r.node_id]["output"] = got.get(0)
        else:
            nodes[r.node_id]["output"] = [got.get(i) for i in range(r.items)]
    return {"input": input_value, "nodes": nodes, "run": {"id": run_id}}


async def advance(app: web.Application, conn: Any, g: Driven) -> str:
    """One turn on one driven run; returns how it settled."""
    sealer = await app[KEYS].sealer(g.org)
    document = json.loads(open_document(sealer, g.source))
    configs = document.get("configs", {})
    input_value = run_input(sealer, g.input, g.input_clear)
    opened: dict[bytes, Any] = {}  # a turn opens each sealed output once

    def open_json(sealed: bytes) -> Any:
        if sealed not in opened:
            opened[sealed] = sealer.open_json(sealed)
        return opened[sealed]

    wanted = referenced(g.graph, configs)
    for _ in range(MAX_ROUNDS):
        rows = await engine.graph_state(conn, g.run_id, g.claim_token,
                                        None if wanted is None else sorted(wanted))
        scope = scope_of(g.run_id, input_value, rows, open_json, wanted)
        turn = graph_nodes.Turn(conn, sealer, g.run_id, g.claim_token, g.org, g.project,
                                configs, scope)
        moved = False
        for r in rows:
            if r.item is not None:
                moved |= await graph_nodes.collect(turn, r)
        if moved:
            continue  # outputs changed: plan over the new scope
        plan = await engine.graph_plan(conn, g.run_id, g.claim_token, configs, scope)
        finish = next((p for p in plan if p.action == "finish"), None)
        started = [p for p in plan if p.action == "start"]
        ended = False
        for p in started:
            ended |= await graph_nodes.start(turn, p, rows)
        if finish is not None and not started:
            output = finish.output
            if output is None and finish.node_id is None:
                every = await engine.graph_state(conn, g.run_id, g.claim_token)
                output = _default_output(g.graph, scope_of(g.run_id, input_value, every,
                                                           open_json))
            return await engine.graph_settle(conn, g.run_id, g.claim_token, True,
                                             sealer.seal_json({"answer": output}))
        if not ended and not any(p.type == "wait" for p in started):
            # Nothing ended in the database: what started runs elsewhere, and another
            # plan would find nothing new. (A wait may be due at once: look again.)
            break
    return await engine.graph_settle(conn, g.run_id, g.claim_token, False)


def _default_output(graph: dict[str, Any], scope: dict[str, Any]) -> Any:
    """Without an output expression: the outputs of the nodes no other node depends on."""
    ids = [n["id"] for n in graph.get("nodes", [])]
    needed = {d for n in graph.get("nodes", []) for d in n.get("deps", [])}
    sinks = [i for i in ids if i not in needed]
    return {i: scope["nodes"].get(i, {}).get("output") for i in sinks}


async def drive_once(app: web.Application) -> int:
    async with connection(app[POOL]) as conn, conn.transaction():
        driven = await engine.drive_graphs(conn, DRIVER_ID, 1)
        for g in driven:
            await advance(app, conn, g)
        return len(driven)


async def drive_forever(app: web.Application, stop: asyncio.Event) -> None:
    # `stop` as well as cancel: on Python 3.11 asyncio.wait_for swallows a cancel that
    # arrives as the event it waits on is set (shutdown sets every waiter's event), and
    # the loop would go on forever, hanging the app's cleanup.
    while not stop.is_set():
        woke = app[NOTIFIER].work_event()
        try:
            n = await drive_once(app)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the run stays pending; try again soon
            print(f"cryopg: graph driver: {type(exc).__name__}: {exc}", file=sys.stderr)
            n = 0
            await asyncio.sleep(0.5)
        if n == 0:
            try:
                async with asyncio.timeout(1.0):  # a cancel at shutdown goes straight through
                    await woke.wait()
            except TimeoutError:
                pass


async def driver_ctx(app: web.Application) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(drive_forever(app, stop)) for _ in range(DRIVERS)]
    yield
    stop.set()
    for task in tasks:
        task.cancel()
    # A turn caught mid-query rolls back when its connection goes; shutdown does not wait
    # on it for long.
    await asyncio.wait(tasks, timeout=5)
