"""Bring a database to the current schema: pgmigrate for tables, then the function files.

pgmigrate only runs its callbacks when a migration is pending, so a change to a
function file alone would never reach the database. Instead the function files are
applied here, in one transaction, whenever their digest differs from the one recorded
on schema `cryo`: every function and view in the schema is dropped and rebuilt, so a
function removed from the files also leaves the database.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from cryopg.paths import SQL_DIR

_MARK = "cryopg functions sha256:"


class MigrationError(Exception):
    """pgmigrate or a function file failed; the database was left as it was."""


def function_files() -> list[Path]:
    return sorted((SQL_DIR / "functions").glob("*.sql"))


def functions_digest() -> str:
    h = hashlib.sha256()
    for f in function_files():
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _pgmigrate() -> str:
    beside = Path(sys.executable).parent / "pgmigrate"
    found = str(beside) if beside.exists() else shutil.which("pgmigrate")
    if not found:
        raise MigrationError("pgmigrate is not installed (pip install yandex-pgmigrate)")
    return found


def run_pgmigrate(dsn: str) -> None:
    proc = subprocess.run(
        [_pgmigrate(), "-d", str(SQL_DIR), "-c", dsn, "-t", "latest", "migrate"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else "exit " + str(proc.returncode)
        raise MigrationError(f"pgmigrate failed: {last}")


def apply_functions(conn: psycopg.Connection) -> bool:
    """Rebuild functions and views when the files changed. Returns True if it did."""
    digest = functions_digest()
    with conn.transaction():
        # Two processes migrating at once would otherwise drop each other's functions.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('cryopg-migrate'))")
        row = conn.execute(
            "SELECT obj_description('cryo'::regnamespace, 'pg_namespace')").fetchone()
        if row and row[0] == _MARK + digest:
            return False
        for (name,) in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'cryo' AND c.relkind = 'v'").fetchall():
            conn.execute(f"DROP VIEW IF EXISTS {name} CASCADE")
        for (sig,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'cryo' AND NOT EXISTS (SELECT 1 FROM pg_depend d"
            "   WHERE d.objid = p.oid AND d.deptype = 'e')").fetchall():
            conn.execute(f"DROP FUNCTION IF EXISTS {sig} CASCADE")
        for f in function_files():
            try:
                conn.execute(f.read_text(encoding="ascii"))
            except psycopg.Error as exc:
                raise MigrationError(f"{f.name}: {str(exc).strip().splitlines()[0]}") from exc
        conn.execute(f"COMMENT ON SCHEMA cryo IS '{_MARK}{digest}'")
    return True


def migrate(dsn: str) -> bool:
    """Apply pending migrations and changed functions. Returns True if anything changed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = _applied_versions(conn)
    if not before >= file_versions():  # pgmigrate only when some migration is pending
        run_pgmigrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        changed = _applied_versions(conn) != before
        return apply_functions(conn) or changed


def file_versions() -> set[int]:
    """The versions of the migration files (V<n>__<what>.sql)."""
    return {int(f.name[1:].split("__", 1)[0]) for f in (SQL_DIR / "migrations").glob("V*__*.sql")}


def _applied_versions(conn: psycopg.Connection) -> set[int]:
    row = conn.execute(
        "SELECT to_regclass('public.schema_version') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return set()
    return {v for (v,) in conn.execute("SELECT version FROM public.schema_version")}
