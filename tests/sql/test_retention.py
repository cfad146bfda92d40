"""Run collection past retention, and deleting a project with everything in it."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit

OWNED = ("journal", "history", "logs", "signals", "run_outputs", "state_cells")


def _finished_run_with_everything(db: psycopg.Connection) -> str:
    """A run that recorded a step, a log chunk, an output, a run cell and an entity cell,
    and got a signal, then succeeded."""
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.record_step(%s, %s, 0, 'step', 's', 0, NULL, '\\x01', 0)",
               (run_id, token))
    db.execute("SELECT cryo.append_log(%s, %s, '\\x02', 30)", (run_id, token))
    db.execute("SELECT cryo.set_output(%s, %s, 'url', '\\x03')", (run_id, token))
    db.execute("SELECT cryo.state_set(%s, %s, NULL, 'mine', '\\x04')", (run_id, token))
    db.execute("SELECT cryo.state_set(%s, %s, 'crawler', 'cursor', '\\x05')", (run_id, token))
    db.execute("SELECT cryo.send_signal(%s, 'late', p_sealed => '\\x06')", (run_id,))
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run_id, token))
    return run_id


def _owned(db: psycopg.Connection, run_id: str) -> dict[str, int]:
    return {t: db.execute(f"SELECT count(*) FROM cryo.{t} WHERE run_id = %s",  # noqa: S608
                          (run_id,)).fetchone()[0] for t in OWNED}


def _fake_now(db: psycopg.Connection, days: int) -> None:
    at = dt.datetime.now(dt.UTC) + dt.timedelta(days=days)
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (at.isoformat(),))


def test_terminal_runs_past_retention_go_with_all_they_own(db: psycopg.Connection) -> None:
    old = _finished_run_with_everything(db)
    assert all(_owned(db, old).values())
    live = submit(db)
    live_id, _ = claim(db)
    assert live_id == live
    db.execute("SELECT cryo.set_retention('dev', 'default', p_runs => interval '5 days')")

    _fake_now(db, 10)
    recent = _finished_run_with_everything(db)  # finished "now", 10 days on
    db.execute("SELECT * FROM cryo.tick()")

    assert db.execute("SELECT count(*) FROM cryo.runs WHERE id = %s", (old,)).fetchone() == (0,)
    assert _owned(db, old) == dict.fromkeys(OWNED, 0)
    assert status(db, recent) == ("succeeded", None)
    assert all(_owned(db, recent).values())
    assert db.execute("SELECT count(*) FROM cryo.runs WHERE id = %s", (live,)).fetchone() == (1,)
    # The entity scope outlives every run, its creator included.
    cells = db.execute("SELECT count(*) FROM cryo.state_cells WHERE entity = 'crawler'")
    assert cells.fetchone() == (1,)


def test_a_collected_parent_leaves_its_live_child_running(db: psycopg.Connection) -> None:
    parent = submit(db)
    _, token = claim(db)
    child = db.execute("SELECT cryo.spawn_run(%s, %s, NULL, 0, 'c.sh', NULL, "
                       "'\\x00', NULL, '{shell}')", (parent, token)).fetchone()[0]
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (parent, token))
    db.execute("SELECT cryo.set_retention('dev', 'default', p_runs => interval '1 day')")
    _fake_now(db, 2)
    db.execute("SELECT * FROM cryo.tick()")
    assert db.execute("SELECT count(*) FROM cryo.runs WHERE id = %s", (parent,)).fetchone() == (0,)
    assert db.execute("SELECT status, parent_run_id FROM cryo.runs WHERE id = %s",
                      (child,)).fetchone() == ("pending", None)


def test_retention_is_per_project_and_must_be_positive(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_project('dev', 'keep', 'Keep')")
    db.execute("SELECT cryo.set_retention('dev', 'default', p_runs => interval '1 day')")
    kept = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'keep', 'k.sh', NULL, "
                      "'\\x00', NULL, NULL, '{shell}')").fetchone()[0]
    db.execute("SELECT cryo.cancel_run(%s)", (kept,))
    gone = submit(db)
    db.execute("SELECT cryo.cancel_run(%s)", (gone,))
    _fake_now(db, 2)
    db.execute("SELECT * FROM cryo.tick()")
    left = {r[0] for r in db.execute("SELECT id FROM cryo.runs").fetchall()}
    assert kept in left and gone not in left
    assert db.execute("SELECT * FROM cryo.get_retention('dev', 'keep')").fetchone() == (
        dt.timedelta(days=90), dt.timedelta(days=30))
    for bad, code in (("interval '0'", "CR004"), ("NULL", "CR004")):
        with pytest.raises(psycopg.Error) as exc:
            db.execute(f"SELECT cryo.set_retention('dev', 'keep', p_runs => {bad})")  # noqa: S608
        assert exc.value.sqlstate == code
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.set_retention('dev', 'nope', p_runs => interval '1 day')")
    assert exc.value.sqlstate == "CR005"


def test_deleting_a_project_removes_everything_in_it_and_nothing_else(
        db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_project('dev', 'doomed', 'Doomed')")
    doomed = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'doomed', 'd.sh', NULL, "
                        "'\\x00', NULL, NULL, '{shell}')").fetchone()[0]
    _, token = claim(db)
    db.execute("SELECT cryo.state_set(%s, %s, NULL, 'k', '\\x01')", (doomed, token))
    db.execute("SELECT cryo.state_set(%s, %s, 'e', 'k', '\\x01')", (doomed, token))
    db.execute("SELECT cryo.publish_event('dev', 'doomed', 'ev')")
    db.execute("SELECT cryo.acquire_lease(%s, %s, NULL, 0, 'grp', false)", (doomed, token))
    db.execute("SELECT cryo.set_secret('dev', 'doomed', 'TOKEN', '\\x07')")
    survivor = _finished_run_with_everything(db)

    assert db.execute("SELECT cryo.delete_project('dev', 'doomed')").fetchone() == (1,)

    for table in ("runs", "queue", "journal", "state_cells", "events", "leases", "secrets",
                  "workflows"):
        n = db.execute(f"SELECT count(*) FROM cryo.{table} WHERE org = 'dev' "  # noqa: S608
                       "AND project = 'doomed'").fetchone()
        assert n == (0,), table
    assert db.execute("SELECT count(*) FROM cryo.projects WHERE slug = 'doomed'").fetchone() == (0,)
    assert all(_owned(db, survivor).values())
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.delete_project('dev', 'doomed')")
    assert exc.value.sqlstate == "CR005"
