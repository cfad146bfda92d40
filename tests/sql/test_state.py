"""State cells at the SQL level: scopes, versions, reserved keys, and the memoized
add / cas / incr writing the cell and the run's memo in one transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from tests.sql.conftest import claim, submit

ENTITY = "dev:default:entity:ledger"


def _claimed(db: psycopg.Connection) -> tuple[str, object]:
    run_id = submit(db)
    got = claim(db)
    assert got is not None and got[0] == run_id
    return got


def _add(db: psycopg.Connection, run: str, token: object, key: str, entity: str | None = "ledger",
         value: bytes = b"v") -> tuple[bool, int | None, bool]:
    path = f"state.add/{key}/0"
    return db.execute("SELECT * FROM cryo.state_add(%s,%s,%s,%s,%s,NULL,%s,0,%s)",
                      (run, token, entity, key, value, key, path)).fetchone()


def _get(db: psycopg.Connection, scope: str, key: str) -> tuple[bytes, int] | None:
    return db.execute("SELECT value, version FROM cryo.state_get(%s, %s)", (scope, key)).fetchone()


def _sqlstate(db: psycopg.Connection, sql: str, params: tuple[object, ...]) -> str | None:
    with pytest.raises(psycopg.Error) as exc:
        db.execute(sql, params)
    return exc.value.sqlstate


def test_set_get_list_delete_and_versions(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    set_sql = "SELECT cryo.state_set(%s, %s, %s, %s, %s)"
    assert db.execute(set_sql, (run, token, None, "a", b"1")).fetchone() == (1,)
    assert db.execute(set_sql, (run, token, None, "a", b"2")).fetchone() == (2,)
    assert db.execute(set_sql, (run, token, "ledger", "a", b"e")).fetchone() == (1,)
    assert _get(db, run, "a") == (b"2", 2)
    assert _get(db, ENTITY, "a") == (b"e", 1)
    assert _get(db, ENTITY, "missing") is None
    assert db.execute("SELECT key, value, version FROM cryo.state_list(%s)", (run,)).fetchall() == [
        ("a", b"2", 2)]
    del_sql = "SELECT cryo.state_delete(%s, %s, %s, %s)"
    assert db.execute(del_sql, (run, token, None, "a")).fetchone() == (True,)
    assert db.execute(del_sql, (run, token, None, "a")).fetchone() == (False,)
    assert _get(db, run, "a") is None
    assert db.execute("SELECT * FROM cryo.state_list(%s)", (run,)).fetchall() == []
    # A re-created cell continues the count: a version is never handed out twice.
    assert db.execute(set_sql, (run, token, None, "a", b"3")).fetchone() == (4,)
    # The scope rule lives in SQL only.
    scope = "SELECT cryo.state_scope('dev', 'default', %s, %s)"
    assert db.execute(scope, (None, "ledger")).fetchone() == (ENTITY,)
    assert db.execute(scope, (run, None)).fetchone() == (run,)


def test_dba_sees_cells_without_values(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    db.execute("SELECT cryo.state_set(%s, %s, 'ledger', 'k', '\\x0102')", (run, token))
    rows = db.execute("SELECT scope_kind, scope_name, key, version, deleted, sealed_bytes, "
                      "created_by_run FROM cryo.state_overview").fetchall()
    assert rows == [("entity", "ledger", "k", 1, False, 2, run)]


@pytest.mark.parametrize("op", ["set", "delete", "add", "cas", "incr"])
def test_reserved_keys_refuse_writes_but_read(db: psycopg.Connection, op: str) -> None:
    run, token = _claimed(db)
    sql, params = {
        "set": ("SELECT cryo.state_set(%s,%s,NULL,%s,'\\x01')", (run, token, "_cryo/x")),
        "delete": ("SELECT cryo.state_delete(%s,%s,NULL,%s)", (run, token, "_cryo/x")),
        "add": ("SELECT * FROM cryo.state_add(%s,%s,NULL,%s,'\\x01',NULL,'n',0)",
                (run, token, "_cryo/x")),
        "cas": ("SELECT * FROM cryo.state_cas(%s,%s,NULL,%s,'\\x01',1,NULL,'n',0)",
                (run, token, "_cryo/x")),
        "incr": ("SELECT * FROM cryo.state_incr(%s,%s,NULL,%s,NULL,NULL,NULL,NULL,'n',0)",
                 (run, token, "_cryo/x")),
    }[op]
    assert _sqlstate(db, sql, params) == "CR001"
    assert _get(db, run, "_cryo/x") is None  # reading one is fine


@pytest.mark.parametrize(("entity", "key"), [("bad name", "k"), ("ok", ""), ("ok", "tab\there")])
def test_malformed_entity_or_key_is_refused(db: psycopg.Connection, entity: str, key: str) -> None:
    run, token = _claimed(db)
    sql = "SELECT cryo.state_set(%s,%s,%s,%s,'\\x01')"
    assert _sqlstate(db, sql, (run, token, entity, key)) == "CR004"


def test_writes_need_the_live_claim(db: psycopg.Connection) -> None:
    run = submit(db)
    assert _sqlstate(db, "SELECT cryo.state_set(%s, gen_random_uuid(), NULL, 'k', '\\x01')",
                     (run,)) == "CR002"


def test_add_wins_once_and_records_the_answer(db: psycopg.Connection) -> None:
    run_a, tok_a = _claimed(db)
    run_b, tok_b = _claimed(db)
    assert _add(db, run_a, tok_a, "seen-1") == (True, 1, False)
    assert _add(db, run_b, tok_b, "seen-1") == (False, 1, False)
    # Asking again on the same path reads the memo back, whatever the cell says now.
    db.execute("SELECT cryo.state_delete(%s, %s, 'ledger', 'seen-1')", (run_b, tok_b))
    assert _add(db, run_b, tok_b, "seen-1") == (False, None, True)
    memos = db.execute("SELECT run_id, key_family, exit_code FROM cryo.journal").fetchall()
    assert sorted(memos) == sorted([(run_a, "state.add", 0), (run_b, "state.add", 3)])
    # A deleted cell can be claimed again, by a run that has not asked yet.
    run_c, tok_c = _claimed(db)
    assert _add(db, run_c, tok_c, "seen-1") == (True, 3, False)


def test_a_claim_without_its_memo_is_still_held_by_its_creator(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    other, other_tok = _claimed(db)
    # The cell exists with this run as creator but the run has no memo (as after a
    # crash between two separate writes, or a set before the add).
    db.execute("SELECT cryo.state_set(%s, %s, 'ledger', 'job-9', '\\x01')", (run, token))
    assert _add(db, other, other_tok, "job-9") == (False, 1, False)
    assert _add(db, run, token, "job-9") == (True, 1, False)


def test_cas_swaps_on_the_version_and_records_a_loss(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    db.execute("SELECT cryo.state_set(%s, %s, 'settings', 'cfg', '\\x01')", (run, token))
    cas = "SELECT * FROM cryo.state_cas(%s,%s,'settings','cfg',%s,%s,NULL,%s,0,%s)"
    def go(value: bytes, expect: int, name: str) -> tuple[bool, int | None, bool]:
        return db.execute(cas, (run, token, value, expect, name, f"state.cas/{name}/0")).fetchone()

    assert go(b"\x02", 1, "a") == (True, 2, False)
    assert go(b"\x03", 1, "b") == (False, None, False)
    assert go(b"\x04", 2, "b") == (False, None, True)
    assert _get(db, "dev:default:entity:settings", "cfg") == (b"\x02", 2)
    assert db.execute("SELECT key_name, exit_code FROM cryo.journal ORDER BY seq").fetchall() == [
        ("a", 0), ("b", 3)]
    assert _sqlstate(db, cas, (run, token, b"\x05", 0, "c", "state.cas/c/0")) == "CR004"


def _incr_step(db: psycopg.Connection, run: str, token: object, expect: int | None,
               value: bytes | None, name: str = "tick") -> tuple[str, int | None, bytes | None]:
    return db.execute("SELECT * FROM cryo.state_incr(%s,%s,'counters','n',%s,%s,%s,NULL,%s,0,%s)",
                      (run, token, expect, value, b"memo:" + (value or b""), name,
                       f"state.incr/{name}/0")).fetchone()


def test_incr_is_a_compare_and_set_loop_with_its_memo(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    assert _incr_step(db, run, token, None, None) == ("moved", 0, None)
    assert _incr_step(db, run, token, 0, b"1") == ("done", 1, None)
    assert _incr_step(db, run, token, 0, b"2") == ("recorded", None, b"memo:1")
    other, other_tok = _claimed(db)
    # A stale expectation moves; the fresh answer carries the current sealed value.
    assert _incr_step(db, other, other_tok, 0, b"1") == ("moved", 1, b"1")
    assert _incr_step(db, other, other_tok, 1, b"2") == ("done", 2, None)
    assert _get(db, "dev:default:entity:counters", "n") == (b"2", 2)
    count = "SELECT count(*) FROM cryo.journal WHERE key_family = 'state.incr'"
    assert db.execute(count).fetchone() == (2,)


def test_the_cell_and_its_memo_commit_together(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    # Make the memo impossible to write: the cell write must go down with it.
    db.execute("ALTER TABLE cryo.journal ADD CONSTRAINT test_no_memo "
               "CHECK (key_family <> 'state.incr')")
    assert _sqlstate(db, "SELECT * FROM cryo.state_incr(%s,%s,'counters','n',0,'\\x01','\\x01',"
                     "NULL,'x',0)", (run, token)) == "23514"
    assert _get(db, "dev:default:entity:counters", "n") is None


def test_racing_adds_have_exactly_one_winner(session: Callable[[], psycopg.Connection]) -> None:
    db = session()
    runs = [_claimed(db) for _ in range(8)]
    results: list[bool] = []
    barrier = threading.Barrier(len(runs))

    def go(run: str, token: object) -> None:
        conn = session()
        barrier.wait()
        results.append(_add(conn, run, token, "race")[0])

    threads = [threading.Thread(target=go, args=r) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]


def test_run_cells_go_with_their_run_and_entity_cells_stay(db: psycopg.Connection) -> None:
    run, token = _claimed(db)
    db.execute("SELECT cryo.state_set(%s, %s, NULL, 'a', '\\x01')", (run, token))
    db.execute("SELECT cryo.state_set(%s, %s, NULL, 'b', '\\x01')", (run, token))
    db.execute("SELECT cryo.state_set(%s, %s, 'keep', 'c', '\\x01')", (run, token))
    run_cells = "SELECT count(*) FROM cryo.state_cells WHERE run_id = %s"
    assert db.execute(run_cells, (run,)).fetchone() == (2,)
    # The run ends and outlives its retention: the collector in tick() takes its cells.
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run, token))
    db.execute("SELECT cryo.set_retention('dev', 'default', p_runs => interval '1 second')")
    db.execute("SELECT set_config('cryo.fake_now', '2100-01-01 00:00:00+00', false)")
    db.execute("SELECT * FROM cryo.tick()")
    assert db.execute(run_cells, (run,)).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM cryo.state_cells").fetchone() == (1,)
