"""The agent path's two calls: cryo.claim_grants (a claim per waiting agent, with what
each grant needs) and cryo.finish_runs as the server's group commit uses it (logs,
retries, a stale finish among live ones)."""

from __future__ import annotations

import base64
import uuid

import psycopg
import pytest

from tests.sql.conftest import claim, status, submit

CAPS = ["shell", "polyglot"]


def grants(db: psycopg.Connection, agents: list[str], caps: list[str] | None = None,
           seconds: float = 30) -> list[dict[str, object]]:
    cur = db.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM cryo.claim_grants('dev', %s, %s, %s)",
                       (agents, caps or CAPS, seconds)).fetchall()


def finish(db: psycopg.Connection, items: list[tuple[str, object, str, int | None, bytes | None]]
           ) -> dict[str, bool]:
    return dict(db.execute(
        "SELECT * FROM cryo.finish_runs(%s, %s, %s, %s, NULL, %s)",
        ([i[0] for i in items], [i[1] for i in items], [i[2] for i in items],
         [i[3] for i in items], [i[4] for i in items])).fetchall())


def test_each_waiting_agent_gets_its_own_run_oldest_first(db: psycopg.Connection) -> None:
    runs = [submit(db) for _ in range(3)]
    got = grants(db, ["a1", "a2", "a3", "a4"])
    assert [g["run_id"] for g in got] == runs  # fewer rows than agents: only 3 pending
    assert sorted(g["agent_id"] for g in got) == ["a1", "a2", "a3"]
    assert len({g["claim_token"] for g in got}) == 3
    for g in got:
        assert status(db, g["run_id"]) == ("running", None)
        assert db.execute("SELECT agent_id, claim_token FROM cryo.queue WHERE run_id = %s",
                          (g["run_id"],)).fetchone() == (g["agent_id"], g["claim_token"])
        assert g["source"] == b"sealed-source" and g["attempt"] == 1
        assert g["journal"] == [] and g["secrets"] == []
    assert grants(db, ["a4"]) == []
    one = submit(db)
    assert [(g["agent_id"], g["run_id"]) for g in grants(db, ["solo"])] == [("solo", one)]


def test_a_grant_carries_the_memos_and_the_secrets_of_its_claim(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.set_secret('dev', 'default', 'API_KEY', 'sealed-key')")
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.record_step(%s, %s, 0, 'step', 'build', 0, NULL, '\\x0102', 3)",
               (run_id, token))
    db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))
    [g] = grants(db, ["a2"])
    assert g["run_id"] == run_id and g["attempt"] == 2
    [memo] = g["journal"]
    assert (memo["path"], memo["family"], memo["name"], memo["ordinal"], memo["status"],
            memo["exit_code"]) == ("step/build/0", "step", "build", 0, "done", 3)
    assert base64.b64decode(memo["result"]) == b"\x01\x02"
    assert g["secrets"] == [{"name": "API_KEY", "withheld": False,
                             "value": base64.b64encode(b"sealed-key").decode()}]
    # The same memos cryo.read_journal gives a live claim, in the same order.
    assert [m["seq"] for m in g["journal"]] == [r[0] for r in db.execute(
        "SELECT seq FROM cryo.read_journal(%s, %s)", (run_id, g["claim_token"]))]
    assert g["untrusted"] is False
    # An untrusted run goes only to an agent that confines its jobs; its grant says so,
    # names the secrets and carries none of their values.
    db.execute("SELECT cryo.submit_script('dev', 'default', 'u.sh', NULL, 's', "
               "p_untrusted => true)")
    assert grants(db, ["a3"]) == []
    [u] = grants(db, ["a3"], [*CAPS, "isolated"])
    assert u["untrusted"] is True
    assert u["secrets"] == [{"name": "API_KEY", "value": None, "withheld": True}]


def test_claim_grants_refuses_a_bad_agent_list(db: psycopg.Connection) -> None:
    submit(db)
    for agents in ([], ["a", None], ["a"] * 1001):
        with pytest.raises(psycopg.Error) as exc:
            grants(db, agents)
        assert exc.value.sqlstate == "CR004"
    assert grants(db, ["a"], caps=["polyglot"]) == []  # it needs shell


def test_a_claim_that_expired_is_refused_and_its_run_claimed_afresh(
        db: psycopg.Connection) -> None:
    run_id = submit(db)
    [old] = grants(db, ["a1"], seconds=30)
    db.execute("SELECT set_config('cryo.fake_now', (now() + interval '31 s')::text, false)")
    # Expired: no call of the old claim is taken, before tick() or after it.
    assert finish(db, [(run_id, old["claim_token"], "succeeded", 0, None)]) == {run_id: False}
    db.execute("SELECT * FROM cryo.tick()")
    [new] = grants(db, ["a2"])
    assert new["run_id"] == run_id and new["attempt"] == 2
    assert new["claim_token"] != old["claim_token"]
    assert finish(db, [(run_id, old["claim_token"], "succeeded", 0, None)]) == {run_id: False}
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT * FROM cryo.read_journal(%s, %s)", (run_id, old["claim_token"]))
    assert exc.value.sqlstate == "CR002"
    assert finish(db, [(run_id, new["claim_token"], "succeeded", 0, None)]) == {run_id: True}
    assert status(db, run_id) == ("succeeded", None)


def test_a_finish_batch_stores_logs_ends_the_live_and_skips_the_stale(
        db: psycopg.Connection) -> None:
    runs = [submit(db) for _ in range(3)]
    got = grants(db, ["a1", "a2", "a3"])
    by_run = {g["run_id"]: g["claim_token"] for g in got}
    done = finish(db, [(runs[0], by_run[runs[0]], "succeeded", 0, b"last words"),
                       (runs[1], uuid.uuid4(), "succeeded", 0, b"not mine"),
                       (runs[2], by_run[runs[2]], "failed", 2, None)])
    assert done == {runs[0]: True, runs[1]: False, runs[2]: True}
    assert status(db, runs[0]) == ("succeeded", None)
    assert status(db, runs[1]) == ("running", None)
    assert status(db, runs[2]) == ("failed", None)
    logs = db.execute("SELECT run_id, data FROM cryo.logs ORDER BY run_id").fetchall()
    assert logs == [(runs[0], b"last words")]


def test_a_failed_activity_in_a_finish_batch_is_retried(db: psycopg.Connection) -> None:
    parent = submit(db)
    _, ptoken = claim(db)
    child = db.execute(
        "SELECT cryo.submit_activity(%s, %s, NULL, 'build', '\\x00', '{shell}', 1, 0, NULL,"
        " 'activity/build/0')", (parent, ptoken)).fetchone()[0]
    [g] = grants(db, ["a1"])
    assert g["run_id"] == child
    assert finish(db, [(child, g["claim_token"], "failed", 1, None)]) == {child: True}
    assert status(db, child) == ("parked", "retry-backoff")


def test_record_steps_records_each_and_refuses_one_alone(db: psycopg.Connection) -> None:
    runs = [submit(db) for _ in range(2)]
    got = {g["run_id"]: g["claim_token"] for g in grants(db, ["a1", "a2"])}
    items = [(runs[1], got[runs[1]], 0, "step", "b", 0, None, b"\x02", 0, None),
             (runs[0], uuid.uuid4(), 0, "step", "x", 0, None, b"\x00", 0, None),
             (runs[0], got[runs[0]], 0, "step", "a", 0, "lbl", b"\x01", 7, "step/a/0"),
             (runs[0], got[runs[0]], 1, "step", "c", 0, None, b"\x03", 0, "step/WRONG/0")]
    rows = db.execute(
        "SELECT n, seq, error_code FROM cryo.record_steps(%s::text[], %s::uuid[], %s::int[],"
        " %s::text[], %s::text[], %s::int[], %s::text[], %s::bytea[], %s::int[], %s::text[])",
        [list(c) for c in zip(*items, strict=True)]).fetchall()
    assert sorted(rows) == [(1, 0, None), (2, None, "CR002"), (3, 0, None), (4, None, "CR009")]
    memos = db.execute("SELECT run_id, path, result, exit_code FROM cryo.journal"
                       " ORDER BY run_id, seq").fetchall()
    assert memos == [(runs[0], "step/a/0", b"\x01", 7), (runs[1], "step/b/0", b"\x02", 0)]
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT * FROM cryo.record_steps('{a}', '{}', '{}', '{}', '{}', '{}', '{}',"
                   " '{}', '{}', '{}')")
    assert exc.value.sqlstate == "CR004"
