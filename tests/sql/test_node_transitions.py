"""The node transitions layer (12_node_transitions.sql) is the only writer of graph node
rows and the only place node statuses are listed; and the states it leaves say what
happened: a rejected approval still runs the clean-up after it, a finished run has no
pending node, a node waiting on its lock says it waits."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from cryopg.graphs.document import compile_graph
from cryopg.paths import SQL_DIR

# The layer is what 12_node_transitions.sql defines; a writer elsewhere fails the test.
LAYER = SQL_DIR / "functions" / "12_node_transitions.sql"
NODE_TRANSITIONS = set(re.findall(r"CREATE OR REPLACE FUNCTION cryo\.(\w+)\(", LAYER.read_text()))
# Removing whole runs (retention, project deletion) takes their node rows with them.
REMOVERS = {"_delete_runs"}
WRITES = re.compile(
    r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.node_(states|instances)\b", re.I)
WORD = r"(?:pending|running|waiting|ready|retrying|succeeded|failed|skipped|seeded|cancelled)"
STATUS = rf"'{WORD}'"
WORD = r"(?:pending|running|waiting|ready|retrying|succeeded|failed|skipped|seeded|cancelled)"
STATUS_LIST = re.compile(rf"{STATUS}(?:\s*,\s*{STATUS})+|'\{{{WORD}(?:,\s*{WORD})+\}}'")
# Words only a node or an instance has: a list holding one is a list of node statuses
# (a run's statuses overlap the rest).
NODE_ONLY = re.compile(r"\b(waiting|ready|retrying|skipped|seeded)\b")


def _functions(db: psycopg.Connection) -> list[tuple[str, str]]:
    return db.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'cryo'").fetchall()


def test_only_the_node_transitions_write_node_rows(db: psycopg.Connection) -> None:
    rows = _functions(db)
    assert {name for name, _ in rows} >= NODE_TRANSITIONS
    # Reject, approve, cancel, skip, fail and start all come through it.
    assert NODE_TRANSITIONS >= {"_instance_reject", "_instance_answer", "_graph_cancel_nodes",
                                "_graph_skip", "_node_end", "_node_start", "_instance_ended"}
    offenders = sorted({name for name, src in rows if WRITES.search(src)}
                       - NODE_TRANSITIONS - REMOVERS)
    assert offenders == []


def test_node_statuses_are_listed_only_in_the_layer(db: psycopg.Connection) -> None:
    offenders = sorted(
        f"{name}: {m.group(0)}" for name, src in _functions(db) if name not in NODE_TRANSITIONS
        for m in STATUS_LIST.finditer(src) if NODE_ONLY.search(m.group(0)))
    assert offenders == []


# -- driving a graph run by hand, as the server's driver does --------------------------

def _submit(db: psycopg.Connection, doc: dict[str, Any]) -> str:
    structure = compile_graph({"version": "cryosleep-graph/v1", **doc}).structure
    return db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                      " '\\x00', p_graph => %s)", (Jsonb(structure),)).fetchone()[0]


def _turn(db: psycopg.Connection, run_id: str,
          record: dict[str, Any] | None = None) -> list[tuple[str, str | None]]:
    """One driver turn: takes the run, records the outcomes given of its started
    instances ({node: outcome, or (outcome, sealed output, clear output)}), plans (every
    node's config sent), makes an approval node wait, and settles. Returns the plan's
    (action, node) rows."""
    record = dict(record or {})
    got: list[tuple[str, str | None]] = []
    with db.transaction():
        if record:  # their jobs ended: the run wakes, as a child's end wakes it
            db.execute("SELECT cryo._graph_poke(%s, 'node_job_ended')", (run_id,))
        taken = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 5)").fetchall()
        token = next(t for r, t in taken if r == run_id)
        for node, outcome in record.items():
            how, sealed, clear = outcome if isinstance(outcome, tuple) else (outcome, None, None)
            db.execute("SELECT cryo.graph_record_item(%s, %s, %s, 0, %s, %s, NULL, NULL, %s)",
                       (run_id, token, node, how, sealed, None if clear is None else Jsonb(clear)))
        configs = {n: {} for (n,) in db.execute(
            "SELECT node_id FROM cryo.node_states WHERE run_id = %s", (run_id,)).fetchall()}
        settled = False
        for _ in range(5):
            plan = db.execute(
                "SELECT action, node_id, type FROM cryo.graph_plan(%s, %s, %s, %s)",
                (run_id, token, Jsonb(configs),
                 Jsonb({"nodes": {}, "run": {"id": run_id}}))).fetchall()
            got += [(a, n) for a, n, _ in plan]
            for action, node, type_ in plan:
                if action == "start" and type_ == "approval":
                    db.execute("SELECT cryo.graph_wait_item(%s, %s, %s, 0, 'approval', NULL, NULL)",
                               (run_id, token, node))
            if any(a == "settled" for a, _, _ in plan):
                settled = True
                break
            if any(a == "finish" for a, _, _ in plan):
                db.execute("SELECT cryo.graph_settle(%s, %s, true)", (run_id, token))
                settled = True
                break
            if not any(a in ("skip", "done") for a, _, _ in plan):
                break
        if not settled:
            db.execute("SELECT cryo.graph_settle(%s, %s, false)", (run_id, token))
    return got


def _nodes(db: psycopg.Connection, run_id: str) -> dict[str, tuple[str, str | None]]:
    return {n: (s, e) for n, s, e in db.execute(
        "SELECT node_id, status, error FROM cryo.node_states WHERE run_id = %s", (run_id,))}


def test_rejecting_an_approval_runs_the_always_cleanup_and_ends_the_run(
        db: psycopg.Connection) -> None:
    run_id = _submit(db, {"nodes": [
        {"id": "ask", "type": "approval", "config": {"fields": {}}},
        {"id": "deploy", "type": "shell", "config": {"run": "true"}},
        {"id": "cleanup", "type": "shell", "config": {"run": "true"}, "always": True}],
        "edges": [{"from": "ask", "to": "deploy"}, {"from": "deploy", "to": "cleanup"}]})
    assert ("start", "ask") in _turn(db, run_id)
    assert db.execute("SELECT cryo.reject_node(%s, 'ask', '\\x00', 'ann')",
                      (run_id,)).fetchone() == (True,)
    # The run woke; its next turn skips what depended on the approval and starts the
    # clean-up, which ran before only when the approval ended some other way.
    plan = _turn(db, run_id)
    assert ("skip", "deploy") in plan and ("start", "cleanup") in plan
    _turn(db, run_id, {"cleanup": "succeeded"})
    assert db.execute("SELECT status, error FROM cryo.runs WHERE id = %s", (run_id,)).fetchone() \
        == ("failed", "node ask failed: rejected by ann")
    assert _nodes(db, run_id) == {"ask": ("failed", "rejected by ann"),
                                  "deploy": ("skipped", "the run failed"),
                                  "cleanup": ("succeeded", None)}


def test_a_finished_run_has_no_pending_node(db: psycopg.Connection) -> None:
    # x is still running when a fails; y, after x, never starts.
    run_id = _submit(db, {"nodes": [
        {"id": "a", "type": "shell", "config": {"run": "false"}},
        {"id": "x", "type": "shell", "config": {"run": "sleep 9"}},
        {"id": "y", "type": "shell", "config": {"run": "true"}}],
        "edges": [{"from": "x", "to": "y"}]})
    assert {("start", "a"), ("start", "x")} <= set(_turn(db, run_id))
    _turn(db, run_id, {"a": "failed"})
    assert db.execute("SELECT status FROM cryo.runs WHERE id = %s", (run_id,)).fetchone() \
        == ("failed",)
    assert _nodes(db, run_id) == {"a": ("failed", None), "x": ("cancelled", None),
                                  "y": ("skipped", "the run failed")}
    skipped = db.execute("SELECT key_name FROM cryo.history WHERE run_id = %s"
                         " AND kind = 'node_skipped'", (run_id,)).fetchall()
    assert skipped == [("y",)]


def test_a_node_waiting_on_its_lock_says_it_waits(db: psycopg.Connection) -> None:
    holder = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'h.sh', NULL,"
                        " '\\x00', p_concurrency => 'deploy')").fetchone()[0]
    run_id = _submit(db, {"nodes": [
        {"id": "j", "type": "shell", "config": {"run": "true"}, "concurrency": "deploy"}]})
    assert ("start", "j") not in _turn(db, run_id)
    row = db.execute("SELECT status, item_status, wait_kind FROM cryo.read_graph_nodes(%s)",
                     (run_id,)).fetchone()
    assert row == ("waiting", "ready", "lease")
    assert db.execute("SELECT substate FROM cryo.runs WHERE id = %s", (run_id,)).fetchone() \
        == ("awaiting-lease",)
    # The holder ends: the group goes to the node, which starts and runs.
    db.execute("SELECT cryo.cancel_run(%s)", (holder,))
    assert ("start", "j") in _turn(db, run_id)
    row = db.execute("SELECT status, item_status, wait_kind FROM cryo.read_graph_nodes(%s)",
                     (run_id,)).fetchone()
    assert row == ("running", "running", None)


def test_the_default_output_is_made_in_sql(db: psycopg.Connection) -> None:
    """The outputs of the nodes nothing depends on, by id (a skipped one is null): all
    clear, SQL settles the run with them; one sealed, it hands them to the driver to
    open, as {"$sealed": hex} (the driver made this answer itself before)."""
    doc = {"nodes": [{"id": "a", "type": "shell", "config": {"run": "true"}},
                     {"id": "b", "type": "shell", "config": {"run": "true"}},
                     {"id": "c", "type": "shell", "config": {"run": "true"}, "if": "false"}]}
    clear = _submit(db, doc)
    _turn(db, clear)
    _turn(db, clear, {"a": ("succeeded", None, {"n": 1}), "b": ("succeeded", None, [2])})
    assert db.execute("SELECT o.value_clear, r.status FROM cryo.run_outputs o JOIN cryo.runs r"
                      " ON r.id = o.run_id WHERE o.run_id = %s", (clear,)).fetchone() == (
        {"answer": {"a": {"n": 1}, "b": [2], "c": None}}, "succeeded")
    sealed = _submit(db, doc)
    _turn(db, sealed)
    db.execute("SELECT cryo._graph_poke(%s, 'node_job_ended')", (sealed,))
    with db.transaction(force_rollback=True):
        (token,) = db.execute("SELECT claim_token FROM cryo.drive_graphs('d', 5)").fetchone()
        for node, out in (("a", b"\x01\x02"), ("b", None)):
            db.execute("SELECT cryo.graph_record_item(%s, %s, %s, 0, 'succeeded', %s, NULL, NULL,"
                       " %s)", (sealed, token, node, out, None if out else Jsonb(7)))
        plan = db.execute("SELECT action, type, output FROM cryo.graph_plan(%s, %s, '{}', %s)",
                          (sealed, token, Jsonb({"nodes": {}, "run": {"id": sealed}}))).fetchall()
        assert plan[-1] == ("finish", "default", {"a": {"$sealed": "0102"}, "b": 7, "c": None})
