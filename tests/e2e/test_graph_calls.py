"""A script calls graphs and nodes (cryopg call-graph / call-node) through a real stack:
the child graph run is submitted once, the caller parks until it ends, and every pass
answers from the journal."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.e2e.helpers import script, show, submit

TALLY = {
    "version": "cryosleep-graph/v1",
    "nodes": [
        {"id": "bump", "type": "state",
         "config": {"op": "incr", "key": "hits", "entity": "calls", "by": {"$expr": "input.by"}}},
        {"id": "read", "type": "state", "config": {"op": "get", "key": "hits", "entity": "calls"}},
    ],
    "edges": [{"from": "bump", "to": "read"}],
    "output": {"$expr": "nodes.read.output"},
}


def _put_graph(stack: Any, name: str, doc: dict[str, Any]) -> None:
    path = script(stack.dir, f"{name}.json", json.dumps(doc))
    done = stack.cli("workflow", "put", name, str(path))
    assert done.returncode == 0, done.stderr


def _follow(stack: Any, run_id: str) -> Any:
    return stack.cli("logs", run_id, "--follow", timeout=90)


def _children(dsn: str, run_id: str) -> list[tuple[str, str, str | None]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT kind, status, workflow FROM cryo.runs WHERE parent_run_id = %s"
                            " ORDER BY created_at", (run_id,)).fetchall()


def _cell(dsn: str, entity: str, key: str, project: str = "default") -> int | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT version FROM cryo.state_cells WHERE entity = %s AND key = %s"
                           " AND project = %s", (entity, key, project)).fetchone()
    return row[0] if row else None


def test_a_script_gets_a_called_graphs_output_and_replays_without_a_second_child(
        stack: Any, dsn: str) -> None:
    _put_graph(stack, "tally", TALLY)
    run_id = submit(stack, script(stack.dir, "caller.sh", """\
out=$(cryopg call-graph tally --input '{"by":5}')
echo "graph=$out"
one=$(cryopg call-node state --config '{"op":"incr","key":"nodes","entity":"calls","by":2}')
echo "node=$one"
cryopg sleep 1s
echo "after-sleep graph=$out node=$one"
"""))
    done = _follow(stack, run_id)
    assert done.returncode == 0, done.stdout
    # The graph's output: its read node's {value, version} after the incr by 5.
    assert 'after-sleep graph={"value":5,"version":1} node={"value":2,"version":1}' in done.stdout
    # Three passes (parked on the graph, on the node, on the sleep), one child each call.
    children = _children(dsn, run_id)
    assert children == [("graph", "succeeded", "tally"), ("graph", "succeeded", None)]
    assert _cell(dsn, "calls", "hits", stack.project) == 1
    assert _cell(dsn, "calls", "nodes", stack.project) == 1
    history = show(stack, run_id)["history"]
    woken = [h for h in history if h["kind"] == "graph_call_completed"]
    assert [(h["family"], h["name"]) for h in woken] == [("graph.call", "tally"),
                                                         ("node.call", "state")]


def test_a_failed_child_graph_fails_the_call_with_its_error(stack: Any, dsn: str) -> None:
    _put_graph(stack, "tally", TALLY)
    wf = script(stack.dir, "plain.sh", "echo plain\n")
    assert stack.cli("workflow", "put", "plain", str(wf)).returncode == 0
    run_id = submit(stack, script(stack.dir, "failing.sh", """\
if out=$(cryopg call-graph tally --input '{"by":"lots"}' 2>&1); then echo "graph ok $out"
else echo "graph failed=$? $out"; fi
if out=$(cryopg call-node shell --config '{"run":"echo half; exit 3"}' 2>&1)
then echo "node ok $out"
else echo "node failed=$? $out"; fi
if out=$(cryopg call-graph plain 2>&1); then echo "script ok"
else echo "script refused=$? $out"; fi
if out=$(cryopg call-node state --config '{"op":"nope","key":"k"}' 2>&1); then echo "bad ok"
else echo "bad refused=$? $out"; fi
cryopg call-node state 2>/dev/null || echo "usage=$?"
echo end
"""))
    done = _follow(stack, run_id)
    assert done.returncode == 0, done.stdout
    log = done.stdout
    assert ("graph failed=1 cryopg call-graph: graph 'tally' "
            f"(run {stack.org}:{stack.project}:run-") in log
    assert "failed: node bump failed: incr needs a number to add, not 'lots'" in log
    assert "node failed=1 cryopg call-node: shell node (run " in log
    assert "node shell failed: exit code 3" in log
    assert "script refused=2 cryopg call-graph: workflow 'plain' is a script, not a graph" in log
    assert "bad refused=2 cryopg call-node: node state: config.op must be one of" in log
    assert "usage=2" in log and log.rstrip().endswith("end")
    # Each failed child ran once; the refused calls started nothing.
    assert [(k, s) for k, s, _ in _children(dsn, run_id)] == [("graph", "failed"),
                                                             ("graph", "failed")]
