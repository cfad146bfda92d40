"""Deadlines, claim priority and a workflow's defaults in the database (79_timeouts.sql):
the sweep fails a live run past its deadline with exit code 124 whatever it is doing,
the agent's next call learns why (CR215), and higher priority is claimed first."""

from __future__ import annotations

import psycopg
import pytest

from tests.sql.conftest import claim

LATER = "2100-01-01 00:00:00+00"


def _submit(db: psycopg.Connection, timeout: float | None = None,
            priority: int | None = None) -> str:
    return db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'wf.sh', NULL, %s,"
        " p_timeout => %s, p_priority => %s)", (b"src", timeout, priority)).fetchone()[0]


def _outcome(db: psycopg.Connection, run_id: str) -> tuple[str, int | None, str | None]:
    return db.execute("SELECT status, exit_code, error FROM cryo.runs WHERE id = %s",
                      (run_id,)).fetchone()


def _at(db: psycopg.Connection, when: str) -> None:
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (when,))


def test_a_run_past_its_deadline_fails_with_124_pending_running_or_parked(
        db: psycopg.Connection) -> None:
    _at(db, "2030-01-01 00:00:00+00")
    pending, running, parked, unbounded = _submit(db, 30), _submit(db, 90), _submit(db, 5400), \
        _submit(db)
    queued = _submit(db, 60)  # never claimed: pending at its deadline
    assert claim(db)[0] == pending  # the oldest is claimed first (all priority 0)
    run_token = claim(db)
    assert run_token[0] == running
    park = claim(db)
    assert park[0] == parked
    db.execute("SELECT cryo.park_sleep(%s, %s, 0, 1, 86400)", park)
    db.execute("SELECT * FROM cryo.tick()")
    assert _outcome(db, running)[0] == "running"  # not yet
    _at(db, "2030-01-01 02:00:00+00")
    db.execute("SELECT * FROM cryo.tick()")
    assert _outcome(db, pending) == ("failed", 124, "timed out after 30s")  # while running
    assert _outcome(db, running) == ("failed", 124, "timed out after 1m30s")
    assert _outcome(db, parked) == ("failed", 124, "timed out after 1h30m")
    assert _outcome(db, queued) == ("failed", 124, "timed out after 1m")
    assert _outcome(db, unbounded)[0] in ("pending", "running")
    assert db.execute("SELECT count(*) FROM cryo.queue WHERE run_id IN (%s, %s, %s)",
                      (pending, running, parked)).fetchone() == (0,)
    # The running run's agent learns why at its next call: not a lost claim, a timeout.
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.renew_claim(%s, %s, 30)", run_token)
    assert exc.value.sqlstate == "CR215"


def test_a_timed_out_runs_children_are_cancelled(db: psycopg.Connection) -> None:
    _at(db, "2030-01-01 00:00:00+00")
    parent = _submit(db, 60)
    child = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'c.sh', NULL, %s,"
        " p_parent_run_id => %s)", (b"src", parent)).fetchone()[0]
    _at(db, LATER)
    db.execute("SELECT * FROM cryo.tick()")
    assert _outcome(db, parent)[:2] == ("failed", 124)
    assert _outcome(db, child)[0] == "cancelled"


def test_a_higher_priority_is_claimed_first_then_the_oldest(db: psycopg.Connection) -> None:
    low, high, mid, high2 = _submit(db), _submit(db, priority=5), _submit(db, priority=1), \
        _submit(db, priority=5)
    assert [claim(db)[0] for _ in range(4)] == [high, high2, mid, low]


def test_a_child_gets_its_parents_priority(db: psycopg.Connection) -> None:
    parent = _submit(db, priority=7)
    child = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'c.sh', NULL, %s,"
        " p_parent_run_id => %s)", (b"src", parent)).fetchone()[0]
    assert db.execute("SELECT priority FROM cryo.runs WHERE id = %s",
                      (child,)).fetchone() == (7,)


def test_a_stored_workflows_defaults_apply_to_its_runs_and_a_submit_wins(
        db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'nightly', 'n.sh', NULL, %s,"
               " p_timeout => 600, p_priority => 3)", (b"src",))
    by_name = db.execute("SELECT cryo.submit_run('dev', 'default', 'nightly')").fetchone()[0]
    own = db.execute("SELECT cryo.submit_run('dev', 'default', 'nightly', p_timeout => 5,"
                     " p_priority => -1)").fetchone()[0]
    rows = db.execute("SELECT timeout_s, priority, deadline_at - created_at FROM cryo.runs"
                      " WHERE id = ANY (%s) ORDER BY id", ([by_name, own],)).fetchall()
    assert [(t, p) for t, p, _ in rows] == [(600, 3), (5, -1)]
    assert rows[0][2].total_seconds() == 600


@pytest.mark.parametrize("timeout, priority", [(0, None), (-1, None), (None, 1001)])
def test_a_bad_timeout_or_priority_is_refused(db: psycopg.Connection, timeout: float | None,
                                              priority: int | None) -> None:
    with pytest.raises(psycopg.Error) as exc:
        _submit(db, timeout, priority)
    assert exc.value.sqlstate == "CR004"


def test_durations_read_as_documents_write_them(db: psycopg.Connection) -> None:
    got = [db.execute("SELECT cryo._duration_text(%s)", (s,)).fetchone()[0]
           for s in (30, 1.5, 0.25, 60, 90, 3600, 5400, 86400 + 61)]
    assert got == ["30s", "1.5s", "0.25s", "1m", "1m30s", "1h", "1h30m", "1d1m1s"]


def test_a_graph_run_past_its_timeout_fails_and_no_node_stays_pending(
        db: psycopg.Connection) -> None:
    """The graph document's own timeout is the run's; at it the run fails with 124 and
    every node it had not ended ends with it."""
    _at(db, "2030-01-01 00:00:00+00")
    graph = ('{"timeout": 60, "nodes": [{"id": "a", "type": "shell", "deps": []},'
             ' {"id": "b", "type": "shell", "deps": ["a"]}]}')
    run_id = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL, %s,"
        " p_graph => %s::jsonb)", (b"doc", graph)).fetchone()[0]
    assert db.execute("SELECT timeout_s FROM cryo.runs WHERE id = %s",
                      (run_id,)).fetchone() == (60,)
    _at(db, LATER)
    db.execute("SELECT * FROM cryo.tick()")
    assert _outcome(db, run_id) == ("failed", 124, "timed out after 1m")
    assert db.execute("SELECT array_agg(DISTINCT status) FROM cryo.node_states"
                      " WHERE run_id = %s", (run_id,)).fetchone() == (["cancelled"],)
