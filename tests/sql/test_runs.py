"""submit, idempotency, cancel, and the application's transactional submit."""

from __future__ import annotations

import re

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit


def test_submit_creates_a_pending_run_with_a_qualified_id(db: psycopg.Connection) -> None:
    run_id = submit(db)
    later = submit(db)
    # run-<12 hex ms><8 random hex>: the time part follows submit order.
    assert re.fullmatch(r"dev:default:run-[0-9a-f]{20}", run_id), run_id
    assert run_id[16:28] <= later[16:28] and run_id != later
    assert status(db, run_id) == ("pending", None)
    assert db.execute("SELECT state FROM cryo.queue WHERE run_id = %s",
                      (run_id,)).fetchone() == ("pending",)
    kinds = [r[0] for r in db.execute("SELECT kind FROM cryo.history WHERE run_id = %s", (run_id,))]
    assert kinds == ["submitted"]


def test_idempotency_key_returns_the_first_run_and_creates_nothing(db: psycopg.Connection) -> None:
    sql = "SELECT * FROM cryo.submit_script('dev','default','a.sh',NULL,'\\x00',NULL,'k1')"
    first = db.execute(sql).fetchone()
    again = db.execute(sql).fetchone()
    assert first[1] is True and again == (first[0], False)
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM cryo.queue").fetchone()[0] == 1
    other = submit(db, key="k2")
    assert other != first[0]


def test_submit_to_unknown_project_raises_cr005(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT * FROM cryo.submit_script('dev','nope','a.sh',NULL,'\\x00')")
    assert exc.value.sqlstate == "CR005"
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 0


def test_cancel_pending_ends_at_once_and_finished_is_refused(db: psycopg.Connection) -> None:
    run_id = submit(db)
    assert db.execute("SELECT cryo.cancel_run(%s)", (run_id,)).fetchone() == ("cancelled",)
    assert status(db, run_id) == ("cancelled", None)
    assert db.execute("SELECT count(*) FROM cryo.queue").fetchone()[0] == 0
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    assert exc.value.sqlstate == "CR006"
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.cancel_run('dev:default:run-nope')")
    assert exc.value.sqlstate == "CR003"


def test_cancel_running_flags_it_and_the_agent_learns_on_renew(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    assert db.execute("SELECT cryo.renew_claim(%s, %s, 30)", (run_id, token)).fetchone() == (False,)
    assert db.execute("SELECT cryo.cancel_run(%s)", (run_id,)).fetchone() == ("cancelling",)
    assert status(db, run_id) == ("running", None)
    assert db.execute("SELECT cryo.renew_claim(%s, %s, 30)", (run_id, token)).fetchone() == (True,)
    db.execute("SELECT cryo.finish_run(%s, %s, 'cancelled', NULL, 'cancelled')", (run_id, token))
    assert status(db, run_id) == ("cancelled", None)


def test_cancelled_run_whose_agent_vanished_ends_on_tick(db: psycopg.Connection) -> None:
    run_id = submit(db)
    claim(db, lease=5)
    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", ("2100-01-01 00:00:00+00",))
    db.execute("SELECT * FROM cryo.tick()")
    assert status(db, run_id) == ("cancelled", None)


def _put_workflow(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_workflow('dev','default','nightly','nightly.sh',NULL,'\\x01')")


def test_application_submit_commits_with_its_transaction(session) -> None:  # type: ignore[no-untyped-def]
    app, other = session(), session()
    _put_workflow(app)
    with app.transaction():
        run_id = app.execute("SELECT cryo.submit_run('dev','default','nightly', %s::jsonb)",
                             ('{"n": 1}',)).fetchone()[0]
        # Not visible to anyone until the application's transaction commits.
        assert other.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 0
    row = other.execute("SELECT status, workflow, input_clear, input FROM cryo.runs WHERE id = %s",
                        (run_id,)).fetchone()
    assert row == ("pending", "nightly", {"n": 1}, None)


def test_application_submit_rolls_back_with_its_transaction(db: psycopg.Connection) -> None:
    _put_workflow(db)

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        with db.transaction():
            db.execute("SELECT cryo.submit_run('dev','default','nightly')")
            raise Abort
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM cryo.queue").fetchone()[0] == 0


def test_application_submit_of_unknown_workflow_is_cr005(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.submit_run('dev','default','missing')")
    assert exc.value.sqlstate == "CR005"


def test_claim_moves_clear_input_to_sealed_once(db: psycopg.Connection) -> None:
    _put_workflow(db)
    run_id = db.execute(
        "SELECT cryo.submit_run('dev','default','nightly','{\"a\":1}')").fetchone()[0]
    got = db.execute("SELECT input_clear, claim_token FROM cryo.claim_job('dev','a',%s,30)",
                     (["shell"],)).fetchone()
    assert got[0] == {"a": 1}
    db.execute("SELECT cryo.seal_run_input(%s, %s, '\\xabcd')", (run_id, got[1]))
    assert db.execute("SELECT input_clear, input FROM cryo.runs WHERE id=%s",
                      (run_id,)).fetchone() == (None, b"\xab\xcd")


@pytest.mark.parametrize(("outcome", "exit_code", "reported"), [
    ("succeeded", 0, 0), ("failed", 3, 3), ("failed", 0, 1), ("failed", None, 1),
    ("failed", 300, 1), ("failed", -2, 1), ("cancelled", None, 130),
])
def test_a_finished_run_reports_its_exit_code_by_one_rule(
        db: psycopg.Connection, outcome: str, exit_code: int | None, reported: int) -> None:
    """get_run's outcome_code is cryo._outcome_code, the code a collecting parent gets and
    the CLI exits with."""
    run_id = submit(db)
    if outcome == "cancelled":
        db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    else:
        _, token = claim(db)
        db.execute("SELECT cryo.finish_run(%s, %s, %s, %s)", (run_id, token, outcome, exit_code))
    assert db.execute("SELECT outcome_code FROM cryo.get_run(%s)", (run_id,)).fetchone() == (
        reported,)


def test_a_live_run_has_no_outcome_code(db: psycopg.Connection) -> None:
    run_id = submit(db)
    assert db.execute("SELECT outcome_code FROM cryo.get_run(%s)", (run_id,)).fetchone() == (None,)
