"""A graph whose every node is a constant state node runs whole inside its submit
(cryo.submit_graph, one transaction, no driver turn); the submit route keeps compiled
documents, and a kept one refuses bad input as a new one does; a constant call that
cannot run fails its node alone."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server
from tests.server.test_graph_state_nodes import chain, rows
from tests.server.test_graphs import ended, graph, nodes_of, until


async def test_a_constant_graph_has_ended_when_its_submit_returns(srv: Server) -> None:
    got = (await srv.user("POST", "/runs", {"source": chain(10), "filename": "g.json"})).ok(201)
    assert got["created"] is True and got["status"] == "succeeded", got
    run = await srv.show(got["run_id"])
    assert run["status"] == "succeeded"
    assert all(n["output"] == {"version": 1} for n in nodes_of(run).values())
    assert run["outputs"]["output"] == {"n9": {"version": 1}}
    kinds = [e["kind"] for e in run["history"]]
    assert kinds.count("node_completed") == 10
    # No driver took it: the submit's own claim drove it, and it was never handed out.
    assert "turn_yielded" not in kinds
    # The same document again (kept compiled) writes the next versions of its own cells.
    again = (await srv.user("POST", "/runs", {"source": chain(10), "filename": "g.json"})).ok(201)
    assert again["status"] == "succeeded" and again["run_id"] != got["run_id"]


async def test_a_graph_the_database_cannot_run_whole_goes_to_the_driver(srv: Server) -> None:
    doc = graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1}},
                 {"id": "b", "type": "state", "config": {"op": "get", "key": "k"}}],
                [("a", "b")])
    got = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).ok(201)
    assert got["status"] == "pending", got
    run = await until(srv, got["run_id"], ended)
    assert run["status"] == "succeeded"
    assert nodes_of(run)["b"]["output"]["value"] == 1


async def test_a_kept_document_still_refuses_bad_input(srv: Server) -> None:
    doc = chain(3)
    assert (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).status == 201
    for body in ({"concurrency": 5}, {"idempotency_key": 7}, {"untrusted": "yes"},
                 {"workdir": 3}, {"policy": "skip"}):
        reply = await srv.user("POST", "/runs", {"source": doc, "filename": "g.json", **body})
        reply.refused(400, "invalid_argument")
    # A bad document is refused each time with the same message (nothing kept of it).
    bad = graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "k"}}])
    first = (await srv.user("POST", "/runs", {"source": bad, "filename": "g.json"})
             ).refused(400, "invalid_argument")
    second = (await srv.user("POST", "/runs", {"source": bad, "filename": "g.json"})
              ).refused(400, "invalid_argument")
    assert first == second and "value" in first


async def test_a_constant_call_that_cannot_run_fails_its_node_alone(srv: Server) -> None:
    def node(nid: str, **config: Any) -> dict[str, Any]:
        return {"id": nid, "type": "state", "config": {"op": "set", "value": 1, **config}}

    # b's entity is not a valid name: the database refuses the write. a and c (not after b)
    # still run; b fails with the reason; the run fails.
    doc = graph([node("a", key="ka"), node("b", key="kb", entity="not a name!"),
                 node("c", key="kc")], [("a", "b")], )
    got = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).ok(201)
    run = await until(srv, got["run_id"], ended)
    assert run["status"] == "failed", run
    nodes = nodes_of(run)
    assert nodes["a"]["status"] == "succeeded" and nodes["c"]["status"] == "succeeded"
    assert nodes["b"]["status"] == "failed" and "entity name" in nodes["b"]["error"]
    # Only b's call kept a block of its own: the others were checked at hand-over.
    checked = dict(await rows(srv, "SELECT node_id, state_call ? 'checked' FROM cryo.node_states"
                                   " WHERE run_id = %s", got["run_id"]))
    assert checked == {"a": True, "b": False, "c": True}


async def test_a_long_constant_chain_runs_whole_in_its_submit(srv: Server) -> None:
    # No share and no yield: the batch reads nothing again per node, so its cost a node
    # stays flat at any size (the one-at-a-time path yields after 500).
    got = (await srv.user("POST", "/runs", {"source": chain(1200), "filename": "g.json"})
           ).ok(201)
    assert got["status"] == "succeeded", got
    run = await srv.show(got["run_id"])
    kinds = [e["kind"] for e in run["history"]]
    assert kinds.count("node_completed") == 1200 and "turn_yielded" not in kinds
    names = [e.get("name") for e in run["history"] if e["kind"] == "node_completed"]
    assert names == [f"n{i}" for i in range(1200)]
