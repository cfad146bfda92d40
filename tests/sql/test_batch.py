"""Batched claims and completions: claim_jobs and finish_runs."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit

CAPS = ["shell", "polyglot"]


def claim_many(db: psycopg.Connection, n: int, agent: str = "a1") -> list[tuple[str, uuid.UUID]]:
    rows = db.execute("SELECT run_id, claim_token FROM cryo.claim_jobs('dev', %s, %s, 30, %s)",
                      (agent, CAPS, n)).fetchall()
    return [(r[0], r[1]) for r in rows]


def finish_many(db: psycopg.Connection, got: list[tuple[str, uuid.UUID]],
                outcome: str = "succeeded") -> dict[str, bool]:
    rows = db.execute("SELECT * FROM cryo.finish_runs(%s, %s, %s, NULL, NULL)",
                      ([g[0] for g in got], [g[1] for g in got], [outcome] * len(got))).fetchall()
    return dict(rows)


def test_claim_jobs_takes_the_oldest_with_distinct_tokens(db: psycopg.Connection) -> None:
    runs = [submit(db) for _ in range(5)]
    got = claim_many(db, 3)
    assert sorted(g[0] for g in got) == sorted(runs[:3])
    assert len({g[1] for g in got}) == 3
    assert all(status(db, r) == ("running", None) for r, _ in got)
    attempt = db.execute("SELECT attempt FROM cryo.runs WHERE id = %s", (got[0][0],)).fetchone()
    assert attempt == (1,)
    assert sorted(g[0] for g in claim_many(db, 10)) == sorted(runs[3:])
    assert claim_many(db, 10) == []


def test_claim_jobs_respects_capabilities(db: psycopg.Connection) -> None:
    submit(db, name="x.py", caps=["polyglot"])
    rows = db.execute("SELECT run_id FROM cryo.claim_jobs('dev', 'a', '{shell}', 30, 5)").fetchall()
    assert rows == []


def test_claim_jobs_refuses_a_bad_limit(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as info:
        claim_many(db, 0)
    assert info.value.sqlstate == "CR004"


def test_batched_claimers_never_share_a_run(session) -> None:  # type: ignore[no-untyped-def]
    setup = session()
    runs = {submit(setup) for _ in range(80)}
    conns = [session() for _ in range(4)]
    claimed: list[list[str]] = [[] for _ in conns]

    def worker(i: int) -> None:
        while got := claim_many(conns[i], 3, agent=f"a{i}"):
            claimed[i].extend(r for r, _ in got)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(conns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [r for per in claimed for r in per]
    assert sorted(flat) == sorted(runs)


def test_finish_runs_ends_live_claims_and_skips_stale_ones(db: psycopg.Connection) -> None:
    for _ in range(3):
        submit(db)
    got = claim_many(db, 3)
    stale = (got[2][0], uuid.uuid4())
    answer = finish_many(db, [got[0], got[1], stale])
    assert answer == {got[0][0]: True, got[1][0]: True, got[2][0]: False}
    assert status(db, got[0][0]) == ("succeeded", None)
    assert status(db, got[2][0]) == ("running", None)
    # Finished once: the queue row is gone, one terminal history event, and a repeat is stale.
    assert db.execute("SELECT count(*) FROM cryo.queue WHERE run_id = %s",
                      (got[0][0],)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cryo.history WHERE run_id = %s AND kind = 'succeeded'",
                      (got[0][0],)).fetchone() == (1,)
    assert finish_many(db, [got[0]]) == {got[0][0]: False}


def test_finish_runs_finishes_a_repeated_run_once(db: psycopg.Connection) -> None:
    submit(db)
    got = claim_many(db, 1)
    assert finish_many(db, [got[0], got[0]]) == {got[0][0]: True}
    assert db.execute("SELECT count(*) FROM cryo.history WHERE run_id = %s AND kind = 'succeeded'",
                      (got[0][0],)).fetchone() == (1,)


def test_finish_runs_records_exit_codes_and_errors(db: psycopg.Connection) -> None:
    submit(db)
    submit(db)
    got = claim_many(db, 2)
    db.execute("SELECT * FROM cryo.finish_runs(%s, %s, %s, %s, %s)",
               ([g[0] for g in got], [g[1] for g in got], ["failed", "succeeded"], [3, 0],
                ["boom", None]))
    rows = dict((r[0], r[1:]) for r in db.execute(
        "SELECT id, status, exit_code, error FROM cryo.runs WHERE id = ANY(%s)",
        ([g[0] for g in got],)).fetchall())
    assert rows[got[0][0]] == ("failed", 3, "boom")
    assert rows[got[1][0]] == ("succeeded", 0, None)


@pytest.mark.parametrize("outcomes", [["succeeded"], ["succeeded", "bogus"]])
def test_finish_runs_refuses_bad_arguments_and_changes_nothing(
        db: psycopg.Connection, outcomes: list[str]) -> None:
    submit(db)
    submit(db)
    got = claim_many(db, 2)
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT * FROM cryo.finish_runs(%s, %s, %s, NULL, NULL)",
                   ([g[0] for g in got], [g[1] for g in got], outcomes))
    assert info.value.sqlstate == "CR004"
    assert all(status(db, r) == ("running", None) for r, _ in got)


def test_a_batch_claim_works_with_the_single_finish(db: psycopg.Connection) -> None:
    submit(db)
    (run_id, token), = claim_many(db, 1)
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded')", (run_id, token))
    assert status(db, run_id) == ("succeeded", None)
    assert claim(db) is None


def _finish_and_claim(db: psycopg.Connection, got: list[tuple[str, uuid.UUID]],
                      asks: list[str | None], tokens: list[str | None] | None = None,
                      ) -> tuple[dict[str, bool], list[tuple[str, str, str | None]]]:
    rows = db.execute(
        "SELECT finished_run_id, finished, agent_id, run_id, agent_token"
        "  FROM cryo.finish_and_claim_grants(%s, %s, %s, NULL, NULL, NULL, 'dev', %s, %s, 30,"
        "                                    %s)",
        ([g[0] for g in got], [g[1] for g in got], ["succeeded"] * len(got), asks, CAPS,
         tokens)).fetchall()
    done = {r[0]: r[1] for r in rows if r[0] is not None}
    grants = [(r[2], r[3], r[4]) for r in rows if r[0] is None]
    return done, grants


def test_finish_and_claim_ends_runs_and_claims_for_the_agents_that_asked(
        db: psycopg.Connection) -> None:
    runs = [submit(db) for _ in range(6)]
    got = claim_many(db, 3)
    stale = (got[2][0], uuid.uuid4())
    done, grants = _finish_and_claim(db, [got[0], got[1], stale], ["a1", None, "a3"])
    # The stale finish ends nothing and brings its agent nothing; the run that asked
    # nothing brings nothing; a1 gets the oldest pending run, claimed for it.
    assert done == {got[0][0]: True, got[1][0]: True, got[2][0]: False}
    assert grants == [("a1", runs[3], None)]
    assert status(db, runs[3]) == ("running", None)
    assert db.execute("SELECT agent_id FROM cryo.queue WHERE run_id = %s",
                      (runs[3],)).fetchone() == ("a1",)
    assert [status(db, r)[0] for r in runs] == ["succeeded", "succeeded", "running", "running",
                                                "pending", "pending"]


def test_finish_and_claim_binds_each_claim_to_its_agent_token(db: psycopg.Connection) -> None:
    first, second, third = submit(db), submit(db), submit(db)
    got = claim_many(db, 2)
    done, grants = _finish_and_claim(db, got, ["a1", "a2"], ["tok-1", "tok-2"])
    assert done == {first: True, second: True}
    assert grants == [("a1", third, "tok-1")]
    bound = db.execute("SELECT claim_agent_token FROM cryo.queue WHERE run_id = %s",
                       (third,)).fetchone()
    assert bound == ("tok-1",)


def test_finish_and_claim_refuses_asks_not_one_per_run(db: psycopg.Connection) -> None:
    submit(db)
    got = claim_many(db, 1)
    with pytest.raises(psycopg.Error) as exc:
        _finish_and_claim(db, got, ["a1", "a2"])
    assert exc.value.sqlstate == "CR004"
    assert status(db, got[0][0]) == ("running", None)  # nothing ended
