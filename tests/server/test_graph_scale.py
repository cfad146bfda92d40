"""Graphs at any size (issue 39 items 1 and 2): a reading chain's planning rounds send
SQL only the scope entries they read, not every ended node; a fan_out has a bound on
its items (a 400 at submit, a failed node at run time); and a large fan_out is planned
in slices, so a cancel of it takes effect while it runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from cryopg.graphs import driver
from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until


def reading_chain(n: int) -> str:
    """State nodes, each run only when the one before succeeded and writing its status."""
    nodes = [{"id": "n0", "type": "state", "config": {"op": "set", "key": "k0", "value": 0}}]
    nodes += [{"id": f"n{i}", "type": "state", "if": f"nodes.n{i - 1}.status == 'succeeded'",
               "config": {"op": "set", "key": f"k{i}",
                          "value": {"$template": f"{{{{ nodes.n{i - 1}.status }}}}"}}}
              for i in range(1, n)]
    return graph(nodes, [(f"n{i}", f"n{i + 1}") for i in range(n - 1)],
                 output={"$expr": f"nodes.n{n - 1}.output"})


async def test_a_reading_chains_rounds_send_only_what_they_read(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real = driver.engine.graph_plan

    async def counted(conn: Any, run_id: str, token: Any, configs: Any, scope: Any,
                      calls: Any = None) -> Any:
        sizes.append(len(scope["nodes"]))  # the scope entries this round sends SQL
        return await real(conn, run_id, token, configs, scope, calls)

    monkeypatch.setattr(driver.engine, "graph_plan", counted)
    n = 150
    run_id = await submit_graph(srv, reading_chain(n))
    run = await until(srv, run_id, ended, timeout=120)
    assert run["status"] == "succeeded", run["error"]
    # Every `if` read its predecessor as succeeded: none was skipped as 'pending'.
    assert {nd["status"] for nd in nodes_of(run).values()} == {"succeeded"}
    assert run["outputs"]["output"] == {"version": 1}
    # Rounds send what the nodes they may decide read: flat, not the ended nodes.
    assert len(sizes) >= n - 1
    assert max(sizes) <= 2, sizes
    assert driver.SENT_MOST[run_id] <= 2


@pytest.fixture
def fan_out_max(monkeypatch: pytest.MonkeyPatch) -> int:
    """A small bound for this test's server (set before its pool opens)."""
    monkeypatch.setenv("CRYOPG_GRAPH_FAN_OUT_MAX", "5")
    return 5


FAN = graph([{"id": "each", "type": "state", "fan_out": {"items": {"$expr": "input.xs"}},
              "config": {"op": "incr", "key": "n", "by": 1}}])


async def test_a_fan_out_past_the_bound_is_refused_at_submit(fan_out_max: int,
                                                             srv: Server) -> None:
    got = await srv.user("POST", "/runs", {"source": FAN, "filename": "g.json",
                                           "input": {"xs": list(range(6))}})
    message = got.refused(400, "fan_out_too_large")
    assert message == ("node each: fan_out has 6 items, over the limit of 5 "
                       "(CRYOPG_GRAPH_FAN_OUT_MAX)")
    # At the bound it runs.
    run = await until(srv, await submit_graph(srv, FAN, input={"xs": list(range(5))}), ended)
    assert run["status"] == "succeeded", run["error"]


async def test_a_fan_out_an_expression_makes_too_large_fails_its_node(fan_out_max: int,
                                                                      srv: Server) -> None:
    doc = graph([
        {"id": "put", "type": "state", "config": {"op": "set", "key": "xs",
                                                  "value": list(range(6))}},
        {"id": "get", "type": "state", "config": {"op": "get", "key": "xs"}},
        {"id": "each", "type": "state", "fan_out": {"items": {"$expr": "nodes.get.output.value"}},
         "config": {"op": "incr", "key": "n", "by": 1}},
    ], [("put", "get"), ("get", "each")])
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "failed"
    each = nodes_of(run)["each"]
    assert each["status"] == "failed"
    assert each["error"] == "fan_out has 6 items, over the limit of 5 (CRYOPG_GRAPH_FAN_OUT_MAX)"


@pytest.fixture
def big_fan_outs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYOPG_GRAPH_FAN_OUT_MAX", "20000")


async def test_a_20000_item_fan_out_is_planned_in_slices_and_a_cancel_ends_it(
        big_fan_outs: None, srv: Server) -> None:
    run_id = await submit_graph(srv, FAN, input={"xs": list(range(20000))})

    async def one(sql: str) -> Any:
        async with await srv.connect() as conn:
            row = await (await conn.execute(sql, (run_id,) * sql.count("%s"))).fetchone()
            return row[0] if row else None

    async def yielded_or_ended() -> bool:
        return bool(await one("SELECT EXISTS (SELECT 1 FROM cryo.history WHERE run_id = %s"
                              " AND kind = 'turn_yielded') OR EXISTS (SELECT 1 FROM cryo.runs"
                              " WHERE id = %s AND finished_at IS NOT NULL)"))

    # Its slices commit one by one, the run yielding between them (a turn that held the
    # whole fan-out showed nothing until the run had ended).
    await wait_for(yielded_or_ended, timeout=120)
    assert await one("SELECT finished_at IS NULL FROM cryo.runs WHERE id = %s"), \
        "the fan-out ended before a cancel could reach it"
    done = "SELECT items_done FROM cryo.node_states WHERE run_id = %s AND node_id = 'each'"
    assert 0 < await one(done) < 20000
    (await srv.user("POST", f"/runs/{run_id}/cancel", {})).ok()
    run = await until(srv, run_id, ended, timeout=120)
    assert run["status"] == "cancelled"
    assert await one(done) < 20000


async def wait_for(pred: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
