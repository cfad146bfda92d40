"""The gaps against the spec of issue 39 item 6: `trigger.*` in a node's template, the
graph's input in a shell job's $CRYO_INPUT_FILE, and `rerun --from X` running X and what
is downstream of it only, past a failure continue_on_error tolerated."""

from __future__ import annotations

import asyncio
import json
import time

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until


async def test_trigger_in_a_node_template_reads_the_runs_trigger(srv: Server) -> None:
    doc = json.loads(graph([{"id": "mark", "type": "state", "config": {
        "op": "set", "key": {"$template": "by-{{ trigger.kind }}-{{ trigger.name }}"},
        "entity": "seen", "value": {"$expr": "input.trigger.kind"}}}]))
    doc["on"] = {"event": ["order.created"]}
    (await srv.user("PUT", "/workflows/orders", {"source": json.dumps(doc),
                                                 "filename": "orders.json"})).ok()
    (await srv.user("POST", "/events/order.created", {"payload": {"n": 1}})).ok(201)
    deadline = time.monotonic() + 20
    cells: list[tuple[str, str]] = []
    while not cells and time.monotonic() < deadline:
        async with await srv.connect() as conn:
            cells = await (await conn.execute(
                "SELECT entity, key FROM cryo.state_cells")).fetchall()
        await asyncio.sleep(0.05)
    assert cells == [("seen", "by-event-order.created")]


async def test_a_shell_node_gets_the_graphs_input_in_its_input_file(srv: Server) -> None:
    doc = graph([{"id": "sh", "type": "shell", "config": {"run": 'cat "$CRYO_INPUT_FILE"'}}])
    run_id = await submit_graph(srv, doc, input={"order": 1042})
    grant = None
    deadline = time.monotonic() + 20
    while grant is None and time.monotonic() < deadline:
        grant = await srv.claim()
        await asyncio.sleep(0.05)
    assert grant is not None and grant["input"] == {"order": 1042}, grant
    await srv.finish(grant)
    assert (await until(srv, run_id, ended))["status"] == "succeeded"


def _incr(nid: str, **more: object) -> dict[str, object]:
    return {"id": nid, "type": "state", "config": {"op": "incr", "key": nid, "entity": "r"},
            **more}


async def test_rerun_from_runs_the_node_and_its_descendants_only(srv: Server) -> None:
    doc = graph([
        {"id": "bad", "type": "state", "continue_on_error": True,
         "config": {"op": "set", "key": "k", "entity": "no spaces allowed", "value": 1}},
        _incr("sibling"), _incr("x"), _incr("y"), _incr("after_sibling")],
        [("bad", "x"), ("x", "y"), ("sibling", "after_sibling")])
    run_id = await submit_graph(srv, doc)
    first = await until(srv, run_id, ended)
    assert first["status"] == "succeeded" and nodes_of(first)["bad"]["status"] == "failed"
    got = (await srv.user("POST", f"/runs/{run_id}/rerun", {"from": "x"})).ok(201)
    rerun = await until(srv, got["id"], ended)
    nodes = nodes_of(rerun)
    assert rerun["status"] == "succeeded", rerun
    # The tolerated failure upstream stays as it was; the sibling branch is not run again.
    assert nodes["bad"]["status"] == "failed"
    assert [nodes[n]["status"] for n in ("sibling", "after_sibling")] == ["seeded"] * 2
    assert nodes["sibling"]["output"]["value"] == 1
    assert [nodes[n]["output"]["value"] for n in ("x", "y")] == [2, 2]
    assert [nodes[n]["status"] for n in ("x", "y")] == ["succeeded"] * 2
