"""A script's graph calls through the agent routes, by hand: `graphs/call` (a stored
graph) and `nodes/call` (one node) submit a child graph run once, park the caller, and
the child's end wakes it with a memo that answers every later pass; refusals are 4xx."""

from __future__ import annotations

import json
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graphs import ended, until

TALLY = json.dumps({
    "version": "cryosleep-graph/v1",
    "nodes": [
        {"id": "bump", "type": "state",
         "config": {"op": "incr", "key": "t", "entity": "calls", "by": {"$expr": "input.by"}}},
        {"id": "read", "type": "state", "config": {"op": "get", "key": "t", "entity": "calls"}},
    ],
    "edges": [{"from": "bump", "to": "read"}],
    "output": {"$expr": "nodes.read.output.value"},
})


async def _children(srv: Server, run_id: str) -> list[tuple[str, str]]:
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT id, status FROM cryo.runs WHERE parent_run_id = %s",
                                 (run_id,))
        return [(r[0], r[1]) for r in await cur.fetchall()]


async def _reclaim(srv: Server, run_id: str) -> dict[str, Any]:
    await until(srv, run_id, lambda r: r["status"] == "pending")
    return await srv.claim_run(run_id)


def _entry(grant: dict[str, Any], family: str) -> dict[str, Any]:
    found = [e for e in grant["journal"] if e["family"] == family]
    assert len(found) == 1, grant["journal"]
    return found[0]


async def test_a_graph_call_submits_once_parks_and_answers_from_its_memo(srv: Server) -> None:
    (await srv.user("PUT", "/workflows/tally", {"source": TALLY, "filename": "tally.json"})).ok()
    caller = await srv.submit("echo caller\n")
    grant = await srv.claim_run(caller)
    call = {"path": "graph.call/tally/0", "ordinal": 0, "name": "tally", "input": {"by": 3},
            "position": 0}
    got = (await srv.in_run(grant, "graphs/call", **call)).ok()
    assert got["parked"] is True and got["output"] is None
    child = got["run_id"]
    assert (await srv.show(caller))["substate"] == "awaiting-children"
    assert (await srv.show(child))["kind"] == "graph"
    # The child graph runs on the server's driver (state nodes: no agent), and wakes us.
    grant = await _reclaim(srv, caller)
    entry = _entry(grant, "graph.call")
    assert entry["exit_code"] == 0 and entry["path"] == "graph.call/tally/0"
    assert entry["answer"] == {"output": 3, "run_id": child, "status": "succeeded", "error": None}
    # Asked again (a lenient replay): the memo answers and no second child starts.
    again = (await srv.in_run(grant, "graphs/call", **call)).ok()
    assert again == {"parked": False, "run_id": child, "status": "succeeded", "exit_code": 0,
                     "error": None, "output": 3}
    assert await _children(srv, caller) == [(child, "succeeded")]
    # The identity is checked like every durable call's.
    (await srv.in_run(grant, "graphs/call", **{**call, "path": "graph.call/other/0"})).refused(
        400, "identity_mismatch")
    history = [h for h in (await srv.show(caller))["history"] if h.get("family") == "graph.call"]
    assert [h["kind"] for h in history] == ["graph_called", "graph_call_completed"]


async def test_a_failed_child_is_the_calls_answer_and_bad_calls_are_refused(srv: Server) -> None:
    (await srv.user("PUT", "/workflows/plain", {"source": "echo hi\n", "filename": "p.sh"})).ok()
    caller = await srv.submit("echo caller\n")
    grant = await srv.claim_run(caller)
    bad = {"path": "node.call/state/0", "ordinal": 0, "type": "state", "position": 0}
    (await srv.in_run(grant, "nodes/call", **bad, config={"op": "nope", "key": "k"})).refused(
        400, "invalid_argument")
    (await srv.in_run(grant, "nodes/call", **bad, config="op=get")).refused(400, "invalid_argument")
    plain = {"path": "graph.call/plain/0", "ordinal": 0, "position": 0}
    msg = (await srv.in_run(grant, "graphs/call", **plain, name="plain")).refused(
        400, "invalid_argument")
    assert "is a script, not a graph" in msg
    (await srv.in_run(grant, "graphs/call", **{**plain, "path": "graph.call/nope/0"},
                      name="nope")).refused(404, "not_found")
    assert await _children(srv, caller) == []  # refusals start nothing
    config = {"op": "incr", "key": "k", "entity": "calls", "by": {"$expr": "input.by"}}
    got = (await srv.in_run(grant, "nodes/call", **bad, config=config,
                            input={"by": "lots"})).ok()
    assert got["parked"] is True
    child = await until(srv, got["run_id"], ended)
    assert child["status"] == "failed"
    grant = await _reclaim(srv, caller)
    entry = _entry(grant, "node.call")
    assert entry["exit_code"] == 1 and entry["answer"]["status"] == "failed"
    assert entry["answer"]["output"] is None
    assert "node state failed: incr needs a number to add" in entry["answer"]["error"]
