"""Journal memos, logs, annotations, DBA views, and the error-code catalogue."""

from __future__ import annotations

import re

import psycopg
import pytest

from cryopg.errors import BY_SQLSTATE
from cryopg.paths import SQL_DIR
from tests.sql.conftest import claim, submit


def test_record_step_takes_when_the_step_began(db: psycopg.Connection) -> None:
    """p_started_at, when earlier, is the entry's start, never before the run's creation;
    it holds for a fresh entry and for a marker the step completes."""
    run_id = submit(db)
    _, token = claim(db)
    created = db.execute("SELECT created_at FROM cryo.runs WHERE id = %s", (run_id,)).fetchone()[0]
    db.execute("SELECT cryo.mark_step(%s, %s, 1, 'step', 'b', 0)", (run_id, token))
    for pos, name, offset in ((0, "a", "1 hour"), (1, "b", "-1 hour")):
        db.execute("SELECT cryo.record_step(%s, %s, %s, 'step', %s, 0, NULL, '\\x01', 0, NULL, "
                   "%s::timestamptz + %s::interval)", (run_id, token, pos, name, created, offset))
    got = dict(db.execute("SELECT key_name, created_at FROM cryo.journal WHERE run_id = %s",
                          (run_id,)).fetchall())
    assert got["b"] == created  # an hour before the run began: clamped to its creation
    db.execute("SELECT cryo.record_step(%s, %s, 2, 'step', 'c', 0, NULL, '\\x01', 0, NULL, "
               "%s::timestamptz)", (run_id, token, created))
    assert db.execute("SELECT created_at FROM cryo.journal WHERE run_id = %s AND key_name = 'c'",
                      (run_id,)).fetchone()[0] == created
    assert got["a"] > created  # a start later than the recording is not taken


def test_record_step_assigns_positions_and_refuses_a_second_write(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    seqs = [db.execute("SELECT cryo.record_step(%s,%s,%s,'step',%s,%s,NULL,'\\x01',%s,%s)",
                       (run_id, token, pos, name, ordinal, code, path)).fetchone()[0]
            for pos, path, name, ordinal, code in [(0, "step/a/0", "a", 0, 0),
                                                   (1, "step/a/1", "a", 1, 2)]]
    assert seqs == [0, 1]
    # The same claim retrying a lost answer gets the first position back...
    again = db.execute("SELECT cryo.record_step(%s,%s,0,'step','a',0,NULL,'\\x02',0)",
                       (run_id, token)).fetchone()[0]
    assert again == 0
    # ...but a later attempt reaching a recorded path should have replayed it.
    db.execute("SELECT cryo.park_sleep(%s, %s, 2, 0, 0)", (run_id, token))
    db.execute("SELECT * FROM cryo.tick()")
    _, token2 = claim(db)
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.record_step(%s,%s,0,'step','a',0,NULL,'\\x01',0)",
                   (run_id, token2))
    assert exc.value.sqlstate == "CR007"
    rows = db.execute("SELECT key_scope, key_family, key_name, key_ordinal, exit_code "
                      "FROM cryo.journal WHERE run_id=%s ORDER BY seq", (run_id,)).fetchall()
    assert rows == [("run", "step", "a", 0, 0), ("run", "step", "a", 1, 2),
                    ("run", "sleep", "", 0, 0)]
    hist = db.execute("SELECT kind, key_name, key_ordinal FROM cryo.history WHERE run_id=%s AND "
                      "kind='step_completed' ORDER BY id", (run_id,)).fetchall()
    assert hist == [("step_completed", "a", 0), ("step_completed", "a", 1)]


def test_logs_append_in_order_and_empty_chunks_only_renew(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    for chunk in (b"one", b"", b"two"):
        db.execute("SELECT cryo.append_log(%s, %s, %s, 30)", (run_id, token, chunk))
    chunks = db.execute("SELECT id, data FROM cryo.read_logs(%s, 0)", (run_id,)).fetchall()
    assert [c[1] for c in chunks] == [b"one", b"two"]
    after = db.execute("SELECT data FROM cryo.read_logs(%s, %s)", (run_id, chunks[0][0])).fetchall()
    assert after == [(b"two",)]


def test_annotation_lands_in_history_only(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    db.execute("SELECT cryo.annotate_run(%s, %s, '\\x0102')", (run_id, token))
    assert db.execute("SELECT kind, payload FROM cryo.read_history(%s) WHERE kind='annotation'",
                      (run_id,)).fetchall() == [("annotation", b"\x01\x02")]
    assert db.execute("SELECT count(*) FROM cryo.journal").fetchone() == (0,)


def test_views_show_runs_leases_and_pending(db: psycopg.Connection) -> None:
    a, b = submit(db), submit(db)
    claim(db, agent="agent-7")
    assert db.execute("SELECT run_id, agent_id FROM cryo.live_claims").fetchall() == [
        (a, "agent-7")]
    assert [r[0] for r in db.execute("SELECT run_id FROM cryo.pending_runs")] == [b]
    overview = dict(db.execute("SELECT id, status FROM cryo.run_overview").fetchall())
    assert overview == {a: "running", b: "pending"}


def test_error_codes_agree_between_sql_and_python(db: psycopg.Connection) -> None:
    in_catalogue = {r[0] for r in db.execute("SELECT code FROM cryo.error_codes()")}
    raised = set()
    for f in (SQL_DIR / "functions").glob("*.sql"):
        raised |= set(re.findall(r"ERRCODE = '(CR\d{3})'", f.read_text()))
    assert raised <= in_catalogue
    assert in_catalogue == set(BY_SQLSTATE)
    assert "CR000" not in in_catalogue


def test_every_public_function_is_documented(db: psycopg.Connection) -> None:
    undocumented = db.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'cryo' AND p.proname NOT LIKE '\\_%%' "
        "AND obj_description(p.oid, 'pg_proc') IS NULL").fetchall()
    assert undocumented == []
