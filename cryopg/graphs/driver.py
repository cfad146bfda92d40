"""The graph driver: every server process runs one. It takes graph runs that need a step
forward (cryo.drive_graphs, SKIP LOCKED), and in ONE transaction per run: records what
ended (children, waits, approvals), unseals what the interpreter's expressions read,
asks SQL what to skip and start (cryo.graph_plan), starts it, and settles the run -- so
any replica may drive any run, and none can drive one twice. A driver that dies rolls
back and the run is pending again.

The server that runs the drivers hands them what they use of it (Host): its pool, its
org keys, the notifier's graph event and the exact timers; the graph tier does not
import the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from cryopg import engine, tracing
from cryopg.db import connection
from cryopg.engine import Driven, NodeRow
from cryopg.errors import DatabaseUnavailable
from cryopg.graphs import schemas
from cryopg.graphs import starts as graph_nodes
from cryopg.graphs.nodes import state_node
from cryopg.payloads import open_document, run_input
from cryopg.seal import OrgSealers

DRIVER_ID = f"driver:{socket.gethostname()}"
# Turns run one per transaction; a few at once keep one slow turn from holding up the
# rest (SKIP LOCKED keeps them on different runs).
DRIVERS = 4
# Plan/record rounds in one turn. A graph that keeps going yields (cryo.graph_yield): it
# is pending again at once, behind the runs already waiting, so no run holds a driver.
MAX_ROUNDS = 200


@dataclasses.dataclass(frozen=True)
class Host:
    """What the drivers use of the server process that runs them."""

    pool: AsyncConnectionPool
    keys: OrgSealers
    graph_event: Callable[[], asyncio.Event]  # the event the next cryo_graph notify sets
    timers: Timers
    # Told of each turn (seconds, "ok" or "failed"): the server's metrics count them.
    on_turn: Callable[[float, str], None] = lambda seconds, result: None


def referenced(graph: dict[str, Any], configs: dict[str, Any]) -> set[str] | None:
    """The nodes any expression of the graph reads: only their outputs go into the scope,
    so a turn on a large graph does not carry every output across. None (all of them)
    when a code node is there: its program reads the whole scope."""
    from cryopg.graphs.expr import paths

    if any(n.get("type") == "code" for n in graph.get("nodes", [])):
        return None
    found = paths(graph) + paths(configs)
    return {p[1] for p in found if len(p) > 1 and p[0] == "nodes"}


def node_reads(graph: dict[str, Any], configs: dict[str, Any]
               ) -> tuple[dict[str, Reads | None], Reads | None]:
    """What each node's expressions (its `if`, fan_out, concurrency and config) read, and
    what the graph's own ones (its output) read: a round sends SQL the scope entries of
    the nodes it may decide, not every ended node's (the whole scope made each round of a
    reading chain cost the chain's length)."""
    from cryopg.graphs.expr import paths

    def of(*asts: Any) -> Reads:
        found = [p for a in asts for p in paths(a) if isinstance(p, list) and p]
        if any(p[0] == "nodes" and len(p) < 2 for p in found):
            return None  # the whole map of nodes
        return Reads({p[1] for p in found if len(p) > 1 and p[0] == "nodes"},
                     any(p[0] == "input" for p in found))

    per = {n["id"]: of(n, configs.get(n["id"], {})) for n in graph.get("nodes", [])}
    return per, of({k: v for k, v in graph.items() if k != "nodes"})


@dataclasses.dataclass(frozen=True)
class Reads:
    """The nodes an expression set reads, and whether it reads the run's input."""

    nodes: set[str]
    input: bool


# The scope entries the largest planning round of each run sent (a few hundred runs'
# worth): tests read it, since a long chain's rounds must not send more as it grows.
SENT_MOST: OrderedDict[str, int] = OrderedDict()
# What SQL asks for (as a node's config) when it needs the output expression's reads.
OUTPUT = "$output"


def sent_scope(scope: dict[str, Any], pin: Pinned, nodes: set[str], run_id: str
               ) -> dict[str, Any]:
    """The part of the turn's scope a planning round sends: the entries read by the given
    nodes (those whose configs go with it, and those SQL asked for) and, when asked, the
    graph's output, with `$for` naming what it covers; SQL decides the expressions of no
    other node in that round, but asks for it (action 'config'). The whole scope when
    any of them reads every node."""
    want = [pin.reads.get(n, EMPTY) for n in nodes if n != OUTPUT]
    if OUTPUT in nodes:
        want.append(pin.out_reads)
    if pin.wanted is None or any(r is None for r in want):
        out = scope
    else:
        ids: set[str] = set().union(*(r.nodes for r in want if r is not None))
        have = scope["nodes"]
        out = {"nodes": {i: have[i] for i in ids if i in have}, "run": scope["run"],
               "$for": sorted(nodes)}
        if any(r is not None and r.input for r in want):
            out["input"] = scope["input"]
    SENT_MOST[run_id] = max(SENT_MOST.pop(run_id, 0), len(out["nodes"]))
    while len(SENT_MOST) > PINNED_RUNS:
        SENT_MOST.popitem(last=False)
    return out


EMPTY = Reads(set(), False)


def scope_of(run_id: str, input_value: Any, rows: list[NodeRow], open_json: Any,
             wanted: set[str] | None = None) -> dict[str, Any]:
    """What expressions read: input, nodes.<id>.output / .status, run.id."""
    nodes: dict[str, dict[str, Any]] = {}
    items: dict[str, dict[int, Any]] = {}
    if wanted is not None:
        rows = [r for r in rows if r.node_id in wanted]
    for r in rows:
        n = nodes.setdefault(r.node_id, {"status": r.node_status, "output": None})
        has = r.output is not None or r.output_clear is not None
        if r.item is not None and has and r.item_status in ("succeeded", "seeded"):
            items.setdefault(r.node_id, {})[r.item] = _output(r, open_json)
        if r.items is None and r.item is None and has:
            n["output"] = _output(r, open_json)
    for r in rows:
        if r.item is None:
            continue
        got = items.get(r.node_id, {})
        if r.items is None:  # (a loop's is its last ended iteration's: its highest item)
            nodes[r.node_id]["output"] = got[max(got)] if got else None
        else:
            nodes[r.node_id]["output"] = [got.get(i) for i in range(r.items)]
    return {"input": input_value, "nodes": nodes, "run": {"id": run_id}}


def _output(r: NodeRow, open_json: Any) -> Any:
    """A row's output: sealed, or (holding no user data) in the clear."""
    return open_json(r.output) if r.output is not None else r.output_clear


async def advance(host: Host, conn: Any, g: Driven) -> str:
    """One turn on one driven run; returns how it settled ('parked-timed' when it parked
    with a deadline this turn set)."""
    sealer = await host.keys.sealer(g.org)
    pin = await _pinned(conn, sealer, g)
    configs, wanted, after = pin.configs, pin.wanted, pin.after
    # The constant state calls go to SQL once (graph_plan runs those nodes itself); a
    # turn that rolls back after sending them only leaves those nodes to this path.
    calls = pin.calls if pin.calls and not pin.sent else None
    input_value = run_input(sealer, g.input, g.input_clear)
    # An input nothing checked before the run existed (a handler's, an app's submit_run).
    if g.input_clear is not None and (refused := schemas.input_refusal(pin.graph, input_value)):
        return await engine.graph_refuse_input(conn, g.run_id, g.claim_token, refused)
    opened: dict[bytes, Any] = {}  # a turn opens each sealed output once

    def open_json(sealed: bytes) -> Any:
        if sealed not in opened:
            opened[sealed] = sealer.open_json(sealed)
        return opened[sealed]

    # The nodes the expressions read, less those this server holds ended (an ended node's
    # status and output never change in its run): read by key, and only the ones that
    # have left pending, so a turn costs what moved, not how much of the run has ended.
    listed = None if wanted is None else sorted(wanted - pin.ended.keys())
    rows = await engine.graph_state(conn, g.run_id, g.claim_token, listed,
                                    started=wanted is not None)
    scope = scope_of(g.run_id, input_value, rows, open_json, wanted)
    if wanted is not None:  # (a node left out has not started: SQL reads it as pending)
        _keep_ended(pin, scope, set(listed or ()))
        for nid, entry in pin.ended.items():
            scope["nodes"].setdefault(nid, entry)
    turn = graph_nodes.Turn(conn, sealer, g.run_id, g.claim_token, g.org, g.project,
                            configs, scope)
    # What ended outside this turn (a child run, a signal, a timer) is recorded first.
    # Nothing else changes under this run's lock until the turn commits, so once is enough.
    moved = {r.node_id for r in rows
             if r.item is not None and await graph_nodes.collect(turn, r)}
    fresh = sorted(moved if wanted is None else moved & wanted)
    if fresh:  # only what the expressions read and was just recorded
        _merge(scope, g.run_id, input_value, open_json, set(fresh),
               await engine.graph_state(conn, g.run_id, g.claim_token, fresh))
        _keep_ended(pin, scope, set(fresh))
    # The configs sent are those of the nodes that may start now: what just ended and
    # the nodes after it; SQL asks for any other it needs (action 'config').
    need = _and_after(moved, after)
    for _ in range(MAX_ROUNDS):
        covered = set(need)  # (a constant node's `if` reads the scope, not its config)
        if pin.sent:  # SQL runs the constant nodes: no config of theirs is needed
            need -= pin.calls.keys()
        plan = await engine.graph_plan(conn, g.run_id, g.claim_token,
                                       {n: configs.get(n, {}) for n in need},
                                       sent_scope(scope, pin, covered, g.run_id), calls)
        if calls is not None:
            pin.sent, calls = True, None
        settled_here = next((p for p in plan if p.action == "settled"), None)
        if settled_here is not None:  # its answer held no user data: SQL settled it
            return str(settled_here.type)
        # SQL ran its share, or started a slice of a large fan-out: what it started is
        # started, then the turn commits and the run goes on in its next turn.
        yielding = any(p.action == "yield" for p in plan)
        asked = {p.node_id for p in plan if p.action == "config"}
        finish = next((p for p in plan if p.action == "finish"), None)
        started = [p for p in plan if p.action == "start"]
        # What was skipped, and the constant state nodes SQL ran and recorded.
        touched = {p.node_id for p in plan if p.action in ("skip", "done")}
        for p in started:
            if await graph_nodes.start(turn, p):
                touched.add(p.node_id)
        if yielding:
            await engine.graph_yield(conn, g.run_id, g.claim_token)
            return "yielded"
        if finish is not None and not started:
            output = finish.output
            if finish.type == "default":  # the default output SQL made: open what is sealed
                output = unsealed(output, open_json)
            return await engine.graph_settle(conn, g.run_id, g.claim_token, True,
                                             sealer.seal_json({"answer": output}))
        if not asked and not touched - {p.node_id for p in plan if p.action == "skip"} and not any(
                p.type == "wait" for p in started):
            # Nothing ended in the database: what started runs elsewhere, and another
            # plan would find nothing new. (A wait may be due at once: look again.)
            break
        # The scope follows what this round ended, read by key: a round costs what it
        # touched, not the size of the graph.
        waits = {p.node_id for p in started if p.type == "wait"}
        if waits:  # a wait due at once (a zero sleep) ends in this turn
            for r in await engine.graph_state(conn, g.run_id, g.claim_token, sorted(waits)):
                if r.node_id in waits and r.item is not None and await graph_nodes.collect(turn, r):
                    touched.add(r.node_id)
        fresh = sorted(touched if wanted is None else touched & wanted)
        if fresh:
            _merge(scope, g.run_id, input_value, open_json, set(fresh),
                   await engine.graph_state(conn, g.run_id, g.claim_token, fresh))
            _keep_ended(pin, scope, set(fresh))
        need = asked | {p.node_id for p in started if p.node_id} | _and_after(touched, after)
    else:
        await engine.graph_yield(conn, g.run_id, g.claim_token)
        return "yielded"
    settled = await engine.graph_settle(conn, g.run_id, g.claim_token, False)
    return f"{settled}-timed" if turn.timed else settled


@dataclasses.dataclass
class Pinned:
    """What a run's turns keep of its document: its structure and opened configs, the
    nodes its expressions read, who depends on whom, and its constant state calls (with
    whether they were handed to SQL)."""

    graph: dict[str, Any]
    configs: dict[str, Any]
    wanted: set[str] | None
    after: dict[str, list[str]]
    calls: dict[str, Any]
    reads: dict[str, Reads | None] = dataclasses.field(default_factory=dict)
    out_reads: Reads | None = None
    sent: bool = False
    # Scope entries of nodes the expressions read that have ended, read whole in an
    # earlier turn. Dropped with the pin when a turn rolls back.
    ended: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


# A run's document is pinned: kept for its next turns instead of being opened and walked
# again each time (the cost of both grows with the graph). Keyed by run id; a few
# hundred runs' worth.
_PINNED: OrderedDict[str, Pinned] = OrderedDict()
PINNED_RUNS = 256


async def _pinned(conn: Any, sealer: Any, g: Driven) -> Pinned:
    got = _PINNED.get(g.run_id)
    if got is None:
        graph, source = g.graph, g.source
        if graph is None or source is None:  # taken without documents: read them once
            doc = await engine.read_graph(conn, g.run_id)
            if doc is None:
                raise RuntimeError(f"graph run {g.run_id} has no document")
            graph, source = doc
        configs = json.loads(open_document(sealer, source)).get("configs", {})
        after: dict[str, list[str]] = {}
        for n in graph.get("nodes", []):
            for d in n.get("deps", []):
                after.setdefault(d, []).append(n["id"])
        wanted = referenced(graph, configs)
        calls = state_node.constant_calls(graph, configs, sealer, wanted)
        reads, out_reads = node_reads(graph, configs)
        got = _PINNED[g.run_id] = Pinned(graph, configs, wanted, after, calls, reads, out_reads)
        while len(_PINNED) > PINNED_RUNS:
            _PINNED.popitem(last=False)
    else:
        _PINNED.move_to_end(g.run_id)
    return got


# Node statuses that are final within a run (a rerun is a new run).
ENDED = frozenset({"succeeded", "failed", "skipped", "seeded", "cancelled"})


def _keep_ended(pin: Pinned, scope: dict[str, Any], read: set[str]) -> None:
    """Keeps the scope entries of the nodes just read whole that have ended."""
    for nid in read:
        entry = scope["nodes"].get(nid)
        if entry is not None and entry.get("status") in ENDED:
            pin.ended[nid] = entry


def _and_after(nodes: set[str], after: dict[str, list[str]]) -> set[str]:
    """The nodes, and the nodes that depend on them."""
    return set(nodes).union(*(after.get(n, ()) for n in nodes))


def _merge(scope: dict[str, Any], run_id: str, input_value: Any, open_json: Any,
           nodes: set[str] | None, rows: list[NodeRow]) -> None:
    """Folds a re-read of some nodes into the turn's scope, in place."""
    scope["nodes"].update(scope_of(run_id, input_value, rows, open_json, nodes)["nodes"])


def unsealed(value: Any, open_json: Any) -> Any:
    """A run's default output as cryo.graph_plan gives it (cryo._graph_default_output, the
    one place it is made), each sealed output in it ({"$sealed": hex}) opened."""
    if isinstance(value, dict):
        if set(value) == {"$sealed"}:
            return open_json(bytes.fromhex(value["$sealed"]))
        return {k: unsealed(v, open_json) for k, v in value.items()}
    if isinstance(value, list):
        return [unsealed(v, open_json) for v in value]
    return value


async def drive_once(host: Host, idle: Idle | None = None) -> int:
    """One transaction of turns; returns how many runs it drove, negated when others
    were still pending as it took them (the caller looks again at once)."""
    driven: list[Driven] = []
    more = False
    try:
        # Pipeline mode: what needs no answer (BEGIN, each savepoint and its release)
        # goes out with the next query instead of costing a round trip of its own, about
        # five of a shell node's thirteen.
        async with connection(host.pool) as conn, conn.pipeline(), conn.transaction():
            # Documents stay in the database: a run's pin holds them after its first
            # turn here, and a miss reads them once (_pinned).
            driven = await engine.drive_graphs(conn, DRIVER_ID, 1, documents=False)
            more = any(g.more for g in driven)
            if more and idle is not None:
                idle.kick()  # another driver takes the next run while this turn runs
            for g in driven:
                try:
                    # A savepoint: a turn that fails undoes only itself, and the run is
                    # parked with a backoff in the same transaction instead of being
                    # handed out again at once, ahead of every other tenant's runs.
                    turn_started = time.perf_counter()
                    # The run's stored trace, when tracing is on: this turn is a span of it.
                    run_tp = (await engine.run_traceparent(conn, g.run_id)
                              if tracing.enabled() else None)
                    with tracing.span("cryopg graph turn", run_tp, run_id=g.run_id):
                        async with conn.transaction():
                            settled = await advance(host, conn, g)
                    host.on_turn(time.perf_counter() - turn_started, "ok")
                except (DatabaseUnavailable, asyncio.CancelledError):
                    raise  # an outage blames no run: the whole turn rolls back
                except Exception as exc:  # noqa: BLE001 - any bug in one run stays in that run
                    host.on_turn(time.perf_counter() - turn_started, "failed")
                    _PINNED.pop(g.run_id, None)  # see below
                    why = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
                    print(f"cryopg: graph driver: run {g.run_id}: {why}", file=sys.stderr)
                    await engine.graph_defer(conn, g.run_id, g.claim_token, why)
                    settled = "parked-timed"  # with its backoff
                # A deadline this turn set may be the earliest now. (Not on every park: a
                # shell chain parks once a node, and each look costs a transaction.)
                if settled == "parked-timed":
                    host.timers.rearm()
    except BaseException:
        # Rolled back: the constant state calls a turn handed SQL are gone with it, so
        # the run's pin (which says they were sent) is dropped and the next turn sends
        # them again. Kept, SQL would ask for those nodes' configs and never get them.
        for g in driven:
            _PINNED.pop(g.run_id, None)
        raise
    return -len(driven) if more else len(driven)


class Timers:
    """Exact timers: one task per server sleeps until the earliest deadline among parked
    graph runs (sleep and wait nodes, retries, backoffs), as the database computes it
    (cryo.wake_due_graphs), and wakes what is due then -- not at the next tick. A turn
    that parks a run re-arms it, since its deadline may be the earliest now."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()

    def rearm(self) -> None:
        self._changed.set()

    async def run(self, pool: AsyncConnectionPool, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._changed.clear()
            try:
                async with connection(pool) as conn, conn.transaction():
                    nxt = await engine.wake_due_graphs(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the tick still backs every timer
                print(f"cryopg: graph timers: {type(exc).__name__}: {exc}", file=sys.stderr)
                nxt = 1.0
            # Other replicas' deadlines are seen within a second; this one's exactly.
            wait = 1.0 if nxt is None else max(0.0, min(nxt, 1.0))
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                pass


class Idle:
    """Which idle driver a work notify wakes: only one watches at a time (the others
    queue on the lock), and a driver that found work kicks the watcher, so the drivers
    that wake match the runs there are -- not all of them on every NOTIFY."""

    def __init__(self) -> None:
        self.watch = asyncio.Lock()
        self._kick = asyncio.Event()

    def kick(self) -> None:
        self._kick.set()

    async def wait(self, graph_event: Callable[[], asyncio.Event]) -> None:
        async with self.watch:
            self._kick = kick = asyncio.Event()
            # Graph runs notify on their own channel: agents' work does not wake this.
            waits = {asyncio.ensure_future(graph_event().wait()),
                     asyncio.ensure_future(kick.wait())}
            try:
                await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()


async def drive_forever(host: Host, stop: asyncio.Event, idle: Idle) -> None:
    # `stop` as well as cancel: on Python 3.11 asyncio.wait_for swallows a cancel that
    # arrives as the event it waits on is set (shutdown sets every waiter's event), and
    # the loop would go on forever, hanging the app's cleanup.
    while not stop.is_set():
        # Taken before the look (see notifier.py): a notify during the turn sets it, and
        # is not missed while every driver was busy.
        notified = host.graph_event()
        try:
            n = await drive_once(host, idle)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an outage: the run stays pending
            print(f"cryopg: graph driver: {type(exc).__name__}: {exc}", file=sys.stderr)
            n = 0
            await asyncio.sleep(0.5)
        # More were pending as it took its run (drive_once woke one more driver for
        # them already), or one was notified since: it looks again at once.
        if n < 0 or (n and notified.is_set()):
            continue
        await idle.wait(host.graph_event)


@contextlib.asynccontextmanager
async def driving(host: Host) -> AsyncIterator[None]:
    """DRIVERS drivers and the exact timers, for as long as the server runs."""
    stop = asyncio.Event()
    idle = Idle()
    tasks = [asyncio.create_task(drive_forever(host, stop, idle)) for _ in range(DRIVERS)]
    tasks.append(asyncio.create_task(host.timers.run(host.pool, stop)))
    yield
    stop.set()
    for task in tasks:
        task.cancel()
    # A turn caught mid-query rolls back when its connection goes; shutdown does not wait
    # on it for long.
    await asyncio.wait(tasks, timeout=5)
