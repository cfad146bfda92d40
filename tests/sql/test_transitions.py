"""The transitions layer is the only writer of run status, queue rows, journal rows and
concurrency-group leases, and "terminal" is defined once."""

from __future__ import annotations

import re

import psycopg

from cryopg.paths import REPO_ROOT, SQL_DIR

TRANSITIONS = {"_create_run", "_enqueue", "_hold_queued", "_claim", "_extend_claim",
               "_release", "_unclaim",
               "_park", "_park_on", "_wake", "_finalize", "_record", "_mark", "_drive", "_forget",
               "_take_lease", "_queue_for_lease", "_leave_lease_queues", "_hand_on_lease",
               "_release_lease", "_release_leases", "_drive_run", "_drop_lease",
               "_declare_group_limit"}
# The one exception: removing whole runs (retention, project deletion) takes their queue
# and journal rows with them; that is not a change of state.
REMOVERS = {"_delete_runs"}

WRITES = {
    "queue": re.compile(r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.queue\b", re.I),
    "journal": re.compile(r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.journal\b", re.I),
    "leases": re.compile(r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.leases\b", re.I),
    "lease_waiters": re.compile(
        r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.lease_waiters\b", re.I),
    "lease_limits": re.compile(
        r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+cryo\.lease_(limits|starts)\b", re.I),
}
# Every durable wait parks through _park_on (a marker, then the park): a bare _mark
# followed by _park is the pattern it replaced.
MARK_THEN_PARK = re.compile(r"cryo\._mark\([^;]*;\s*PERFORM\s+cryo\._park\(", re.I)
RUNS_UPDATE = re.compile(r"\bUPDATE\s+cryo\.runs\b(.*?)(\bWHERE\b|\bFROM\b|;)", re.I | re.S)
RUNS_INSERT = re.compile(r"\bINSERT\s+INTO\s+cryo\.runs\b", re.I)


def test_only_the_transitions_write_status_queue_journal_and_leases(
        db: psycopg.Connection) -> None:
    rows = db.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'cryo'").fetchall()
    assert {name for name, _ in rows} >= TRANSITIONS
    offenders = []
    for name, src in rows:
        if name in TRANSITIONS:
            continue
        for table, pattern in WRITES.items():
            if pattern.search(src) and name not in REMOVERS:
                offenders.append(f"{name} writes cryo.{table}")
        if MARK_THEN_PARK.search(src):
            offenders.append(f"{name} parks without _park_on")
        if RUNS_INSERT.search(src):
            offenders.append(f"{name} inserts into cryo.runs")
        for set_clause, _ in RUNS_UPDATE.findall(src):
            if re.search(r"\bstatus\s*=", set_clause):
                offenders.append(f"{name} sets a run's status")
    assert offenders == []


def test_the_exceptions_are_still_needed(db: psycopg.Connection) -> None:
    """REMOVERS is not empty (else the exception goes from the test above), and each of
    its functions still writes one of those tables (else it leaves the list)."""
    src = dict(db.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'cryo'").fetchall())
    assert REMOVERS
    stale = [name for name in sorted(REMOVERS)
             if not any(p.search(src.get(name, "")) for p in WRITES.values())]
    assert stale == [], "remove these from REMOVERS"


def test_terminal_statuses_are_listed_once() -> None:
    literal = re.compile(r"'succeeded',\s*'failed',\s*'cancelled',\s*'unreadable'")
    places = [f.name for f in (SQL_DIR / "functions").glob("*.sql")
              for _ in literal.finditer(f.read_text())]
    assert places == ["00_core.sql"]
    python = re.compile(r"\"succeeded\",\s*\"failed\",\s*\"cancelled\",\s*\"unreadable\"")
    for root in ("cryopg", "agent"):
        for f in (REPO_ROOT / root).rglob("*.py"):
            assert not python.search(f.read_text()), f


def test_is_terminal(db: psycopg.Connection) -> None:
    got = dict(db.execute(
        "SELECT s, cryo.is_terminal(s) FROM unnest(ARRAY['queued', 'pending', 'running', "
        "'parked', 'succeeded', 'failed', 'cancelled', 'unreadable']) s").fetchall())
    assert [s for s, t in got.items() if t] == ["succeeded", "failed", "cancelled", "unreadable"]


def test_a_path_that_disagrees_with_its_identity_is_refused(db: psycopg.Connection) -> None:
    assert db.execute("SELECT cryo.call_path('step', 'a/b%c', 2)").fetchone() == (
        "step/a%2Fb%25c/2",)
    for sql in ("SELECT cryo.call_path('step', 'a', 0, 'step/b/0')",
                "SELECT cryo.call_path('step', 'a', 0, 'step/a/1')"):
        try:
            db.execute(sql)
        except psycopg.Error as exc:
            assert exc.sqlstate == "CR009"
        else:
            raise AssertionError(f"accepted: {sql}")
