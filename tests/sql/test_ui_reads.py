"""What the web UI reads and the marker it needs: a step pinned as running before its
command runs (cryo.mark_step), completed in place by record_step; checkpoints in order;
one bounded page of runs with children under parents; a log's tail window."""

from __future__ import annotations

import psycopg
import pytest

from tests.sql.conftest import claim, submit


def _checkpoints(db: psycopg.Connection, run_id: str) -> list[tuple]:
    return db.execute("SELECT seq, family, name, ordinal, status FROM cryo.read_checkpoints(%s)",
                      (run_id,)).fetchall()


def test_a_step_is_pinned_as_running_then_completed_in_place(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.record_step(%s,%s,0,'step','a',0,NULL,'\\x01',0)", (run_id, token))
    db.execute("SELECT cryo.mark_step(%s,%s,1,'step','b',0)", (run_id, token))
    assert _checkpoints(db, run_id) == [(0, "step", "a", 0, "done"), (1, "step", "b", 0, "pending")]
    started = db.execute("SELECT created_at FROM cryo.journal WHERE run_id=%s AND seq=1",
                         (run_id,)).fetchone()[0]
    # Marking again (a retried request) changes nothing.
    db.execute("SELECT cryo.mark_step(%s,%s,1,'step','b',0)", (run_id, token))
    seq = db.execute("SELECT cryo.record_step(%s,%s,1,'step','b',0,'lbl','\\x02',3)",
                     (run_id, token)).fetchone()[0]
    assert seq == 1
    assert _checkpoints(db, run_id) == [(0, "step", "a", 0, "done"), (1, "step", "b", 0, "done")]
    row = db.execute("SELECT result, exit_code, label, created_at, completed_at FROM cryo.journal"
                     " WHERE run_id=%s AND seq=1", (run_id,)).fetchone()
    assert row[:3] == (b"\x02", 3, "lbl") and row[3] == started and row[4] is not None
    # A recorded step is a memo now: recording it again from a later attempt is refused.
    db.execute("SELECT cryo.park_sleep(%s, %s, 2, 0, 0)", (run_id, token))
    db.execute("SELECT * FROM cryo.tick()")
    _, token2 = claim(db)
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.record_step(%s,%s,1,'step','b',0,NULL,'\\x01',0)", (run_id, token2))
    assert exc.value.sqlstate == "CR007"


def test_a_marker_left_by_a_dead_attempt_is_completed_by_the_next(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db, lease=1)
    db.execute("SELECT cryo.mark_step(%s,%s,0,'step','slow',0)", (run_id, token))
    db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))
    _, token2 = claim(db)
    db.execute("SELECT cryo.mark_step(%s,%s,0,'step','slow',0)", (run_id, token2))
    assert db.execute("SELECT cryo.record_step(%s,%s,0,'step','slow',0,NULL,'\\x01',0)",
                      (run_id, token2)).fetchone()[0] == 0
    assert db.execute("SELECT status, attempt FROM cryo.journal WHERE run_id=%s",
                      (run_id,)).fetchall() == [("done", 2)]


def test_mark_step_needs_the_live_claim(db: psycopg.Connection) -> None:
    run_id = submit(db)
    claim(db)
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.mark_step(%s, gen_random_uuid(), 0, 'step', 'a', 0)", (run_id,))
    assert exc.value.sqlstate == "CR002"


def test_runs_page_is_bounded_filtered_and_nests_children(db: psycopg.Connection) -> None:
    ids = [submit(db, f"w{i % 2}.sh") for i in range(7)]
    parent, token = claim(db)
    child = db.execute("SELECT cryo.spawn_run(%s,%s,0,0,'kid.sh',NULL,'\\x00',NULL,'{shell}')",
                       (parent, token)).fetchone()[0]

    def page(**kw: object) -> list[tuple]:
        args = {"p_status": None, "p_workflow": None, "p_parent": None, "p_before": None,
                "p_limit": 3, **kw}
        return db.execute(
            "SELECT id, trig, children, parent_run_id FROM cryo.list_runs_page('dev','default',"
            "%(p_status)s,%(p_workflow)s,%(p_parent)s,%(p_before)s,%(p_limit)s)", args).fetchall()

    first = page()
    assert [r[0] for r in first] == ids[::-1][:3]
    second = page(p_before=first[-1][0])
    assert [r[0] for r in second] == ids[::-1][3:6]
    everything = page(p_limit=1000)
    assert len(everything) == 7 and child not in [r[0] for r in everything]
    assert [r for r in everything if r[0] == parent][0][1:] == ("manual", 1, None)
    assert page(p_parent=parent) == [(child, "parent", 0, parent)]
    assert {r[0] for r in page(p_workflow="w1.sh", p_limit=100)} == set(ids[1::2])
    assert [r[0] for r in page(p_status="running")] == [parent]
    assert len(page(p_limit=100000)) == 7  # the page is capped at 200 rows, here all 7


def test_log_tail_starts_near_the_end(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    for i in range(10):
        db.execute("SELECT cryo.append_log(%s, %s, %s, 30)", (run_id, token, bytes([65 + i]) * 100))
    ids = [r[0] for r in db.execute("SELECT id FROM cryo.read_logs(%s)", (run_id,))]
    after, skipped, total = db.execute("SELECT * FROM cryo.log_tail_start(%s, 250)",
                                       (run_id,)).fetchone()
    assert (after, skipped, total) == (ids[6], 700, 1000)
    assert db.execute("SELECT * FROM cryo.log_tail_start(%s, 5000)", (run_id,)).fetchone() == (
        0, 0, 1000)
    assert db.execute("SELECT * FROM cryo.log_tail_start(%s, 1)", (run_id,)).fetchone()[0] == ids[8]


def test_run_entity_cells_are_those_it_created_or_wrote_last(db: psycopg.Connection) -> None:
    first = submit(db)
    _, t1 = claim(db)
    db.execute("SELECT cryo.state_set(%s, %s, 'acct', 'a', '\\x01')", (first, t1))
    db.execute("SELECT cryo.state_set(%s, %s, 'acct', 'b', '\\x01')", (first, t1))
    db.execute("SELECT cryo.state_set(%s, %s, NULL, 'mine', '\\x01')", (first, t1))
    second = submit(db)
    _, t2 = claim(db)
    db.execute("SELECT cryo.state_set(%s, %s, 'acct', 'b', '\\x02')", (second, t2))
    db.execute("SELECT cryo.state_set(%s, %s, 'other', 'c', '\\x02')", (second, t2))
    rows = lambda run: db.execute(  # noqa: E731
        "SELECT entity, key, version FROM cryo.run_entity_cells(%s)", (run,)).fetchall()
    assert rows(first) == [("acct", "a", 1), ("acct", "b", 2)]  # b: it created it
    assert rows(second) == [("acct", "b", 2), ("other", "c", 1)]
