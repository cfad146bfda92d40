"""Graph runs that fail to advance stay in their own lane: a node that cannot start
fails that node, a turn that fails parks its run with a backoff, and healthy graphs of
the same server finish as fast beside them. Also: a turn that must yield wakes itself,
timers fire at their deadline with no tick, and a get after a delete reads nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cryopg.graphs import driver as graph_driver
from cryopg.graphs import starts as graph_nodes
from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until

HEALTHY = graph([
    {"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1}},
    {"id": "b", "type": "state", "config": {"op": "incr", "key": "n", "by": 1}},
    {"id": "c", "type": "state", "config": {"op": "get", "key": "k"}},
], [("a", "b"), ("b", "c")])

POISONED = [
    # a stored workflow that is not there
    graph([{"id": "p", "type": "script", "config": {"workflow": "no-such-workflow"}}]),
    # a state key that renders empty
    graph([{"id": "p", "type": "state",
            "config": {"op": "set", "key": {"$template": "{{ input.missing }}"}, "value": 1}}]),
    # a concurrency group that renders empty
    graph([{"id": "p", "type": "shell", "concurrency": {"$template": "{{ input.missing }}"},
            "config": {"run": "true"}}]),
]


async def _healthy_batch(srv: Server, n: int) -> float:
    t0 = time.monotonic()
    ids = [await submit_graph(srv, HEALTHY) for _ in range(n)]
    for run_id in ids:
        run = await until(srv, run_id, ended, timeout=60)
        assert run["status"] == "succeeded", run
    return time.monotonic() - t0


async def test_nodes_that_cannot_start_fail_alone_with_a_reason(srv: Server) -> None:
    baseline = await _healthy_batch(srv, 20)
    poisoned = [await submit_graph(srv, doc) for doc in POISONED]
    beside = await _healthy_batch(srv, 20)
    for run_id in poisoned:
        run = await until(srv, run_id, ended)
        assert run["status"] == "failed", run
        node = nodes_of(run)["p"]
        assert node["status"] == "failed" and node["error"], node
        assert "\n" not in node["error"]
    # Ratios, not times: the healthy batch is not held up by the failing runs.
    assert beside <= 2.5 * max(baseline, 0.3), (baseline, beside)


async def test_a_failing_turn_backs_off_and_blocks_nobody(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    real_start = graph_nodes.start

    async def start(turn: graph_nodes.Turn, p: Any) -> bool:
        if p.node_id == "boom":
            raise RuntimeError("a bug in a node type")
        return await real_start(turn, p)

    monkeypatch.setattr(graph_nodes, "start", start)
    baseline = await _healthy_batch(srv, 20)
    bad = [await submit_graph(srv, graph([{"id": "boom", "type": "state",
                                           "config": {"op": "get", "key": "k"}}]))
           for _ in range(2)]
    beside = await _healthy_batch(srv, 20)
    assert beside <= 2.5 * max(baseline, 0.3), (baseline, beside)
    for run_id in bad:
        run = await until(srv, run_id, lambda r: any(
            e["kind"] == "graph_turn_failed" for e in r["history"]))
        assert run["status"] in ("parked", "pending", "running"), run
    # The backoff doubles: a poisoned run is not retried every turn.
    async with await srv.connect() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM cryo.history"
            " WHERE run_id = ANY(%s) AND kind = 'graph_turn_failed'",
            (bad,))
        (failures,) = await cur.fetchone()
    assert failures <= 2 * 4, failures  # 0.5 + 1 + 2 s of backoff at most within the test


async def test_a_turn_that_must_yield_wakes_itself(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_driver, "MAX_ROUNDS", 3)
    n = 15
    nodes = [{"id": f"s{i}", "type": "state", "config": {"op": "incr", "key": "n", "by": 1}}
             for i in range(n)]
    doc = graph(nodes, [(f"s{i}", f"s{i + 1}") for i in range(n - 1)],
                output={"$expr": f"nodes.s{n - 1}.output.value"})
    run_id = await submit_graph(srv, doc)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded", run
    assert run["outputs"]["output"] == n
    assert any(e["kind"] == "turn_yielded" for e in run["history"])


async def test_a_timer_fires_at_its_deadline_without_a_tick(srv: Server) -> None:
    # The test server's tick runs once an hour: only the armed timer can end this run.
    doc = graph([{"id": "nap", "type": "wait", "config": {"sleep": "1s"}}])
    t0 = time.monotonic()
    run_id = await submit_graph(srv, doc)
    run = await until(srv, run_id, ended, timeout=10)
    took = time.monotonic() - t0
    assert run["status"] == "succeeded", run
    assert 1.0 <= took < 2.5, took  # the tick alone would take an hour


async def test_a_get_after_a_delete_reads_nothing(srv: Server) -> None:
    doc = graph([
        {"id": "set", "type": "state", "config": {"op": "set", "key": "k", "value": 7}},
        {"id": "del", "type": "state", "config": {"op": "delete", "key": "k"}},
        {"id": "get", "type": "state", "config": {"op": "get", "key": "k"}},
    ], [("set", "del"), ("del", "get")], output={"$expr": "nodes.get.output"})
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "succeeded", run
    assert run["outputs"]["output"] == {"value": None, "version": None}


async def test_failure_branches_continue_on_error_always_and_on_failure(srv: Server) -> None:
    bad_key = {"op": "set", "key": {"$template": "{{ input.missing }}"}, "value": 1}
    # continue_on_error: the run goes on past the failure and succeeds.
    tolerant = graph([
        {"id": "flaky", "type": "state", "continue_on_error": True, "config": bad_key},
        {"id": "after", "type": "state", "config": {"op": "set", "key": "k", "value": 1}},
    ], [("flaky", "after")])
    run = await until(srv, await submit_graph(srv, tolerant), ended)
    assert run["status"] == "succeeded", run
    assert nodes_of(run)["flaky"]["status"] == "failed"
    assert nodes_of(run)["after"]["status"] == "succeeded"
    # A failure: the next node is skipped, the clean-up (always) and the failure branch run,
    # and the run still fails, naming the failed node.
    failing = graph([
        {"id": "work", "type": "state", "config": bad_key},
        {"id": "next", "type": "state", "config": {"op": "set", "key": "n", "value": 1}},
        {"id": "cleanup", "type": "state", "always": True,
         "config": {"op": "set", "key": "cleaned", "value": True}},
        {"id": "alert", "type": "state", "config": {"op": "set", "key": "alerted", "value": 1}},
    ], [("work", "next"), ("next", "cleanup")], on_failure="alert")
    run = await until(srv, await submit_graph(srv, failing), ended)
    assert run["status"] == "failed" and "work" in run["error"], run
    got = nodes_of(run)
    assert [got[n]["status"] for n in ("work", "next", "cleanup", "alert")] == [
        "failed", "skipped", "succeeded", "succeeded"], got
    # On success the failure branch is skipped; always nodes run as usual.
    fine = graph([
        {"id": "work", "type": "state", "config": {"op": "set", "key": "k", "value": 1}},
        {"id": "cleanup", "type": "state", "always": True,
         "config": {"op": "set", "key": "cleaned", "value": True}},
        {"id": "alert", "type": "state", "config": {"op": "set", "key": "alerted", "value": 1}},
    ], [("work", "cleanup")], on_failure=["alert"])
    run = await until(srv, await submit_graph(srv, fine), ended)
    assert run["status"] == "succeeded", run
    got = nodes_of(run)
    assert (got["cleanup"]["status"], got["alert"]["status"]) == ("succeeded", "skipped"), got


async def test_a_lone_chain_costs_one_look_a_turn(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each turn of a chain that moves one node at a time (here a signal each) wakes one
    driver: the one that took the run asks whether more are pending before it looks
    again or wakes another, instead of two more looks that find nothing."""
    looks: list[int] = []
    real = graph_driver.engine.drive_graphs

    async def counted(conn: Any, driver: str, limit: int = 1, documents: bool = True) -> Any:
        got = await real(conn, driver, limit, documents)
        looks.append(len(got))
        return got

    monkeypatch.setattr(graph_driver.engine, "drive_graphs", counted)
    n = 8
    doc = graph([{"id": f"w{i}", "type": "wait", "config": {"signal": f"s{i}"}}
                 for i in range(n)], [(f"w{i}", f"w{i + 1}") for i in range(n - 1)])
    run_id = await submit_graph(srv, doc)
    t0 = time.monotonic()
    for i in range(n):
        await until(srv, run_id, lambda r, i=i: nodes_of(r)[f"w{i}"]["status"] == "waiting")
        (await srv.user("POST", f"/runs/{run_id}/signal/s{i}", {"payload": i})).ok(201)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded", run
    took = looks.count(1)
    empty = len(looks) - took
    # An idle server looks once a second on its own; beyond that, at most one empty
    # look every other turn (a notify heard by a driver while another took the run).
    assert took >= n, looks
    assert empty <= n // 2 + int(time.monotonic() - t0) + 2, looks


async def test_a_turn_reads_the_document_once_a_run(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The drivers take runs without their documents, which grow with the graph: a run's
    first turn reads its document once and later turns use what the server kept. One
    that lost it (evicted, or another replica's run) reads it again and goes on."""
    asked: list[bool] = []
    reads: list[str] = []
    real_drive, real_read = graph_driver.engine.drive_graphs, graph_driver.engine.read_graph

    async def drive(conn: Any, driver: str, limit: int = 1, documents: bool = True) -> Any:
        got = await real_drive(conn, driver, limit, documents)
        asked.extend(documents for _ in got)
        return got

    async def read(conn: Any, run_id: str) -> Any:
        reads.append(run_id)
        return await real_read(conn, run_id)

    class Engine:  # the driver's engine calls, these two counted (the API's reads are not)
        def __getattr__(self, name: str) -> Any:
            return getattr(real_engine, name)

    real_engine = graph_driver.engine
    counted = Engine()
    counted.drive_graphs, counted.read_graph = drive, read  # type: ignore[attr-defined]
    monkeypatch.setattr(graph_driver, "engine", counted)
    n = 4
    doc = graph([{"id": f"w{i}", "type": "wait", "config": {"signal": f"s{i}"}}
                 for i in range(n)], [(f"w{i}", f"w{i + 1}") for i in range(n - 1)])
    run_id = await submit_graph(srv, doc)
    for i in range(n):
        await until(srv, run_id, lambda r, i=i: nodes_of(r)[f"w{i}"]["status"] == "waiting")
        if i == 2:
            graph_driver._PINNED.clear()  # as if evicted: the next turn reads it again
        (await srv.user("POST", f"/runs/{run_id}/signal/s{i}", {"payload": i})).ok(201)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded", run
    assert len(asked) > n and not any(asked), asked
    assert reads == [run_id, run_id], reads


async def test_a_turn_reads_an_ended_node_once(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node the expressions read is read whole until it has ended, then kept: later
    turns ask only for the nodes still open (SQL answers for those that have left
    pending), so a chain whose nodes read each other costs what moved, not what ended.
    What they read still reaches them: each runs only if the first and the one before
    it ended with the payloads sent."""
    calls: list[tuple[list[str] | None, bool, list[Any]]] = []
    real = graph_driver.engine

    async def state(conn: Any, run_id: str, token: Any, nodes: list[str] | None = None,
                    started: bool = False) -> Any:
        rows = await real.graph_state(conn, run_id, token, nodes, started)
        calls.append((nodes, started, rows))
        return rows

    class Engine:  # the driver's engine calls, graph_state recorded
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    counted = Engine()
    counted.graph_state = state  # type: ignore[attr-defined]
    monkeypatch.setattr(graph_driver, "engine", counted)
    n = 5
    nodes = [{"id": "w0", "type": "wait", "config": {"signal": "s0"}}] + [
        {"id": f"w{i}", "type": "wait", "config": {"signal": f"s{i}"},
         "if": f"nodes.w0.output == 'p0' and nodes.w{i - 1}.status == 'succeeded'"
               f" and nodes.w{i - 1}.output == 'p{i - 1}'"} for i in range(1, n)]
    run_id = await submit_graph(srv, graph(nodes, [(f"w{i}", f"w{i + 1}") for i in range(n - 1)]))
    cleared = 0
    for i in range(n):
        await until(srv, run_id, lambda r, i=i: nodes_of(r)[f"w{i}"]["status"] == "waiting")
        if i == 3:  # the kept nodes go with the pin: the next turn reads them again
            graph_driver._PINNED.clear()
            cleared = len(calls)
        (await srv.user("POST", f"/runs/{run_id}/signal/s{i}", {"payload": f"p{i}"})).ok(201)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded", run
    assert {v["status"] for v in nodes_of(run).values()} == {"succeeded"}, nodes_of(run)
    seen_ended: set[str] = set()
    for k, (asked, started, rows) in enumerate(calls):
        if k == cleared:
            seen_ended.clear()
        if started:  # a turn's first read asks for nothing it has seen end
            assert not set(asked or ()) & seen_ended, (k, asked, seen_ended)
        seen_ended |= {r.node_id for r in rows if r.node_status == "succeeded"}
    after = [asked for asked, started, _ in calls[cleared:] if started]
    assert sum("w0" in (a or ()) for a in after) == 1, after  # read whole once more
    assert ["w0" in (a or ()) for a in after][-1] is False, after
