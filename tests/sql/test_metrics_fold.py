"""Metrics folded from history (cryo.fold_metrics): every counted row counted exactly once,
with two folders at once, a folder killed mid-fold, a lower history id committing after a
higher one was seen, and runs deleted by retention before the fold reached them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import psycopg
import pytest

from tests.sql.conftest import claim, submit


def _count(db: psycopg.Connection, metric: str, label2: str | None = None) -> int:
    row = db.execute("SELECT coalesce(sum(n), 0) FROM cryo.metric_counts "
                     "WHERE metric = %s AND org = 'dev' AND (%s::text IS NULL OR label2 = %s)",
                     (metric, label2, label2)).fetchone()
    return int(row[0])


def _catch_up(db: psycopg.Connection) -> None:
    """Folds until the cursor is past every history row (three folds when none runs)."""
    for _ in range(10):
        db.execute("SELECT cryo.fold_metrics(5)")
        done = db.execute("SELECT f.folded_through >= (SELECT coalesce(max(id), 0) "
                          "FROM cryo.history) FROM cryo.metric_fold f").fetchone()[0]
        if done:
            return
    raise AssertionError("the fold did not catch up")


def _runs(db: psycopg.Connection, submitted: int, finished: int) -> None:
    for i in range(submitted):
        submit(db)
        if i < finished:
            run_id, token = claim(db)
            db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run_id, token))


def _primed(db: psycopg.Connection) -> None:
    """Two folds: the next one may fold everything there is now."""
    db.execute("SELECT cryo.fold_metrics()")
    db.execute("SELECT cryo.fold_metrics()")


def test_two_folders_at_once_count_each_row_once(
        session: Callable[[], psycopg.Connection]) -> None:
    db = session()
    _runs(db, 12, 7)
    _primed(db)
    a = psycopg.connect(db.info.dsn)  # a transaction left open: a fold in progress
    b = session()
    b.execute("SET statement_timeout = '5s'")  # without the lock, b would wait on a
    try:
        assert a.execute("SELECT cryo.fold_metrics(5)").fetchone()[0] == 5
        assert b.execute("SELECT cryo.fold_metrics(5)").fetchone()[0] == 0  # skipped
        a.commit()
    finally:
        a.close()
    _catch_up(b)
    assert _count(b, "runs_submitted") == 12
    assert _count(b, "runs_finished", "succeeded") == 7
    assert _count(b, "queue_wait_seconds") == 7
    assert _count(b, "claim_seconds") == 7
    assert _count(b, "queue", None) == 5  # five pending


def test_a_folder_killed_mid_fold_loses_nothing(
        session: Callable[[], psycopg.Connection]) -> None:
    db = session()
    _runs(db, 9, 4)
    _primed(db)
    a = psycopg.connect(db.info.dsn)
    pid = a.info.backend_pid
    assert a.execute("SELECT cryo.fold_metrics(6)").fetchone()[0] == 6
    assert db.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    with pytest.raises(psycopg.OperationalError):
        a.execute("SELECT 1")
    a.close()
    _catch_up(db)
    assert _count(db, "runs_submitted") == 9
    assert _count(db, "runs_finished", "succeeded") == 4


def test_a_lower_id_committing_late_is_counted(
        session: Callable[[], psycopg.Connection]) -> None:
    db, slow = session(), psycopg.connect(session().info.dsn)
    try:
        submit(slow)  # takes a history id, commits last
        submit(db)  # a higher id, committed first
        for _ in range(4):  # folds while the lower id is still in flight
            db.execute("SELECT cryo.fold_metrics()")
        assert _count(db, "runs_submitted") == 0  # waits: not folded past the gap
        slow.commit()
    finally:
        slow.close()
    _catch_up(db)
    assert _count(db, "runs_submitted") == 2


def test_runs_collected_before_the_fold_are_counted_once(db: psycopg.Connection) -> None:
    _runs(db, 2, 2)
    _catch_up(db)  # the first two are folded before they are collected
    _runs(db, 3, 3)  # these are collected before any fold
    db.execute("SELECT cryo.set_retention('dev', 'default', p_runs => interval '1 day')")
    at = dt.datetime.now(dt.UTC) + dt.timedelta(days=3)
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (at.isoformat(),))
    db.execute("SELECT * FROM cryo.tick()")
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone() == (0,)
    _catch_up(db)
    assert _count(db, "runs_submitted") == 5
    assert _count(db, "runs_finished", "succeeded") == 5


def test_the_batch_size_must_be_positive(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT cryo.fold_metrics(0)")
    assert err.value.sqlstate == "CR230"
