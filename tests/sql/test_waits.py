"""Signals, events, timeouts, activities and retries at the SQL level."""

from __future__ import annotations

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit

FAR = "2100-01-01 00:00:00+00"


def _wait_signal(db: psycopg.Connection, run_id: str, token: object, name: str = "go",
                 ordinal: int = 0, timeout: float | None = None) -> tuple:
    return db.execute("SELECT * FROM cryo.wait_signal(%s, %s, NULL, %s, %s, %s, %s)",
                      (run_id, token, name, ordinal, timeout,
                       f"signal/{name}/{ordinal}")).fetchone()


def test_signal_queued_before_the_wait_is_taken_without_parking(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.send_signal(%s, 'go', p_sealed => '\\x01')", (run_id,))
    db.execute("SELECT cryo.send_signal(%s, 'go', p_sealed => '\\x02')", (run_id,))
    assert _wait_signal(db, run_id, token)[:2] == (False, b"\x01")
    assert _wait_signal(db, run_id, token, ordinal=1)[:2] == (False, b"\x02")
    # A retried request at the same path gets the same answer, not a third signal.
    assert _wait_signal(db, run_id, token, ordinal=1)[:2] == (False, b"\x02")
    assert status(db, run_id) == ("running", None)


def test_signal_wakes_a_parked_waiter_once(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    assert _wait_signal(db, run_id, token)[0] is True
    assert status(db, run_id) == ("parked", "awaiting-signal")
    db.execute("SELECT cryo.send_signal(%s, 'other', p_sealed => '\\x09')", (run_id,))
    assert status(db, run_id) == ("parked", "awaiting-signal")
    db.execute("SELECT cryo.send_signal(%s, 'go', p_sealed => '\\x05')", (run_id,))
    assert status(db, run_id) == ("pending", None)
    _, token2 = claim(db)
    memo = db.execute("SELECT path, status, result, exit_code FROM cryo.read_journal(%s, %s)",
                      (run_id, token2)).fetchall()
    assert memo == [("signal/go/0", "done", b"\x05", 0)]


def test_signals_to_finished_or_unknown_runs_are_refused(db: psycopg.Connection) -> None:
    run_id = submit(db)
    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    for target, code in ((run_id, "CR006"), ("dev:default:run-nope", "CR003")):
        with pytest.raises(psycopg.Error) as exc:
            db.execute("SELECT cryo.send_signal(%s, 'go')", (target,))
        assert exc.value.sqlstate == code
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.send_signal(%s, '')", (submit(db),))
    assert exc.value.sqlstate == "CR004"


def test_a_timed_out_wait_records_124(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    assert _wait_signal(db, run_id, token, timeout=30)[0] is True
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAR,))
    assert db.execute("SELECT woken FROM cryo.tick()").fetchone() == (1,)
    _, token2 = claim(db)
    assert db.execute("SELECT exit_code FROM cryo.read_journal(%s, %s)",
                      (run_id, token2)).fetchall() == [(124,)]
    # The late signal stays queued; the recorded branch does not change.
    db.execute("SELECT cryo.send_signal(%s, 'go', p_sealed => '\\x01')", (run_id,))
    assert _wait_signal(db, run_id, token2)[3] is True


@pytest.mark.slow
def test_one_event_wakes_a_thousand_parked_runs_exactly_once(db: psycopg.Connection) -> None:
    db.execute("""
        SELECT cryo.submit_script('dev', 'default', 'w.sh', NULL, '\\x00')
          FROM generate_series(1, 1000)""")
    parked = 0
    while (got := claim(db)) is not None:
        run_id, token = got
        row = db.execute("SELECT * FROM cryo.wait_event(%s, %s, NULL, 'go', 0, NULL, 'event/go/0')",
                         (run_id, token)).fetchone()
        parked += row[0]
    assert parked == 1000
    assert db.execute("SELECT count(*) FROM cryo.parked_runs "
                      "WHERE reason='awaiting-event'").fetchone() == (1000,)
    db.execute("SELECT cryo.publish_event('dev', 'default', 'go', '{\"n\": 1}')")
    assert db.execute("SELECT count(*) FROM cryo.queue "
                      "WHERE state = 'pending'").fetchone() == (1000,)
    assert db.execute("SELECT count(*) FROM cryo.history "
                      "WHERE kind = 'event_received'").fetchone() == (1000,)
    assert db.execute("SELECT count(*) FROM cryo.journal "
                      "WHERE status='done' AND answer_clear = '{\"n\": 1}'").fetchone() == (1000,)
    db.execute("SELECT cryo.publish_event('dev', 'default', 'go')")  # nobody waits any more
    assert db.execute("SELECT count(*) FROM cryo.history "
                      "WHERE kind = 'event_received'").fetchone() == (1000,)


def test_event_wake_uses_the_waiters_index(db: psycopg.Connection) -> None:
    db.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT 1 FROM cryo.journal j WHERE j.org = 'dev' AND j.project = 'default' "
        "AND j.key_family = 'event' AND j.key_name = 'go' AND j.status = 'pending'"))
    assert "journal_event_waiters" in plan


def _activity(db: psycopg.Connection, run_id: str, token: object, name: str, retries: int = 0,
              retry_on: list[int] | None = None) -> str:
    return db.execute(
        "SELECT cryo.submit_activity(%s, %s, NULL, %s, '\\x00', '{shell}', %s, 0, %s, %s)",
        (run_id, token, name, retries, retry_on, f"activity/{name}/0")).fetchone()[0]


def test_activity_retry_then_collect_wakes_the_parent(db: psycopg.Connection) -> None:
    parent = submit(db)
    _, ptoken = claim(db)
    child = _activity(db, parent, ptoken, "build", retries=1, retry_on=[75])
    with pytest.raises(psycopg.Error) as exc:
        _activity(db, parent, ptoken, "build2")  # fine: another name
        db.execute("SELECT cryo.submit_activity(%s, %s, NULL, 'build', "
                   "'\\x00', '{shell}', p_path => 'activity/build/1')", (parent, ptoken))
    assert exc.value.sqlstate == "CR007"
    parked = db.execute("SELECT * FROM cryo.collect_activity(%s, %s, NULL, 0, 'build', "
                        "'activity.collect/build/0')", (parent, ptoken)).fetchone()
    assert parked == (True, child, None)
    # The child fails with a retryable code: it backs off instead of ending.
    got = claim(db)
    while got[0] != child:
        got = claim(db)
    db.execute("SELECT cryo.finish_run(%s, %s, 'failed', 75)", got)
    assert status(db, child) == ("parked", "retry-backoff")
    db.execute("SELECT * FROM cryo.tick()")
    got = claim(db)
    while got[0] != child:  # the other activity may come first
        got = claim(db)
    db.execute("SELECT cryo.finish_run(%s, %s, 'failed', 3)", got)  # no retries left
    assert status(db, child)[0] == "failed"
    assert status(db, parent) == ("pending", None)
    _, ptoken2 = claim(db)
    memo = db.execute("SELECT exit_code, ref_run_id FROM cryo.read_journal(%s, %s) "
                      "WHERE family = 'activity.collect'", (parent, ptoken2)).fetchone()
    assert memo == (3, child)


def test_cancel_cascades_to_children(db: psycopg.Connection) -> None:
    parent = submit(db)
    _, ptoken = claim(db)
    child = _activity(db, parent, ptoken, "c")
    db.execute("SELECT * FROM cryo.wait_all_activities(%s, %s, NULL, 0)",
               (parent, ptoken))
    assert status(db, parent) == ("parked", "awaiting-children")
    assert db.execute("SELECT cryo.cancel_run(%s)", (parent,)).fetchone() == ("cancelled",)
    assert status(db, child)[0] == "cancelled" and status(db, parent)[0] == "cancelled"


def test_events_past_retention_are_purged(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.publish_event('dev', 'default', 'old')")
    db.execute("SELECT cryo.set_retention('dev', 'default', p_events => interval '1 day')")
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAR,))
    db.execute("SELECT * FROM cryo.tick()")
    assert db.execute("SELECT count(*) FROM cryo.events").fetchone() == (0,)
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.set_retention('dev', 'default', p_events => interval '0')")
    assert exc.value.sqlstate == "CR004"


def test_an_activity_retry_reruns_the_unit_memos_and_all(db: psycopg.Connection) -> None:
    """A retried activity starts from an empty journal: nothing the failed attempt
    recorded answers the next one, yet the cell its add won is still its own."""
    parent = submit(db)
    _, ptoken = claim(db)
    child = _activity(db, parent, ptoken, "build", retries=1, retry_on=[75])

    def claim_child() -> object:
        got = claim(db)
        while got[0] != child:
            got = claim(db)
        return got[1]

    def add(token: object) -> bool:
        return db.execute(
            "SELECT claimed FROM cryo.state_add(%s, %s, 'ledger', 'k', '\\x01', NULL, "
            "'entity:ledger:k', 0)", (child, token)).fetchone()[0]

    token = claim_child()
    db.execute("SELECT cryo.record_step(%s, %s, 0, 'step', 'once', 0, NULL, '\\x02', 0)",
               (child, token))
    assert add(token) is True
    db.execute("SELECT cryo.finish_run(%s, %s, 'failed', 75)", (child, token))
    assert status(db, child) == ("parked", "retry-backoff")
    db.execute("SELECT * FROM cryo.tick()")
    token = claim_child()
    assert db.execute("SELECT count(*) FROM cryo.read_journal(%s, %s)",
                      (child, token)).fetchone()[0] == 0
    # The step records afresh (no CR007 from the first attempt's memo) ...
    db.execute("SELECT cryo.record_step(%s, %s, 0, 'step', 'once', 0, NULL, '\\x03', 0)",
               (child, token))
    # ... and the add still wins: the cell records that this run created it.
    assert add(token) is True
    kinds = [k for (k,) in db.execute("SELECT kind FROM cryo.history WHERE run_id = %s "
                                      "ORDER BY id", (child,))]
    assert "retry_scheduled" in kinds
