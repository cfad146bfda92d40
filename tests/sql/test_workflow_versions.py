"""The SQL contract behind editing workflows and triggers in the UI: versions kept by
put_workflow (an unchanged put adds none, a stale base version is refused), webhook
deliveries delivered again as rows of their own, paused webhooks and handlers, and
triggers a workflow's `on:` owns."""

from __future__ import annotations

import psycopg
import pytest

PUT = ("SELECT cryo.put_workflow('dev', 'default', 'w', %s, NULL, %s, NULL, NULL, %s, %s, %s)")


def _put(db: psycopg.Connection, digest: bytes, by: str | None = "ann", base: int | None = None,
         filename: str = "w.sh") -> int:
    return db.execute(PUT, (filename, b"sealed-" + digest, digest, by, base)).fetchone()[0]


def test_versions_are_kept_with_who_and_an_unchanged_put_adds_none(db: psycopg.Connection) -> None:
    assert _put(db, b"a") == 1
    assert _put(db, b"a", by="bob") == 1  # same digest, file and directory: no new version
    assert _put(db, b"b", by="bob") == 2
    assert _put(db, b"b", filename="w.py") == 3  # a new file name is a change
    rows = db.execute("SELECT version, created_by, current FROM "
                      "cryo.list_workflow_versions('dev', 'default', 'w')").fetchall()
    assert rows == [(3, "ann", True), (2, "bob", False), (1, "ann", False)]
    got = db.execute("SELECT source, created_by FROM "
                     "cryo.get_workflow_version('dev', 'default', 'w', 2)").fetchone()
    assert got == (b"sealed-b", "bob")
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT * FROM cryo.get_workflow_version('dev', 'default', 'w', 9)")
    assert exc.value.sqlstate == "CR005"


def test_a_save_over_a_newer_version_is_refused(db: psycopg.Connection) -> None:
    assert _put(db, b"a", base=0) == 1
    with pytest.raises(psycopg.Error) as exc:
        _put(db, b"x", base=0)  # "new" but it exists
    assert exc.value.sqlstate == "CR240"
    assert _put(db, b"b", base=1) == 2
    with pytest.raises(psycopg.Error) as exc:
        _put(db, b"c", base=1)
    assert exc.value.sqlstate == "CR240"
    versions = db.execute("SELECT count(*) FROM cryo.workflow_versions").fetchone()[0]
    assert versions == 2  # nothing of the refused saves stored


def test_redelivery_is_a_new_row_routed_as_the_webhook_is_now(db: psycopg.Connection) -> None:
    _put(db, b"a")
    db.execute("SELECT cryo.create_webhook('dev', 'default', 'gh', 'w', '\\x01', NULL)")
    first = db.execute("SELECT outcome, run_id IS NOT NULL, duplicate FROM cryo.deliver_webhook("
                       "'dev', 'default', 'gh', '\\xaa', 'push', '{}', '\\x02', '\\x03', false)"
                       ).fetchone()
    assert first == ("started", True, False)
    # The same body again is a duplicate, answered with what the first did.
    again = db.execute("SELECT outcome, duplicate FROM cryo.deliver_webhook("
                       "'dev', 'default', 'gh', '\\xaa', 'push', '{}', '\\x02', '\\x03', false)"
                       ).fetchone()
    assert again == ("started", True)
    (did,) = db.execute("SELECT id FROM cryo.list_webhook_deliveries('dev', 'default')").fetchone()
    db.execute("SELECT cryo.pause_webhook('dev', 'default', 'gh', true)")
    redo = db.execute("SELECT outcome, run_id FROM cryo.redeliver_webhook('dev', 'default', %s,"
                      " '{}', '\\x02', '\\x03', 'ann')", (did,)).fetchone()
    assert redo == ("paused", None)
    db.execute("SELECT cryo.pause_webhook('dev', 'default', 'gh', false)")
    redo = db.execute("SELECT outcome, run_id IS NOT NULL FROM cryo.redeliver_webhook("
                      "'dev', 'default', %s, '{}', '\\x02', '\\x03', 'ann')", (did,)).fetchone()
    assert redo == ("started", True)
    rows = db.execute("SELECT outcome, redelivery_of, redelivered_by, redeliverable FROM "
                      "cryo.list_webhook_deliveries('dev', 'default') ORDER BY id").fetchall()
    assert rows == [("started", None, None, True), ("paused", did, "ann", True),
                    ("started", did, "ann", True)]
    assert db.execute("SELECT count(*) FROM cryo.runs WHERE trigger_name = 'gh'").fetchone()[0] == 2
    # A delivery kept without its input (stored before redeliveries) cannot be redone.
    db.execute("UPDATE cryo.webhook_deliveries SET input = NULL WHERE id = %s", (did,))
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT * FROM cryo.read_webhook_delivery('dev', 'default', %s)", (did,))
    assert exc.value.sqlstate == "CR241"


def test_paused_handlers_and_owned_triggers(db: psycopg.Connection) -> None:
    _put(db, b"a")
    db.execute("SELECT cryo.create_handler('dev', 'default', 'h', 'push', 'w')")
    db.execute("SELECT cryo.pause_handler('dev', 'default', 'h', true)")
    db.execute("SELECT cryo.publish_event('dev', 'default', 'push', '{}')")
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 0
    db.execute("SELECT cryo.pause_handler('dev', 'default', 'h', false)")
    db.execute("SELECT cryo.update_handler('dev', 'default', 'h', 'deploy', 'w')")
    db.execute("SELECT cryo.publish_event('dev', 'default', 'deploy', '{}')")
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 1
    # A schedule registered by a workflow's on: is that workflow's to change.
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'g', 'g.json', NULL, '\\x00', %s)",
               ('{"nodes": [], "on": {"schedule": ["0 3 * * *"]}}',))
    (owned,) = db.execute("SELECT name FROM cryo.list_schedules('dev', 'default')").fetchone()
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT cryo.update_schedule('dev', 'default', %s, 'g', '0 4 * * *', 'UTC',"
                   " NULL, NULL, true, NULL)", (owned,))
    assert exc.value.sqlstate == "CR242"
