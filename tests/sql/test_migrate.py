"""What is in the database equals what is in sql/functions/, and re-migrating is a no-op."""

from __future__ import annotations

import re

import psycopg

from cryopg.migrate import function_files, migrate

DECL = re.compile(
    r"CREATE OR REPLACE FUNCTION (cryo\.\w+)\((.*?)\)\s*RETURNS.*?AS \$\$(.*?)\$\$", re.S)


def _file_functions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in function_files():
        for name, _args, body in DECL.findall(f.read_text()):
            found.setdefault(name, []).append(body)
    return found


def test_database_functions_equal_the_files(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT 'cryo.' || p.proname, p.prosrc FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'cryo'").fetchall()
    in_db: dict[str, list[str]] = {}
    for name, src in rows:
        in_db.setdefault(name, []).append(src)
    files = _file_functions()
    assert set(in_db) == set(files)
    for name, bodies in files.items():
        assert sorted(in_db[name]) == sorted(bodies), name


def test_second_migrate_is_a_no_op(dsn: str) -> None:
    query = ("SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
             "WHERE n.nspname = 'cryo' ORDER BY 1")
    with psycopg.connect(dsn) as conn:
        before = conn.execute(query).fetchall()
    assert migrate(dsn) is False
    with psycopg.connect(dsn) as conn:
        assert conn.execute(query).fetchall() == before


def test_a_dropped_function_comes_back_only_when_the_files_change(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP FUNCTION cryo.read_logs(text, bigint, integer)")
        conn.execute("COMMENT ON SCHEMA cryo IS 'stale'")
    assert migrate(dsn) is True
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regprocedure('cryo.read_logs(text, bigint, integer)') "
                            "IS NOT NULL").fetchone() == (True,)
