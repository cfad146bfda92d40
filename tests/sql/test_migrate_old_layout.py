"""A database populated under the old layout (migrations up to V0006, whose queue said
`lease_expires_at` and whose history said `lease_expired`) migrates to the current one
without losing a run, a memo, a cell or a lease, and the engine carries on with them."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cryopg.migrate import _pgmigrate, migrate
from cryopg.paths import SQL_DIR

OLD_LAYOUT = 6  # the last migration before claims and leases got separate words
TOKEN = uuid.UUID("00000000-0000-4000-8000-000000000001")


@pytest.fixture
def old_dsn(dsn: str) -> Iterator[str]:
    name = "cryo_old_" + uuid.uuid4().hex[:8]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    target = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})
    subprocess.run([_pgmigrate(), "-d", str(SQL_DIR), "-c", target, "-t", str(OLD_LAYOUT),
                    "migrate"], check=True, capture_output=True)
    yield target
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _populate(conn: psycopg.Connection) -> None:
    """Rows as the old functions left them: one run in each live state, a memo, a
    pending marker, a cell, a held lease with a waiter, and history."""
    conn.execute("""
        INSERT INTO cryo.runs (id, org, project, filename, source, status, substate, attempt,
                               created_at, updated_at, concurrency_group)
        VALUES ('dev:default:run-claimed', 'dev', 'default', 'a.sh', '\\x00', 'running', NULL, 1,
                now(), now(), 'deploy'),
               ('dev:default:run-sleeping', 'dev', 'default', 'b.sh', '\\x00', 'parked',
                'sleeping', 1, now(), now(), NULL),
               ('dev:default:run-queued', 'dev', 'default', 'c.sh', '\\x00', 'queued', NULL, 0,
                now(), now(), 'deploy')""")
    conn.execute("""
        INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at,
                                claim_token, agent_id, claimed_at, lease_expires_at)
        VALUES ('dev:default:run-claimed', 'dev', 'default', 'claimed', '{shell}', now(),
                %s, 'agent-1', now(), '2100-01-01')""", (TOKEN,))
    conn.execute("""
        INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at,
                                wake_at, park_reason, park_path, parked_at)
        VALUES ('dev:default:run-sleeping', 'dev', 'default', 'parked', '{shell}', now(),
                now() - interval '1 second', 'sleeping', 'sleep//0', now())""")
    conn.execute("""
        INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family,
                                  key_name, key_ordinal, attempt, status, result, exit_code,
                                  due_at, created_at, completed_at)
        VALUES ('dev:default:run-claimed', 'dev', 'default', 0, 'step/build/0', 'run', 'step',
                'build', 0, 1, 'done', '\\x01', 0, NULL, now(), now()),
               ('dev:default:run-sleeping', 'dev', 'default', 0, 'sleep//0', 'run', 'sleep', '',
                0, 1, 'pending', NULL, NULL, now() - interval '1 second', now(), NULL)""")
    conn.execute("""
        INSERT INTO cryo.state_cells (org, project, scope, entity, key, value, version,
                                      created_by_run, updated_by_run, created_at, updated_at)
        VALUES ('dev', 'default', 'dev:default:entity:ledger', 'ledger', 'seen', '\\x02', 3,
                'dev:default:run-claimed', 'dev:default:run-claimed', now(), now())""")
    conn.execute("""
        INSERT INTO cryo.leases (org, project, grp, holder_run_id, kind, acquired_at)
        VALUES ('dev', 'default', 'deploy', 'dev:default:run-claimed', 'admission', now())""")
    conn.execute("""
        INSERT INTO cryo.lease_waiters (org, project, grp, run_id, kind, enqueued_at)
        VALUES ('dev', 'default', 'deploy', 'dev:default:run-queued', 'admission', now())""")
    conn.execute("""
        INSERT INTO cryo.history (run_id, org, project, kind, created_at)
        VALUES ('dev:default:run-claimed', 'dev', 'default', 'lease_expired', now())""")


def test_old_layout_migrates_and_the_engine_carries_on(old_dsn: str) -> None:
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        _populate(conn)
        counts = {t: conn.execute(f"SELECT count(*) FROM cryo.{t}").fetchone()[0]
                  for t in ("runs", "queue", "journal", "state_cells", "leases", "lease_waiters",
                            "history")}
    assert migrate(old_dsn) is True
    with psycopg.connect(old_dsn, autocommit=True) as conn:
        for table, n in counts.items():
            assert conn.execute(f"SELECT count(*) FROM cryo.{table}").fetchone()[0] == n, table
        assert conn.execute("SELECT claim_expires_at FROM cryo.queue WHERE state = 'claimed'"
                            ).fetchone()[0].year == 2100
        assert conn.execute("SELECT kind FROM cryo.history").fetchall() == [("claim_expired",)]
        # The claim taken under the old layout is still live, its memo still answers.
        run = "dev:default:run-claimed"
        renewed = conn.execute("SELECT cryo.renew_claim(%s, %s, 30)", (run, TOKEN)).fetchone()
        assert renewed == (False,)
        assert conn.execute("SELECT path, result FROM cryo.read_journal(%s, %s)",
                            (run, TOKEN)).fetchall() == [("step/build/0", b"\x01")]
        assert conn.execute("SELECT run_id FROM cryo.live_claims").fetchall() == [(run,)]
        # The due sleeper wakes; the lease goes to the queued run when its holder ends.
        assert conn.execute("SELECT woken FROM cryo.tick()").fetchone() == (1,)
        conn.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run, TOKEN))
        assert conn.execute("SELECT id, status FROM cryo.runs ORDER BY id").fetchall() == [
            ("dev:default:run-claimed", "succeeded"), ("dev:default:run-queued", "pending"),
            ("dev:default:run-sleeping", "pending")]
        assert conn.execute("SELECT holder_run_id FROM cryo.lease_holders").fetchall() == [
            ("dev:default:run-queued",)]
        assert conn.execute("SELECT value, version FROM cryo.state_get(%s, 'seen')",
                            ("dev:default:entity:ledger",)).fetchone() == (b"\x02", 3)
