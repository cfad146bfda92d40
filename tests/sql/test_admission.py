"""Concurrency admission and leases at the SQL level."""

from __future__ import annotations

import psycopg
import pytest

from tests.sql.conftest import claim, status

FAR = "2100-01-01 00:00:00+00"


def admit(db: psycopg.Connection, group: str = "deploy", policy: str | None = None,
          key: str | None = None) -> str | None:
    return db.execute(
        "SELECT run_id FROM cryo.submit_script('dev','default','a.sh',NULL,'\\x00',NULL,%s,"
        "'{shell}',NULL,NULL,%s,%s)", (key, group, policy)).fetchone()[0]


def test_queue_admits_one_at_a_time_in_submit_order(db: psycopg.Connection) -> None:
    runs = [admit(db) for _ in range(4)]
    assert [status(db, r)[0] for r in runs] == ["pending", "queued", "queued", "queued"]
    assert [db.execute("SELECT queue_position FROM cryo.get_run(%s)", (r,)).fetchone()[0]
            for r in runs] == [None, 1, 2, 3]
    for i, run_id in enumerate(runs):
        assert claim(db) is not None or i == len(runs)  # only the holder is claimable
        assert claim(db) is None
        db.execute("SELECT cryo.finish_run(r.id, q.claim_token, 'succeeded', 0) "
                   "FROM cryo.runs r JOIN cryo.queue q ON q.run_id = r.id WHERE r.id = %s",
                   (run_id,))
        if i + 1 < len(runs):
            assert status(db, runs[i + 1])[0] == "pending"
    assert db.execute("SELECT count(*) FROM cryo.leases").fetchone() == (0,)


def test_cancel_running_takes_the_hold_and_cancels_the_incumbent(db: psycopg.Connection) -> None:
    first = admit(db)
    claim(db)
    second = admit(db, policy="cancel-running")
    assert status(db, second)[0] == "pending"
    assert db.execute("SELECT cancel_requested FROM cryo.runs WHERE id=%s",
                      (first,)).fetchone() == (True,)
    assert db.execute("SELECT holder_run_id FROM cryo.lease_holders").fetchall() == [(second,)]


def test_cancel_queued_drains_the_waiters(db: psycopg.Connection) -> None:
    holder, w1, w2 = admit(db), admit(db), admit(db)
    newcomer = admit(db, policy="cancel-queued")
    assert status(db, w1)[0] == status(db, w2)[0] == "cancelled"
    assert status(db, newcomer)[0] == "queued" and status(db, holder)[0] == "pending"
    assert db.execute("SELECT run_id, position FROM cryo.lease_queues").fetchall() == [
        (newcomer, 1)]


def test_skip_creates_no_run(db: psycopg.Connection) -> None:
    admit(db)
    assert admit(db, policy="skip") is None
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone() == (1,)
    assert admit(db, group="other", policy="skip") is not None  # a free group admits


def test_the_queue_limit_rejects_one_more(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.set_admission_queue_limit('dev','default',3)")
    for _ in range(4):
        admit(db)
    with pytest.raises(psycopg.Error) as exc:
        admit(db)
    assert exc.value.sqlstate == "CR030"
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone() == (4,)  # nothing half-written


def test_cancelling_a_queued_run_removes_it_from_the_queue(db: psycopg.Connection) -> None:
    admit(db)
    queued = admit(db)
    assert db.execute("SELECT cryo.cancel_run(%s)", (queued,)).fetchone() == ("cancelled",)
    assert db.execute("SELECT count(*) FROM cryo.lease_waiters").fetchone() == (0,)


def test_per_record_groups_are_independent(db: psycopg.Connection) -> None:
    a, b = admit(db, group="record-1"), admit(db, group="record-2")
    assert status(db, a)[0] == status(db, b)[0] == "pending"


def test_idempotent_submit_under_a_group_returns_the_first(db: psycopg.Connection) -> None:
    first = admit(db, key="k")
    assert admit(db, key="k", policy="skip") == first


def test_reconcile_promotes_past_a_dead_holder(db: psycopg.Connection) -> None:
    holder, waiter = admit(db), admit(db)
    # A holder that ended without its hook (say, a manual fix-up) leaves a stale lease.
    db.execute("ALTER TABLE cryo.runs DISABLE TRIGGER USER")
    db.execute("UPDATE cryo.runs SET status = 'failed' WHERE id = %s", (holder,))
    db.execute("DELETE FROM cryo.queue WHERE run_id = %s", (holder,))
    db.execute("ALTER TABLE cryo.runs ENABLE TRIGGER USER")
    db.execute("SELECT * FROM cryo.tick()")
    assert status(db, waiter)[0] == "pending"


def _lock(db: psycopg.Connection, run_id: str, token: object, group: str = "tally",
          scoped: bool = True, ordinal: int = 0) -> bool:
    return db.execute("SELECT cryo.acquire_lease(%s, %s, NULL, %s, %s, %s, %s)",
                      (run_id, token, ordinal, group, scoped,
                       f"lock/{group}/{ordinal}")).fetchone()[0]


def test_script_locks_are_fifo_and_contend_with_admission(db: psycopg.Connection) -> None:
    holder = admit(db, group="tally")  # submit-level admission holds the group
    held = claim(db)
    a = db.execute("SELECT run_id FROM "
                   "cryo.submit_script('dev','default','b.sh',NULL,'\\x00')").fetchone()[0]
    got = claim(db)
    assert held[0] == holder and got[0] == a
    assert _lock(db, a, got[1]) is False
    assert status(db, a) == ("parked", "awaiting-lease")
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", held)
    assert status(db, a)[0] == "pending"  # granted, woken
    _, token = claim(db)
    assert _lock(db, a, token) is True  # replay: recorded
    with pytest.raises(psycopg.Error) as exc:
        _lock(db, a, token, ordinal=1)
    assert exc.value.sqlstate == "CR031"  # it already holds the group
    release = "SELECT cryo.release_lease(%s, %s, 'tally')"
    assert db.execute(release, (a, token)).fetchone() == (True,)
    assert db.execute("SELECT cryo.release_lease(%s, %s, 'tally')",
                      (a, token)).fetchone() == (False,)


def test_a_lease_outlives_a_lapsed_claim_and_goes_when_the_run_ends(db: psycopg.Connection) -> None:
    run_id = db.execute("SELECT run_id FROM "
                        "cryo.submit_script('dev','default','c.sh',NULL,'\\x00')").fetchone()[0]
    _, token = claim(db, lease=5)
    assert _lock(db, run_id, token, scoped=False) is True
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAR,))
    db.execute("SELECT * FROM cryo.tick()")  # the agent died: the claim lapses...
    # ...not the lease
    assert db.execute("SELECT holder_run_id FROM cryo.leases").fetchall() == [(run_id,)]
    _, token2 = claim(db)
    db.execute("SELECT cryo.finish_run(%s, %s, 'failed', 1)", (run_id, token2))
    assert db.execute("SELECT count(*) FROM cryo.leases").fetchone() == (0,)


def test_bad_policy_and_group_names_are_cr004(db: psycopg.Connection) -> None:
    for group, policy in (("g", "sometimes"), ("", "queue"), ("x" * 300, None)):
        with pytest.raises(psycopg.Error) as exc:
            admit(db, group=group, policy=policy)
        assert exc.value.sqlstate == "CR004"
