"""Connections in SQL (functions/91_connections.sql): stored per project, checked, named
secrets that must exist, refused to an untrusted run's connector node, and deleted with
their project."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb


def _create(db: psycopg.Connection, name: str = "gh", base_url: str = "https://api.example.com",
            auth: str = "bearer", secret: str | None = "GH_TOKEN", username: str | None = None,
            header: str | None = None, headers: dict[str, str] | None = None,
            replace: bool = False) -> bool:
    return db.execute(
        "SELECT cryo.create_connection('dev', 'default', %s, %s, %s, %s, %s, %s, %s, %s)",
        (name, base_url, auth, secret, username, header, Jsonb(headers or {}), replace)
    ).fetchone()[0]


def _code(db: psycopg.Connection, **kw: object) -> str | None:
    try:
        with db.transaction():
            _create(db, **kw)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


@pytest.fixture
def db_with_secret(db: psycopg.Connection) -> psycopg.Connection:
    db.execute("SELECT cryo.set_secret('dev', 'default', 'GH_TOKEN', 'sealed')")
    return db


def test_create_list_show_replace_delete(db_with_secret: psycopg.Connection) -> None:
    db = db_with_secret
    assert _create(db, headers={"Accept": "application/json"}) is True
    assert _create(db, "open", "http://h.example:8080/v1", "none", None) is True
    rows = db.execute("SELECT name, base_url, auth, secret, headers"
                      " FROM cryo.list_connections('dev', 'default')").fetchall()
    assert rows == [("gh", "https://api.example.com", "bearer", "GH_TOKEN",
                     {"Accept": "application/json"}),
                    ("open", "http://h.example:8080/v1", "none", None, {})]
    assert _code(db) == "CR205"  # exists
    assert _create(db, base_url="https://other.example", replace=True) is False
    got = db.execute("SELECT base_url, headers FROM cryo.get_connection('dev', 'default', 'gh')"
                     ).fetchone()
    assert got == ("https://other.example", {})
    db.execute("SELECT cryo.delete_connection('dev', 'default', 'gh')")
    for sql in ("SELECT * FROM cryo.get_connection('dev', 'default', 'gh')",
                "SELECT cryo.delete_connection('dev', 'default', 'gh')"):
        with pytest.raises(psycopg.Error) as err, db.transaction():
            db.execute(sql)
        assert err.value.sqlstate == "CR206"
    # the secret stays
    assert db.execute("SELECT count(*) FROM cryo.list_secrets('dev', 'default')"
                      ).fetchone()[0] == 1


@pytest.mark.parametrize("kw", [
    {"name": "Bad Name"},
    {"base_url": "ftp://h.example"},
    {"base_url": "https://user:pw@h.example"},
    {"base_url": "https://h.example/x?q=1"},
    {"base_url": "https://h.example/a b"},
    {"auth": "oauth"},
    {"auth": "bearer", "secret": None},
    {"auth": "none", "secret": "GH_TOKEN"},
    {"auth": "basic"},  # no user name
    {"auth": "bearer", "username": "ann"},
    {"auth": "header"},  # no header name
    {"auth": "header", "header": "X Key"},
    {"secret": "PATH"},  # reserved, as for secrets
    {"headers": {"X-A": "a\nb"}},
    {"headers": {"bad name": "v"}},
    {"headers": {"Authorization": "Bearer in-the-clear"}},  # a credential: use a secret
    {"auth": "header", "header": "X-Key", "headers": {"x-key": "v"}},
])
def test_malformed_connections_are_refused(db_with_secret: psycopg.Connection,
                                           kw: dict[str, object]) -> None:
    assert _code(db_with_secret, **kw) == "CR004"


def test_a_missing_secret_or_project_is_refused(db: psycopg.Connection) -> None:
    assert _code(db) == "CR207"
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT cryo.create_connection('dev', 'nosuch', 'x', 'https://h.example',"
                   " 'none')")
    assert err.value.sqlstate == "CR005"


def test_basic_and_header_schemes(db_with_secret: psycopg.Connection) -> None:
    assert _create(db_with_secret, "b", auth="basic", username="ann") is True
    assert _create(db_with_secret, "h", auth="header", header="X-Api-Key") is True


def _graph_run(db: psycopg.Connection, untrusted: bool) -> str:
    return db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL, 'doc',"
        " p_untrusted => %s)", (untrusted,)).fetchone()[0]


def test_an_untrusted_run_is_refused_a_connection_with_a_credential(
        db_with_secret: psycopg.Connection) -> None:
    db = db_with_secret
    _create(db)
    _create(db, "open", auth="none", secret=None)
    trusted, untrusted = _graph_run(db, False), _graph_run(db, True)
    got = db.execute("SELECT name, secret FROM cryo.connection_for_run(%s, 'gh')",
                     (trusted,)).fetchone()
    assert got == ("gh", "GH_TOKEN")
    assert db.execute("SELECT name FROM cryo.connection_for_run(%s, 'open')",
                      (untrusted,)).fetchone() == ("open",)
    for run, name, code in ((untrusted, "gh", "CR208"), (trusted, "nosuch", "CR206")):
        with pytest.raises(psycopg.Error) as err, db.transaction():
            db.execute("SELECT * FROM cryo.connection_for_run(%s, %s)", (run, name))
        assert err.value.sqlstate == code
        assert code != "CR208" or "withheld from an untrusted run" in str(err.value)
    db.execute("SELECT cryo.delete_secret('dev', 'default', 'GH_TOKEN')")
    with pytest.raises(psycopg.Error) as err:
        db.execute("SELECT * FROM cryo.connection_for_run(%s, 'gh')", (trusted,))
    assert err.value.sqlstate == "CR207"


def test_connections_go_with_their_project(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_project('dev', 'tmp', 'tmp')")
    db.execute("SELECT cryo.create_connection('dev', 'tmp', 'x', 'https://h.example', 'none')")
    db.execute("SELECT cryo.delete_project('dev', 'tmp')")
    assert db.execute("SELECT count(*) FROM cryo.connections").fetchone()[0] == 0
