"""One mover per log (issue 36), in SQL: a claim leases a finished run's log to one
replica (runs locked SKIP LOCKED, so two claiming at once take different logs), a lapsed
lease is taken over with the dead attempt's key queued for deletion, and only the live
lease's attempt may record the move (with its verified size and hash) or cut the log."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest

from tests.server.conftest import Server

CLAIM = "SELECT * FROM cryo.claim_log_moves(%s, 'logs/', '0 seconds', '60 seconds', %s)"
SHA = hashlib.sha256(b"object").digest()


async def _finished_log(srv: Server, *pieces: bytes) -> str:
    grant = await srv.claim_run(await srv.submit())
    for piece in pieces or (b"hello\n",):
        await srv.log(grant, piece)
    await srv.finish(grant)
    return str(grant["run_id"])


def _db(srv: Server, **kw: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(srv.dsn, autocommit=True, **kw)


def _later(db: psycopg.Connection[Any], seconds: float) -> None:
    db.execute("SELECT set_config('cryo.fake_now', (now() + make_interval(secs => %s))::text,"
               " false)", (seconds,))


def _sqlstate(call: Any) -> str:
    with pytest.raises(psycopg.Error) as caught:
        call()
    return str(caught.value.sqlstate)


async def test_two_replicas_claiming_at_once_take_different_logs(srv: Server) -> None:
    runs = [await _finished_log(srv) for _ in range(3)]
    with _db(srv) as a, _db(srv) as b:
        with a.transaction():  # r1's claim, not committed yet
            mine = [r[0] for r in a.execute(CLAIM, ("r1", 2)).fetchall()]
            assert mine == runs[:2]  # oldest end first
            theirs = [r[0] for r in b.execute(CLAIM, ("r2", 10)).fetchall()]
            assert theirs == runs[2:]  # r1's rows are locked: skipped, not waited on
        assert b.execute(CLAIM, ("r2", 10)).fetchall() == []  # live leases, all three
        holders = dict(b.execute("SELECT run_id, holder FROM cryo.log_moves").fetchall())
        assert holders == {runs[0]: "r1", runs[1]: "r1", runs[2]: "r2"}


async def test_a_lapsed_lease_is_taken_over_and_only_the_live_attempt_records_the_move(
        srv: Server) -> None:
    run_id = await _finished_log(srv, b"one\n", b"two\n")
    with _db(srv) as r1, _db(srv) as r2:
        (_, _, _, old, old_key, last, nbytes, attempts), = r1.execute(CLAIM, ("r1", 5)).fetchall()
        assert attempts == 1 and old_key.startswith("logs/" + run_id.replace(":", "/") + "/")
        assert old_key.endswith("/" + old)
        _later(r2, 61)  # r1 died: its lease lapsed
        (_, _, _, new, new_key, last2, _, attempts), = r2.execute(CLAIM, ("r2", 5)).fetchall()
        assert (attempts, last2) == (2, last) and new != old and new_key != old_key
        # The dead attempt's key is queued, to go once its own lease could not complete it.
        queued = r2.execute("SELECT object_key, not_before > cryo.now() FROM "
                            "cryo.log_objects_to_delete").fetchall()
        assert queued == [(old_key, True)]
        assert r2.execute("SELECT * FROM cryo.log_objects_to_delete(10)").fetchall() == []
        _later(r1, 61)
        args = (run_id, old, old_key, 8, 100, SHA)
        assert _sqlstate(lambda: r1.execute(
            "SELECT cryo.archive_run_log(%s, %s, %s, %s, %s, %s)", args)) == "CR100"
        assert _sqlstate(lambda: r1.execute("SELECT cryo.renew_log_move(%s, %s, '60 s')",
                                            (run_id, old))) == "CR100"
        assert _sqlstate(lambda: r1.execute("SELECT cryo.trim_run_log(%s, %s, %s, '\\x00')",
                                            (run_id, old, last))) == "CR100"
        # Neither refusal changed anything: the chunks and r2's lease are there.
        assert r2.execute("SELECT count(*) FROM cryo.logs WHERE run_id = %s",
                          (run_id,)).fetchone() == (2,)
        # The live attempt must name its own key and give the verified size and hash.
        assert _sqlstate(lambda: r2.execute(
            "SELECT cryo.archive_run_log(%s, %s, %s, 8, 100, %s)",
            (run_id, new, old_key, SHA))) == "CR004"
        assert _sqlstate(lambda: r2.execute(
            "SELECT cryo.archive_run_log(%s, %s, %s, 8, 100, NULL)",
            (run_id, new, new_key))) == "CR004"
        assert r2.execute("SELECT cryo.archive_run_log(%s, %s, %s, %s, 100, %s)",
                          (run_id, new, new_key, nbytes, SHA)).fetchone() == (True,)
        # One transaction: recorded, chunks dropped, lease ended.
        assert r2.execute("SELECT object_key, attempt_id, object_bytes, sha256, attempts "
                          "FROM cryo.log_archives").fetchall() == [
                              (new_key, new, 100, SHA, 2)]
        assert r2.execute("SELECT count(*) FROM cryo.logs WHERE run_id = %s",
                          (run_id,)).fetchone() == (0,)
        assert r2.execute("SELECT count(*) FROM cryo.log_moves").fetchone() == (0,)
        _later(r2, 200)  # the dead attempt's key is due for deletion now
        assert [k for _, k in r2.execute("SELECT * FROM cryo.log_objects_to_delete(10)")] == [
            old_key]
        assert r2.execute(CLAIM, ("r2", 5)).fetchall() == []  # moved: never claimed again


async def test_a_failed_attempt_gives_its_lease_back_and_queues_its_key(srv: Server) -> None:
    run_id = await _finished_log(srv)
    with _db(srv) as db:
        (_, _, _, attempt, key, *_), = db.execute(CLAIM, ("r1", 5)).fetchall()
        assert db.execute("SELECT cryo.abandon_log_move(%s, 'not-mine', 'logs/x')",
                          (run_id,)).fetchone() == (False,)  # not its lease: key queued only
        assert db.execute("SELECT cryo.abandon_log_move(%s, %s, %s)",
                          (run_id, attempt, key)).fetchone() == (True,)
        assert [k for _, k in db.execute("SELECT * FROM cryo.log_objects_to_delete(10)")] == [
            "logs/x", key]
        (again, *_, attempts), = db.execute(CLAIM, ("r2", 5)).fetchall()  # claimable at once
        assert (again, attempts) == (run_id, 2)  # the run's attempts still counted
        assert [k for _, k in db.execute("SELECT * FROM cryo.log_objects_to_delete(10)")] == [
            "logs/x", key]  # its key was queued once, by the attempt that gave it back


async def test_collecting_a_run_mid_move_ends_its_lease_and_queues_its_key(
        srv: Server) -> None:
    run_id = await _finished_log(srv)
    with _db(srv) as db:
        (_, _, _, attempt, key, *_), = db.execute(CLAIM, ("r1", 5)).fetchall()
        db.execute("SELECT cryo._delete_runs(ARRAY[%s])", (run_id,))
        assert db.execute("SELECT count(*) FROM cryo.log_moves").fetchone() == (0,)
        # The mover finishing after it: nothing recorded, its object queued again.
        assert db.execute("SELECT cryo.archive_run_log(%s, %s, %s, 1, 1, %s)",
                          (run_id, attempt, key, SHA)).fetchone() == (False,)
        assert [k for _, k in db.execute("SELECT * FROM cryo.log_objects_to_delete(10)")] == [
            key, key]


async def test_a_movers_page_is_bounded_in_bytes(srv: Server) -> None:
    run_id = await _finished_log(srv, *(bytes([65 + i]) * 1000 for i in range(10)))
    with _db(srv) as db:
        ids = [i for (i,) in db.execute("SELECT id FROM cryo.logs WHERE run_id = %s ORDER BY id",
                                        (run_id,))]
        page = db.execute("SELECT id FROM cryo.read_log_page(%s, 0, %s, 2500)",
                          (run_id, ids[-1])).fetchall()
        assert [i for (i,) in page] == ids[:3]  # 3 sealed chunks of ~1050 pass 2500
        tail = db.execute("SELECT id FROM cryo.read_log_page(%s, %s, %s, 1)",
                          (run_id, ids[7], ids[8])).fetchall()
        assert [i for (i,) in tail] == [ids[8]]  # at least one; never past p_upto
