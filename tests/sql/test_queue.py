"""Claims, leases, tokens, parking and the tick."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit

FAR_FUTURE = "2100-01-01 00:00:00+00"


def test_claim_hands_out_oldest_first_with_a_fresh_token(db: psycopg.Connection) -> None:
    first, second = submit(db), submit(db)
    got1, got2 = claim(db), claim(db)
    assert got1[0] == first and got2[0] == second
    assert got1[1] != got2[1]
    assert claim(db) is None
    assert status(db, first) == ("running", None)
    assert db.execute("SELECT attempt FROM cryo.runs WHERE id=%s", (first,)).fetchone() == (1,)


def test_claim_respects_capabilities(db: psycopg.Connection) -> None:
    run_id = submit(db, name="x.py", caps=["polyglot"])
    assert claim(db, caps=["shell"]) is None
    assert claim(db, caps=["shell", "polyglot"])[0] == run_id


def test_two_sessions_racing_one_claim_exactly_one_wins(session) -> None:  # type: ignore[no-untyped-def]
    a, b = session(), session()
    run_id = submit(a)
    with a.transaction():
        won = claim(a)
        # b runs while a still holds the row lock: SKIP LOCKED means it gets nothing.
        lost = claim(b)
    assert won[0] == run_id and lost is None
    assert claim(b) is None


def test_concurrent_claimers_never_share_a_run(session) -> None:  # type: ignore[no-untyped-def]
    setup = session()
    runs = {submit(setup) for _ in range(60)}
    conns = [session() for _ in range(4)]
    claimed: list[list[str]] = [[] for _ in conns]

    def worker(i: int) -> None:
        while (got := claim(conns[i], agent=f"a{i}")) is not None:
            claimed[i].append(got[0])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [r for per in claimed for r in per]
    assert sorted(flat) == sorted(runs)  # each run exactly once


def test_stale_token_is_refused_with_cr002(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db, lease=5)
    for sql in ("SELECT cryo.renew_claim(%s, %s, 30)",
                "SELECT cryo.finish_run(%s, %s, 'succeeded')",
                "SELECT cryo.park_sleep(%s, %s, NULL, 0, 5)"):
        with pytest.raises(psycopg.Error) as exc:
            db.execute(sql, (run_id, uuid.uuid4()))
        assert exc.value.sqlstate == "CR002"
    # The lease lapses, the sweep re-pends, a new claim gets a new token: the old is dead.
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAR_FUTURE,))
    assert db.execute("SELECT * FROM cryo.tick()").fetchone() == (1, 0)
    assert status(db, run_id) == ("pending", None)
    _, token2 = claim(db)
    assert token2 != token
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded')", (run_id, token))
    assert exc.value.sqlstate == "CR002"
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run_id, token2))
    assert status(db, run_id) == ("succeeded", None)
    assert db.execute("SELECT attempt FROM cryo.runs WHERE id=%s", (run_id,)).fetchone() == (2,)
    # A used token cannot be used again either.
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded')", (run_id, token2))
    assert exc.value.sqlstate == "CR002"


def test_renew_extends_the_lease_so_tick_leaves_it(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db, lease=5)
    _at(db, 4)  # still inside the first 5 s
    db.execute("SELECT cryo.renew_claim(%s, %s, 30)", (run_id, token))
    _at(db, 20)  # past the first expiry, inside the renewed one
    assert db.execute("SELECT * FROM cryo.tick()").fetchone() == (0, 0)
    assert status(db, run_id) == ("running", None)


def _at(db: psycopg.Connection, seconds: float) -> None:
    """Moves the engine clock to `seconds` after the real now."""
    db.execute("SELECT set_config('cryo.fake_now', (now() + make_interval(secs => %s))::text,"
               " false)", (seconds,))


def test_an_expired_claim_is_refused_before_tick_re_pends_it(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db, lease=5)
    _at(db, 6)
    for sql in ("SELECT cryo.renew_claim(%s, %s, 30)",
                "SELECT cryo.finish_run(%s, %s, 'succeeded')"):
        with pytest.raises(psycopg.Error) as exc:
            db.execute(sql, (run_id, token))
        assert exc.value.sqlstate == "CR002"
    assert status(db, run_id) == ("running", None)  # tick has not run: only the check knows


def test_release_hands_the_run_back_now_and_voids_the_token(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))
    assert status(db, run_id) == ("pending", None)
    kinds = [r[0] for r in db.execute("SELECT kind FROM cryo.history WHERE run_id = %s "
                                      "ORDER BY id", (run_id,)).fetchall()]
    assert kinds[-1] == "released"
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))
    assert exc.value.sqlstate == "CR002"
    again, token2 = claim(db)
    assert again == run_id and token2 != token
    # A run asked to cancel while claimed ends cancelled instead of going back.
    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token2))
    assert status(db, run_id)[0] == "cancelled"


def test_sleep_parks_frees_the_claim_and_tick_wakes_it_when_due(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.record_step(%s,%s,0,'step','count',0,NULL,'\\x01',0)",
               (run_id, token))
    wake = db.execute("SELECT cryo.park_sleep(%s, %s, NULL, 0, 60)",
                      (run_id, token)).fetchone()[0]
    assert status(db, run_id) == ("parked", "sleeping")
    parked = db.execute("SELECT reason, waiting_on, wake_at FROM cryo.parked_runs").fetchall()
    assert parked == [("sleeping", "sleep//0", wake)]
    assert claim(db) is None  # a parked run is not claimable
    assert db.execute("SELECT * FROM cryo.tick()").fetchone() == (0, 0)
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAR_FUTURE,))
    assert db.execute("SELECT * FROM cryo.tick()").fetchone() == (0, 1)
    assert status(db, run_id) == ("pending", None)
    _, token2 = claim(db)
    memos = db.execute("SELECT seq, path, status FROM cryo.read_journal(%s, %s)",
                       (run_id, token2)).fetchall()
    assert memos == [(0, "step/count/0", "done"), (1, "sleep//0", "done")]


def test_a_pinned_sleep_deadline_survives_a_second_park(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    first = db.execute("SELECT cryo.park_sleep(%s, %s, NULL, 0, 60)",
                       (run_id, token)).fetchone()[0]
    # Simulate a lapsed-then-reclaimed pass asking again before the wake.
    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    assert status(db, run_id) == ("cancelled", None)
    assert db.execute("SELECT due_at FROM cryo.journal WHERE run_id=%s",
                      (run_id,)).fetchone() == (first,)


def test_bad_sleep_duration_is_cr004_and_changes_nothing(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.park_sleep(%s, %s, NULL, 0, -1)", (run_id, token))
    assert exc.value.sqlstate == "CR004"
    assert status(db, run_id) == ("running", None)
    assert db.execute("SELECT count(*) FROM cryo.journal").fetchone() == (0,)


def test_finish_records_outcome_and_drops_the_queue_row(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.finish_run(%s, %s, 'failed', 3, 'exit 3')", (run_id, token))
    assert db.execute("SELECT status, exit_code, error FROM cryo.runs WHERE id=%s",
                      (run_id,)).fetchone() == ("failed", 3, "exit 3")
    assert db.execute("SELECT count(*) FROM cryo.queue").fetchone() == (0,)
    with pytest.raises(psycopg.Error) as exc:
        run2 = submit(db)
        _, token2 = claim(db)
        db.execute("SELECT cryo.finish_run(%s, %s, 'exploded')", (run2, token2))
    assert exc.value.sqlstate == "CR004"


def test_claim_and_wake_use_partial_indexes(db: psycopg.Connection) -> None:
    db.execute("SET enable_seqscan = off")
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT run_id FROM cryo.queue WHERE org='dev' AND state='pending' "
        "ORDER BY enqueued_at LIMIT 1"))
    assert "queue_pending" in plan
    plan = "\n".join(r[0] for r in db.execute(
        "EXPLAIN SELECT run_id FROM cryo.queue WHERE state='parked' AND wake_at <= now() "
        "ORDER BY wake_at LIMIT 1000"))
    assert "queue_parked_wake" in plan


def test_only_a_followed_run_notifies_its_changes(session) -> None:  # type: ignore[no-untyped-def]
    db, listener = session(), session()
    listener.execute("LISTEN cryo_run")
    quiet, followed = submit(db), submit(db)
    db.execute("SELECT cryo.watch_run(%s)", (followed,))
    for run_id in (quiet, followed):
        got = claim(db)
        assert got[0] == run_id
        db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", got)
    heard = [n.payload for n in listener.notifies(timeout=0.5, stop_after=5)]
    assert heard == [followed]


def test_a_lapsed_claim_requeues_the_run_in_its_old_place(db: psycopg.Connection) -> None:
    # The first run is claimed, then later runs arrive; its claim lapses (an agent or
    # the database was away). The sweep puts it back ahead of everything that came after
    # it, not behind them.
    first = submit(db)
    _, token = claim(db, lease=5)
    later = [submit(db) for _ in range(3)]
    _at(db, 60)
    assert db.execute("SELECT * FROM cryo.tick()").fetchone() == (1, 0)
    waiting = [r[0] for r in db.execute("SELECT run_id FROM cryo.pending_runs").fetchall()]
    assert waiting == [first, *later]
    again, token2 = claim(db)
    assert again == first and token2 != token


def test_a_claim_and_a_finish_leave_the_runs_indexes_alone(db: psycopg.Connection) -> None:
    # Neither touches an indexed column (nor one an index's predicate names), so both
    # are HOT updates: no new entry in every index of cryo.runs per job (V0018).
    run_id = submit(db)
    with db.transaction():
        def counts() -> tuple[int, int]:
            return db.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                              " WHERE relid = 'cryo.runs'::regclass").fetchone()
        before = counts()
        _, token = claim(db)
        db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run_id, token))
        upd, hot = (a - b for a, b in zip(counts(), before, strict=True))
    assert status(db, run_id) == ("succeeded", None)
    assert upd >= 2 and hot == upd
