"""Concurrency groups of N holders, and N starts per window, at the SQL level: the lease
model scripts, submits and graph nodes share (cryo._declare_group_limit, _group_full)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.sql.conftest import status


def admit(db: psycopg.Connection, limit: int | None = None,
          window: float | None = None, group: str = "deploy") -> str:
    """A graph-less submit under the group, declaring the limit as a graph's own
    `concurrency: {group, limit, window}` does (through p_graph's keys)."""
    graph = {"nodes": [{"id": "a", "type": "state", "deps": []}]}
    if limit is not None:
        graph["concurrency_limit"] = limit
    if window is not None:
        graph["concurrency_window"] = window
    return db.execute(
        "SELECT run_id FROM cryo.submit_script('dev','default','g.json',NULL,'\\x00',NULL,NULL,"
        "'{graph}',NULL,NULL,%s,NULL,p_graph => %s)", (group, Jsonb(graph))).fetchone()[0]


def holders(db: psycopg.Connection) -> int:
    return db.execute("SELECT count(*) FROM cryo.lease_holders").fetchone()[0]


def end(db: psycopg.Connection, run_id: str) -> None:
    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))


def test_a_limit_of_two_admits_two_and_the_third_when_one_ends(db: psycopg.Connection) -> None:
    runs = [admit(db, limit=2) for _ in range(3)]
    assert [status(db, r)[0] for r in runs] == ["pending", "pending", "queued"]
    assert holders(db) == 2
    end(db, runs[0])
    assert status(db, runs[2])[0] == "pending"
    assert holders(db) == 2  # never more than the limit


def test_the_scalar_form_still_admits_one(db: psycopg.Connection) -> None:
    runs = [admit(db) for _ in range(2)]
    assert [status(db, r)[0] for r in runs] == ["pending", "queued"]


def test_a_window_defers_the_third_start_until_it_moves_on(db: psycopg.Connection) -> None:
    db.execute("SELECT set_config('cryo.fake_now', '2100-01-01 00:00:00+00', false)")
    runs = [admit(db, limit=2, window=60) for _ in range(3)]
    assert [status(db, r)[0] for r in runs] == ["pending", "pending", "queued"]
    end(db, runs[0])  # an ending frees no start: the window counts starts
    assert status(db, runs[2])[0] == "queued"
    db.execute("SELECT cryo.tick()")
    assert status(db, runs[2])[0] == "queued"
    db.execute("SELECT set_config('cryo.fake_now', '2100-01-01 00:01:01+00', false)")
    db.execute("SELECT cryo.tick()")
    assert status(db, runs[2])[0] == "pending"


def test_a_limit_below_one_is_refused(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as got:
        admit(db, limit=0)
    assert got.value.sqlstate == "CR228"
