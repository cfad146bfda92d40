"""Loops are durable (issue 39 item 7): each iteration is a node instance recorded when
it ends, a turn that rolls back re-runs no ended iteration, and recording an ended
iteration again changes nothing. Driven by hand, as the server's driver does."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from cryopg.graphs.document import compile_graph


def _submit(db: psycopg.Connection, doc: dict[str, Any]) -> str:
    structure = compile_graph({"version": "cryosleep-graph/v1", **doc}).structure
    return db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                      " '\\x00', p_graph => %s)", (Jsonb(structure),)).fetchone()[0]


def _turn(db: psycopg.Connection, run_id: str, record: list[tuple[str, int]]
          ) -> list[tuple[str, str | None, int | None]]:
    """Takes the run, records the given instances succeeded, plans with every config
    sent, and parks the run (or finishes it). Returns the plan's (action, node, item)."""
    if record:
        db.execute("SELECT cryo._graph_poke(%s, 'node_job_ended')", (run_id,))
    taken = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 5)").fetchall()
    token = next(t for r, t in taken if r == run_id)
    for node, item in record:
        db.execute("SELECT cryo.graph_record_item(%s, %s, %s, %s, 'succeeded', NULL, NULL, "
                   "NULL, '{}')", (run_id, token, node, item))
    configs = {n: {} for (n,) in db.execute(
        "SELECT node_id FROM cryo.node_states WHERE run_id = %s", (run_id,)).fetchall()}
    plan = db.execute("SELECT action, node_id, item FROM cryo.graph_plan(%s, %s, %s, %s)",
                      (run_id, token, Jsonb(configs),
                       Jsonb({"nodes": {}, "run": {"id": run_id}}))).fetchall()
    finish = any(a == "finish" for a, _, _ in plan)
    if not any(a == "settled" for a, _, _ in plan):
        db.execute("SELECT cryo.graph_settle(%s, %s, %s)", (run_id, token, finish))
    return plan


def _instances(db: psycopg.Connection, run_id: str) -> list[tuple[int, str]]:
    return db.execute("SELECT item, status FROM cryo.node_instances WHERE run_id = %s "
                      "AND node_id = 'poll' ORDER BY item", (run_id,)).fetchall()


def test_a_rolled_back_turn_re_runs_no_ended_iteration(db: psycopg.Connection) -> None:
    run_id = _submit(db, {"nodes": [
        {"id": "poll", "type": "shell", "config": {"run": "true"},
         "loop": {"while": "node.iteration < 2", "max_iterations": 5}},
        {"id": "after", "type": "shell", "config": {"run": "true"}}],
        "edges": [{"from": "poll", "to": "after"}]})
    with db.transaction():
        assert ("start", "poll", 0) in _turn(db, run_id, [])
    with db.transaction():
        assert [p for p in _turn(db, run_id, [("poll", 0)]) if p[0] == "start"] == [
            ("start", "poll", 1)]
    # A driver that dies mid-turn: iteration 1 recorded and iteration 2 opened, rolled back.
    with db.transaction(force_rollback=True):
        assert ("start", "poll", 2) in _turn(db, run_id, [("poll", 1)])
    assert _instances(db, run_id) == [(0, "succeeded"), (1, "running")]
    with db.transaction():
        # The replayed turn: iteration 0 told again changes nothing; only 2 starts.
        plan = _turn(db, run_id, [("poll", 0), ("poll", 1)])
        assert [p for p in plan if p[0] == "start"] == [("start", "poll", 2)]
    with db.transaction():
        plan = _turn(db, run_id, [("poll", 2)])  # node.iteration 2: the loop ends
        assert ("start", "after", 0) in plan
    assert _instances(db, run_id) == [(0, "succeeded"), (1, "succeeded"), (2, "succeeded")]
    assert db.execute("SELECT status FROM cryo.node_states WHERE run_id = %s AND "
                      "node_id = 'poll'", (run_id,)).fetchone() == ("succeeded",)
    assert db.execute("SELECT count(*) FROM cryo.history WHERE run_id = %s AND "
                      "kind = 'node_iteration'", (run_id,)).fetchone() == (2,)
