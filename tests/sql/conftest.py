"""Helpers for SQL-level tests: autocommit sessions on the test's fresh database."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest


@pytest.fixture
def session(dsn: str) -> Iterator[Callable[[], psycopg.Connection]]:
    """Opens as many independent autocommit sessions as a test needs."""
    opened: list[psycopg.Connection] = []

    def open_one() -> psycopg.Connection:
        conn = psycopg.connect(dsn, autocommit=True)
        opened.append(conn)
        return conn

    yield open_one
    for conn in opened:
        conn.close()


@pytest.fixture
def db(session: Callable[[], psycopg.Connection]) -> psycopg.Connection:
    return session()


def submit(db: psycopg.Connection, name: str = "wf.sh", key: str | None = None,
           caps: list[str] | None = None) -> str:
    row = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', %s, NULL, %s, NULL, %s, %s)",
        (name, b"sealed-source", key, caps or ["shell"])).fetchone()
    return row[0]


def claim(db: psycopg.Connection, agent: str = "a1", caps: list[str] | None = None,
          lease: float = 30) -> tuple[str, object] | None:
    row = db.execute("SELECT run_id, claim_token FROM cryo.claim_job('dev', %s, %s, %s)",
                     (agent, caps or ["shell", "polyglot"], lease)).fetchone()
    return (row[0], row[1]) if row else None


def status(db: psycopg.Connection, run_id: str) -> tuple[str, str | None]:
    return db.execute("SELECT status, substate FROM cryo.runs WHERE id = %s", (run_id,)).fetchone()
