"""Constant state nodes run inside the database (cryo.graph_plan runs them, through the
same state functions a script's verbs use), their outputs that hold no user data are
kept in the clear, and a run whose default output is made of them is settled in SQL.
The figures read through the API and cryo.read_graph_nodes are those of the driver's
Python path."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until


def chain(n: int, value: Any = 7, **extra: Any) -> str:
    nodes = [{"id": f"n{i}", "type": "state",
              "config": {"op": "set", "key": f"k{i}", "value": value, **extra}}
             for i in range(n)]
    return graph(nodes, [(f"n{i}", f"n{i + 1}") for i in range(n - 1)])


async def rows(srv: Server, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    async with await srv.connect() as conn:
        cur = await conn.execute(sql, args)
        return await cur.fetchall()


async def test_a_constant_chain_of_300_runs_in_sql_and_reads_as_before(srv: Server) -> None:
    run_id = await submit_graph(srv, chain(300))
    run = await until(srv, run_id, ended, timeout=60)
    assert run["status"] == "succeeded", run
    nodes = nodes_of(run)
    assert all(nodes[f"n{i}"]["output"] == {"version": 1} for i in range(300))
    assert run["outputs"]["output"] == {"n299": {"version": 1}}
    kinds = [e["kind"] for e in run["history"]]
    assert kinds.count("node_completed") == 300
    # The database ran them: each had its call handed over, and its output is clear.
    got = await rows(srv, "SELECT count(*) FILTER (WHERE state_call IS NOT NULL),"
                          " count(*) FILTER (WHERE output IS NULL AND output_clear IS NOT NULL)"
                          " FROM cryo.node_states WHERE run_id = %s", run_id)
    assert got == [(300, 300)]
    read = await rows(srv, "SELECT node_id, output, output_clear, item_status"
                           " FROM cryo.read_graph_nodes(%s)", run_id)
    assert len(read) == 300
    assert all(r[1] is None and r[2] == {"version": 1} and r[3] == "succeeded" for r in read)
    # The values are sealed in the store, as a script's `state set` leaves them.
    cells = await rows(srv, "SELECT version, value IS NOT NULL, position('7' in"
                            " encode(value, 'escape')) FROM cryo.state_cells WHERE scope = %s",
                       run_id)
    assert len(cells) == 300 and all(c[0] == 1 and c[1] for c in cells)
    # The answer holding no user data is stored in the clear.
    out = await rows(srv, "SELECT value, value_clear FROM cryo.run_outputs WHERE run_id = %s",
                     run_id)
    assert out == [(None, {"answer": {"n299": {"version": 1}}})]

    # The same chain with the value computed runs on the driver's path: it reads the same.
    slow = await submit_graph(srv, chain(3, {"$expr": "input.v"}), input={"v": 7})
    slow_run = await until(srv, slow, ended)
    assert [nodes_of(slow_run)[f"n{i}"]["output"] for i in range(3)] == [{"version": 1}] * 3
    assert slow_run["outputs"]["output"] == {"n2": {"version": 1}}
    got = await rows(srv, "SELECT count(*) FROM cryo.node_states WHERE run_id = %s"
                          " AND state_call IS NULL AND output_clear IS NOT NULL", slow)
    assert got == [(3,)]


async def test_constant_and_expression_nodes_mix_in_one_graph(srv: Server) -> None:
    doc = graph([
        {"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1,
                                                "entity": "mix"}},
        {"id": "b", "type": "state", "config": {"op": "get", "key": "k", "entity": "mix"}},
        {"id": "c", "type": "state", "config": {
            "op": "set", "key": "k", "entity": "mix",
            "value": {"$expr": "nodes.b.output.value"}}},
        {"id": "d", "type": "state", "config": {"op": "cas", "key": "k", "entity": "mix",
                                                "value": "done", "expected": 2}},
        # if reads what the database ran in the same call
        {"id": "e", "type": "state", "if": "nodes.d.output.swapped",
         "config": {"op": "add", "key": "once", "entity": "mix"}},
        {"id": "f", "type": "state", "if": "nodes.d.status == 'failed'",
         "config": {"op": "delete", "key": "k", "entity": "mix"}},
        {"id": "g", "type": "state", "config": {"op": "get", "key": "k", "entity": "mix"}},
    ], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("d", "f"), ("e", "g"), ("f", "g")],
        output={"$expr": "nodes.g.output"})
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "succeeded", run
    n = nodes_of(run)
    assert n["a"]["output"] == {"version": 1}
    assert n["b"]["output"] == {"value": 1, "version": 1}
    assert n["c"]["output"] == {"version": 2}
    assert n["d"]["output"] == {"swapped": True}
    assert n["e"]["output"] == {"claimed": True}
    assert n["f"]["status"] == "skipped"
    assert n["g"]["output"] == {"value": "done", "version": 3}
    assert run["outputs"]["output"] == {"value": "done", "version": 3}  # sealed: user data


async def test_add_and_cas_races_between_graph_runs_keep_their_semantics(srv: Server) -> None:
    seed = graph([{"id": "s", "type": "state",
                   "config": {"op": "set", "key": "doc", "value": 0, "entity": "race"}}])
    assert (await until(srv, await submit_graph(srv, seed), ended))["status"] == "succeeded"
    claim = graph([{"id": "c", "type": "state",
                    "config": {"op": "add", "key": "lock", "entity": "race", "value": "x"}}])
    swap = graph([{"id": "w", "type": "state",
                   "config": {"op": "cas", "key": "doc", "entity": "race", "value": 1,
                              "expected": 1}}])
    ids = await asyncio.gather(*[submit_graph(srv, claim) for _ in range(6)],
                               *[submit_graph(srv, swap) for _ in range(6)])
    runs = [await until(srv, i, ended) for i in ids]
    assert all(r["status"] == "succeeded" for r in runs), runs
    claimed = [nodes_of(r)["c"]["output"]["claimed"] for r in runs[:6]]
    swapped = [nodes_of(r)["w"]["output"]["swapped"] for r in runs[6:]]
    assert sorted(claimed) == [False] * 5 + [True]
    assert sorted(swapped) == [False] * 5 + [True]
    # Each answer is the run's memo, as a script's `state add` / `state cas` leaves it.
    memos = await rows(srv, "SELECT j.key_family, j.exit_code FROM cryo.journal j"
                            " WHERE j.run_id = ANY (%s) ORDER BY 1, 2", list(ids))
    assert memos == sorted([("state.add", 0)] + [("state.add", 3)] * 5
                           + [("state.cas", 0)] + [("state.cas", 3)] * 5)
    got = await rows(srv, "SELECT version FROM cryo.state_cells WHERE entity = 'race'"
                          " AND key = 'doc'")
    assert got == [(2,)]


async def test_a_get_after_a_delete_in_one_graph_sees_the_delete(srv: Server) -> None:
    doc = graph([
        {"id": "put", "type": "state", "config": {"op": "set", "key": "gone", "value": 5}},
        {"id": "del", "type": "state", "config": {"op": "delete", "key": "gone"}},
        {"id": "get", "type": "state", "config": {"op": "get", "key": "gone"}},
    ], [("put", "del"), ("del", "get")])
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "succeeded", run
    n = nodes_of(run)
    assert n["del"]["output"] == {"deleted": True}
    assert n["get"]["output"] == {"value": None, "version": None}


async def test_a_constant_node_the_database_refuses_is_retried_then_fails(srv: Server) -> None:
    doc = graph([{"id": "bad", "type": "state", "retry": {"attempts": 2},
                  "config": {"op": "set", "key": "k", "entity": "bad name", "value": 1}}])
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "failed"
    bad = nodes_of(run)["bad"]
    assert bad["attempt"] == 2 and "entity name" in bad["error"]
    kinds = [e["kind"] for e in run["history"]]
    assert "node_retry_scheduled" in kinds and "node_failed" in kinds


async def test_a_chain_longer_than_a_turns_share_yields_and_finishes(srv: Server) -> None:
    # A call runs at most 500 database nodes, then the turn yields and commits. (Adds: a
    # graph of sets alone runs whole in its submit, test_graph_submit.py.)
    run_id = await submit_graph(srv, chain(1100, op="add", entity="long"))
    run = await until(srv, run_id, ended, timeout=120)
    assert run["status"] == "succeeded", run
    kinds = [e["kind"] for e in run["history"]]
    assert kinds.count("node_completed") == 1100
    assert kinds.count("turn_yielded") == 2


async def test_a_turn_rolled_back_after_handing_over_its_calls_hands_them_over_again(
        srv: Server, monkeypatch: Any) -> None:
    """The first turn hands SQL the constant calls, then fails (a bug in a node's start,
    here a get on the driver's path): its savepoint undoes the calls with the rest. The
    next turn must send them again, or SQL asks for those nodes' configs forever."""
    from cryopg.graphs import driver

    real = driver.graph_nodes.start
    failed: list[str] = []

    async def fails_once(turn: Any, p: Any) -> bool:
        if not failed:
            failed.append(p.node_id)
            raise RuntimeError("a bug in a node's start")
        return await real(turn, p)

    monkeypatch.setattr(driver.graph_nodes, "start", fails_once)
    doc = graph([{"id": "first", "type": "state", "config": {"op": "get", "key": "k"}},
                 *({"id": f"n{i}", "type": "state",
                    "config": {"op": "set", "key": f"k{i}", "value": i}} for i in range(3))],
                [("first", "n0"), ("n0", "n1"), ("n1", "n2")])
    run_id = await submit_graph(srv, doc)
    run = await until(srv, run_id, ended, timeout=60)
    assert failed == ["first"]
    assert run["status"] == "succeeded", run
    assert [nodes_of(run)[f"n{i}"]["output"] for i in range(3)] == [{"version": 1}] * 3
