"""Numbered log appends (issue 36): a chunk is stored only at the pass's stored end, so
an agent that posts again after a lost answer (its replica died after the commit) never
doubles the log, and a chunk past the end is refused (CR160) rather than leave a hole.
The bytes here stand in for sealed ones: SQL never opens them."""

from __future__ import annotations

import psycopg
import pytest

from tests.sql.conftest import claim, submit


def _at(db: psycopg.Connection, run_id: str, token: object, offset: int,
        data: bytes) -> tuple[bool, int]:
    row = db.execute("SELECT * FROM cryo.append_log_at(%s, %s, %s, %s, %s, 30)",
                     (run_id, token, offset, len(data), data)).fetchone()
    assert row is not None
    return bool(row[0]), int(row[1])


def _log(db: psycopg.Connection, run_id: str) -> list[bytes]:
    return [bytes(d) for (d,) in db.execute(
        "SELECT data FROM cryo.logs WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()]


def test_a_repeated_post_is_acknowledged_and_stored_once(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    assert _at(db, run_id, token, 0, b"line 1\n") == (False, 7)
    assert _at(db, run_id, token, 0, b"line 1\n") == (False, 7)  # the answer was lost
    assert _at(db, run_id, token, 7, b"line 2\n") == (False, 14)
    assert _at(db, run_id, token, 7, b"line 2\n") == (False, 14)
    assert _at(db, run_id, token, 3, b"e 1\n") == (False, 14)  # any stored stretch
    assert _log(db, run_id) == [b"line 1\n", b"line 2\n"]


def test_an_overlapping_post_stores_nothing_and_names_the_end(db: psycopg.Connection) -> None:
    """Bytes sealed cannot be cut in SQL: the answer's end, short of the chunk's, tells
    the server to seal and post the new tail alone, which is then stored at that end."""
    run_id = submit(db)
    _, token = claim(db)
    _at(db, run_id, token, 0, b"abc")
    assert _at(db, run_id, token, 0, b"abcdef") == (False, 3)
    assert _log(db, run_id) == [b"abc"]
    assert _at(db, run_id, token, 3, b"def") == (False, 6)
    assert _log(db, run_id) == [b"abc", b"def"]


def test_a_gap_is_refused_with_the_stored_end(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    _at(db, run_id, token, 0, b"abc")
    with pytest.raises(psycopg.Error, match="ends at byte 3") as got:
        _at(db, run_id, token, 5, b"xyz")
    assert got.value.sqlstate == "CR160"
    assert _log(db, run_id) == [b"abc"]
    with pytest.raises(psycopg.Error) as bad:
        _at(db, run_id, token, -1, b"")
    assert bad.value.sqlstate == "CR004"


def test_an_empty_post_renews_and_reports_the_end(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    _at(db, run_id, token, 0, b"abc")
    assert _at(db, run_id, token, 3, b"") == (False, 3)
    assert _at(db, run_id, token, 0, b"") == (False, 3)
    assert _log(db, run_id) == [b"abc"]


def test_a_new_pass_counts_from_zero(db: psycopg.Connection) -> None:
    """Offsets count within a claim's pass: the next claim starts again at 0."""
    run_id = submit(db)
    _, token = claim(db)
    _at(db, run_id, token, 0, b"first pass\n")
    db.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))
    _, again = claim(db)
    assert _at(db, run_id, again, 0, b"second\n") == (False, 7)
    with pytest.raises(psycopg.Error) as stale:
        _at(db, run_id, token, 11, b"late")
    assert stale.value.sqlstate == "CR002"
    assert _log(db, run_id) == [b"first pass\n", b"second\n"]


def _finish(db: psycopg.Connection, run_id: str, token: object, data: bytes,
            offset: int | None) -> list[tuple[str, bool]]:
    return db.execute(
        "SELECT * FROM cryo.finish_runs(ARRAY[%s], ARRAY[%s]::uuid[], ARRAY['succeeded'], "
        "NULL, NULL, ARRAY[%s]::bytea[], ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])",
        (run_id, token, data, offset, len(data))).fetchall()


def test_a_finish_stores_its_last_bytes_by_the_same_rule(db: psycopg.Connection) -> None:
    run_id = submit(db)
    _, token = claim(db)
    _at(db, run_id, token, 0, b"abc")
    assert _finish(db, run_id, token, b"abc", 0) == [(run_id, True)]  # already stored
    assert _log(db, run_id) == [b"abc"]
    run2 = submit(db)
    _, token2 = claim(db)
    _at(db, run2, token2, 0, b"abc")
    for offset, data in ((5, b"xyz"), (1, b"bcdef")):  # a gap, and a partial repeat
        with pytest.raises(psycopg.Error, match="ends at byte 3") as got:
            _finish(db, run2, token2, data, offset)
        assert got.value.sqlstate == "CR160"
    assert _finish(db, run2, token2, b"def", 3) == [(run2, True)]
    assert _log(db, run2) == [b"abc", b"def"]
    assert db.execute("SELECT status FROM cryo.runs WHERE id = %s", (run2,)).fetchone() == (
        "succeeded",)


def test_a_post_without_offset_is_stored_as_before(db: psycopg.Connection) -> None:
    """An agent from before offsets: append_log and a finish without them store every
    post."""
    run_id = submit(db)
    _, token = claim(db)
    for _ in range(2):
        db.execute("SELECT cryo.append_log(%s, %s, 'abc', 30)", (run_id, token))
    db.execute("SELECT * FROM cryo.finish_runs(ARRAY[%s], ARRAY[%s]::uuid[], "
               "ARRAY['succeeded'], NULL, NULL, ARRAY['abc'::bytea])", (run_id, token))
    assert _log(db, run_id) == [b"abc", b"abc", b"abc"]
