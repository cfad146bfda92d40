"""Trust as a property of data, at the SQL level (docs/security/trust.md): an untrusted
run reads nothing a trusted run wrote unless it was published, its writes to shared
scopes land in a tainted namespace that never replaces a trusted row, and its events
wake, cancel and start only what opted in. The run's trust comes from runs.untrusted,
so each rule holds whoever calls the function."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb

from cryopg.graphs.document import compile_graph
from tests.sql.conftest import status

ENTITY = "dev:default:entity:shared"
SHA_A, SHA_B = "a" * 64, "b" * 64


def _run(db: psycopg.Connection, untrusted: bool = False) -> tuple[str, object]:
    """Submits a run and claims it (an untrusted one needs an isolating agent)."""
    run_id = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'w.sh', NULL, '\\x00', "
        "p_required_caps => '{shell}', p_untrusted => %s)", (untrusted,)).fetchone()[0]
    row = db.execute("SELECT run_id, claim_token FROM cryo.claim_job('dev', 'a1', "
                     "'{shell,isolated}', 60)").fetchone()
    assert row[0] == run_id
    return run_id, row[1]


def _set(db: psycopg.Connection, run: tuple[str, object], value: bytes, key: str = "creds",
         public: bool = False) -> int:
    opt = ", p_public => true" if public else ""
    return db.execute(f"SELECT cryo.state_set(%s, %s, 'shared', %s, %s{opt})",
                      (*run, key, value)).fetchone()[0]


def _read(db: psycopg.Connection, run: tuple[str, object], key: str = "creds",
          tainted: bool = False) -> bytes | None:
    row = db.execute("SELECT value FROM cryo.run_state_get(%s, %s, 'shared', %s, %s)",
                     (*run, key, tainted)).fetchone()
    return None if row is None else bytes(row[0])


def _trusted_view(db: psycopg.Connection, key: str = "creds",
                  tainted: bool = False) -> bytes | None:
    row = db.execute("SELECT value FROM cryo.state_get(%s, %s, %s)",
                     (ENTITY, key, tainted)).fetchone()
    return None if row is None else bytes(row[0])


def test_an_untrusted_run_reads_no_trusted_cell_until_it_is_published(
        db: psycopg.Connection) -> None:
    trusted = _run(db)
    _set(db, trusted, b"trusted-creds")
    untrusted = _run(db, untrusted=True)
    assert _read(db, untrusted) is None
    assert db.execute("SELECT count(*) FROM cryo.run_state_list(%s, %s, 'shared')",
                      untrusted).fetchone() == (0,)
    assert _read(db, trusted) == b"trusted-creds"
    # Published by a trusted set: now it may read it, until a set withdraws it.
    _set(db, trusted, b"public-config", public=True)
    assert _read(db, untrusted) == b"public-config"
    assert db.execute("SELECT key, tainted, published FROM cryo.run_state_list(%s, %s, 'shared')",
                      untrusted).fetchall() == [("creds", False, True)]
    _set(db, trusted, b"private-again")
    assert _read(db, untrusted) is None
    # An untrusted run cannot publish (its writes are visible to untrusted runs anyway).
    _set(db, untrusted, b"mine", key="own", public=True)
    assert db.execute("SELECT tainted, published FROM cryo.state_cells WHERE key = 'own'"
                      ).fetchone() == (True, False)


def test_untrusted_writes_land_beside_trusted_cells_and_never_replace_them(
        db: psycopg.Connection) -> None:
    trusted = _run(db)
    _set(db, trusted, b"trusted")
    db.execute("SELECT cryo.state_set(%s, %s, 'shared', 'n', %s)", (*trusted, b"\x01"))
    untrusted = _run(db, untrusted=True)
    assert _set(db, untrusted, b"evil") == 1  # a cell of its own namespace
    add = db.execute("SELECT claimed FROM cryo.state_add(%s, %s, 'shared', 'creds', %s, NULL, "
                     "'a', 0)", (*untrusted, b"evil2")).fetchone()
    assert add == (True,)  # it holds its tainted cell (it made it), not the trusted one
    cas = db.execute("SELECT swapped FROM cryo.state_cas(%s, %s, 'shared', 'n', %s, 1, NULL, "
                     "'c', 0)", (*untrusted, b"evil3")).fetchone()
    assert cas == (False,)  # version 1 is the trusted cell's, which it cannot touch
    incr = db.execute("SELECT outcome, version FROM cryo.state_incr(%s, %s, 'shared', 'n', "
                      "NULL, NULL, NULL, NULL, 'i', 0)", untrusted).fetchone()
    assert incr == ("moved", 0)  # it counts from its own (absent) cell
    assert db.execute("SELECT cryo.state_delete(%s, %s, 'shared', 'n')", untrusted
                      ).fetchone() == (False,)
    # What trusted runs and people read is untouched.
    assert _trusted_view(db) == b"trusted" and _read(db, trusted) == b"trusted"
    assert _trusted_view(db, "n") == b"\x01"
    # The untrusted run reads its own writes back; a trusted run reads them by asking.
    assert _read(db, untrusted) == b"evil"
    assert _read(db, trusted, tainted=True) == b"evil"
    assert _trusted_view(db, tainted=True) == b"evil"
    assert db.execute("SELECT count(*) FROM cryo.state_cells WHERE scope = %s AND key = 'creds'",
                      (ENTITY,)).fetchone() == (2,)


def test_an_untrusted_graph_runs_its_state_nodes_in_the_tainted_namespace(
        db: psycopg.Connection) -> None:
    _set(db, _run(db), b"trusted")
    untrusted = _run(db, untrusted=True)
    q = db.execute("SELECT q FROM cryo.queue q WHERE run_id = %s", (untrusted[0],)).fetchone()[0]
    assert q is not None
    db.execute("SELECT cryo._state_set_cells(q, '{shared}', '{creds}', ARRAY[%s::bytea]) "
               "FROM cryo.queue q WHERE q.run_id = %s", (b"node", untrusted[0]))
    assert _trusted_view(db) == b"trusted" and _trusted_view(db, tainted=True) == b"node"


def _upload(db: psycopg.Connection, run: tuple[str, object], sha: str,
            size: int = 3) -> bool:
    """What the server records once it hashed a run's uploaded bytes to `sha`."""
    return db.execute("SELECT cryo.record_run_artifact_upload(%s, %s, %s, %s)",
                      (*run, sha, size)).fetchone()[0]


def _put(db: psycopg.Connection, run: tuple[str, object], sha: str, key: str | None = "K",
         public: bool = False, upload: bool = True) -> None:
    opt = ", p_public => true" if public else ""
    if upload:
        _upload(db, run, sha)
    db.execute(f"SELECT * FROM cryo.put_run_artifact(%s, %s, %s, 'tool', %s, 3, NULL{opt})",
               (*run, key, sha))


def _find(db: psycopg.Connection, run: tuple[str, object], key: str | None = "K",
          other: str | None = None, tainted: bool = False) -> str | None:
    row = db.execute("SELECT sha256 FROM cryo.find_run_artifact(%s, %s, %s, %s, 'tool', %s)",
                     (*run, other, key, tainted)).fetchone()
    return None if row is None else row[0]


def test_untrusted_artifacts_read_only_published_and_write_beside_trusted(
        db: psycopg.Connection) -> None:
    trusted = _run(db)
    _put(db, trusted, SHA_A)
    _put(db, trusted, SHA_A, key=None)  # its own artifact
    untrusted = _run(db, untrusted=True)
    # Writes: its put of the same (key, name) lands beside the trusted one.
    _put(db, untrusted, SHA_B)
    assert db.execute("SELECT sha256 FROM cryo.find_artifact('dev', 'default', "
                      "'dev:default:key:K', 'tool')").fetchone() == (SHA_A,)
    assert _find(db, trusted) == SHA_A
    # Reads: neither the cached artifact nor the trusted run's own, nor its blob by digest.
    assert _find(db, untrusted) == SHA_B  # its own write, back
    _put(db, trusted, SHA_A, key="K3")
    assert _find(db, untrusted, key="K3") is None
    assert _find(db, untrusted, key=None, other=trusted[0]) is None
    assert db.execute("SELECT cryo.find_run_artifact_blob(%s, %s, %s)",
                      (*untrusted, SHA_A)).fetchone() == (None,)
    assert db.execute("SELECT scope, tainted FROM cryo.list_run_artifacts(%s, %s, NULL, true)",
                      untrusted).fetchall() == [("dev:default:key:K", True)]  # not K3
    assert _find(db, trusted, tainted=True) == SHA_B  # a trusted run asks by name
    assert db.execute("SELECT sha256 FROM cryo.find_artifact('dev', 'default', "
                      "'dev:default:key:K', 'tool', true)").fetchone() == (SHA_B,)
    # A trusted put with p_public publishes; the untrusted run's own cell still wins.
    _put(db, trusted, SHA_A, key="K2", public=True)
    assert _find(db, untrusted, key="K2") == SHA_A
    assert _find(db, untrusted) == SHA_B
    # A trusted run reads an untrusted run's own artifacts only by asking.
    _put(db, untrusted, SHA_B, key=None)
    assert _find(db, trusted, key=None, other=untrusted[0]) is None
    assert _find(db, trusted, key=None, other=untrusted[0], tainted=True) == SHA_B
    # People see the untrusted run's artifacts as they are (one namespace per run).
    assert db.execute("SELECT sha256, tainted FROM cryo.find_artifact('dev', 'default', %s, "
                      "'tool')", (untrusted[0],)).fetchone() == (SHA_B, True)


def _prepare(db: psycopg.Connection, run: tuple[str, object], sha: str, size: int = 3,
             max_bytes: int | None = None) -> tuple[bool, bool]:
    return db.execute("SELECT present, verify FROM cryo.prepare_run_artifact(%s, %s, %s, %s, %s)",
                      (*run, sha, size, max_bytes)).fetchone()


def test_an_untrusted_run_learns_of_no_trusted_blob_and_names_only_bytes_it_uploaded(
        db: psycopg.Connection) -> None:
    """Blobs are shared by content address: for an untrusted run, a trusted blob is not
    there (no oracle for guesses of its content) and its digest names nothing."""
    trusted, untrusted = _run(db), _run(db, untrusted=True)
    _put(db, trusted, SHA_A, key="secret", upload=False)  # a trusted run names any blob
    assert _prepare(db, trusted, SHA_A) == (True, False)
    # (a) Not confirmed: neither by prepare nor by the bound, which counts it as new.
    assert _prepare(db, untrusted, SHA_A) == (False, True)
    with pytest.raises(psycopg.Error) as refused:
        _prepare(db, untrusted, SHA_A, max_bytes=5)
    assert refused.value.sqlstate == "CR075"
    # (b) Named by its digest alone: refused, whatever it then tries to read.
    with pytest.raises(psycopg.Error) as refused:
        _put(db, untrusted, SHA_A, key=None, upload=False)
    assert refused.value.sqlstate == "CR170"
    assert _find(db, untrusted, key=None) is None
    assert db.execute("SELECT cryo.find_run_artifact_blob(%s, %s, %s)",
                      (*untrusted, SHA_A)).fetchone() == (None,)
    # Once it uploaded the bytes (the server hashed them), it names and reads them, and
    # other untrusted runs learn of the blob: an untrusted run holds those bytes anyway.
    assert _upload(db, untrusted, SHA_A) is True
    _put(db, untrusted, SHA_A, key=None, upload=False)
    assert _find(db, untrusted, key=None) == SHA_A
    other = _run(db, untrusted=True)
    assert _prepare(db, other, SHA_A) == (True, True)
    _put(db, other, SHA_A, key=None, upload=False)
    # A published artifact shows its blob to untrusted runs; a trusted upload records
    # nothing.
    assert _upload(db, trusted, SHA_B) is False
    _put(db, trusted, SHA_B, key="pub", upload=False)
    assert _prepare(db, other, SHA_B) == (False, True)
    _put(db, trusted, SHA_B, key="pub", public=True, upload=False)
    assert _prepare(db, other, SHA_B) == (True, True)
    _put(db, other, SHA_B, key="mine", upload=False)


def _wait(db: psycopg.Connection, run: tuple[str, object], name: str,
          tainted: bool = False) -> bool:
    opt = ", p_tainted => true" if tainted else ""
    return db.execute(f"SELECT parked FROM cryo.wait_event(%s, %s, NULL, %s, 0{opt})",
                      (*run, name)).fetchone()[0]


def _emit(db: psycopg.Connection, run: tuple[str, object], name: str,
          public: bool = False) -> None:
    opt = ", p_public => true" if public else ""
    db.execute(f"SELECT cryo.emit_from_run(%s, %s, NULL, 0, %s, %s{opt})",
               (*run, name, b"payload"))


def test_events_wake_only_the_namespaces_that_may_hear_them(db: psycopg.Connection) -> None:
    trusted = _run(db)
    assert _wait(db, trusted, "deploy.approved")
    untrusted_waiter = _run(db, untrusted=True)
    assert _wait(db, untrusted_waiter, "deploy.done")
    attacker, emitter, approver = _run(db, untrusted=True), _run(db), _run(db)
    opted_in, attacker2 = _run(db), _run(db, untrusted=True)
    # An untrusted emit wakes no trusted waiter.
    _emit(db, attacker, "deploy.approved")
    assert status(db, trusted[0]) == ("parked", "awaiting-event")
    # A trusted emit reaches no untrusted waiter unless it is published.
    _emit(db, emitter, "deploy.done")
    assert status(db, untrusted_waiter[0]) == ("parked", "awaiting-event")
    db.execute("SELECT cryo.publish_event('dev', 'default', 'deploy.done', '{\"app\": 1}')")
    assert status(db, untrusted_waiter[0]) == ("parked", "awaiting-event")
    db.execute("SELECT cryo.publish_event('dev', 'default', 'deploy.done', '{\"pub\": 1}', "
               "p_public => true)")
    assert status(db, untrusted_waiter[0]) == ("pending", None)
    assert db.execute("SELECT answer_clear FROM cryo.journal WHERE run_id = %s",
                      (untrusted_waiter[0],)).fetchone() == ({"pub": 1},)
    # A trusted run hears tainted events when it opted in by name (a call of its own).
    assert _wait(db, opted_in, "deploy.approved", tainted=True)
    _emit(db, attacker2, "deploy.approved")
    assert status(db, opted_in[0]) == ("pending", None)
    assert db.execute("SELECT key_family FROM cryo.journal WHERE run_id = %s",
                      (opted_in[0],)).fetchone() == ("event.tainted",)
    assert status(db, trusted[0]) == ("parked", "awaiting-event")
    # The trusted waiter still waits for a trusted event, and gets one.
    _emit(db, approver, "deploy.approved")
    assert status(db, trusted[0]) == ("pending", None)
    rows = db.execute("SELECT name, untrusted, published FROM cryo.events ORDER BY id").fetchall()
    assert rows == [("deploy.approved", True, False), ("deploy.done", False, False),
                    ("deploy.done", False, False), ("deploy.done", False, True),
                    ("deploy.approved", True, False), ("deploy.approved", False, False)]


def _graph(db: psycopg.Connection, untrusted: bool, tainted: bool = False) -> str:
    cancel_on: dict[str, object] = {"event": "pr.closed"}
    if tainted:
        cancel_on["tainted"] = True
    compiled = compile_graph({"version": "cryosleep-graph/v1", "cancel_on": cancel_on,
                              "nodes": [{"id": "n", "type": "wait", "config": {"sleep": "1h"}}]})
    return db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL, "
                      "'\\x00', p_untrusted => %s, p_graph => %s)",
                      (untrusted, Jsonb(compiled.structure))).fetchone()[0]


def test_a_tainted_event_cancels_only_untrusted_graphs_and_those_that_opted_in(
        db: psycopg.Connection) -> None:
    trusted, untrusted = _graph(db, False), _graph(db, True)
    _emit(db, _run(db, untrusted=True), "pr.closed")
    assert status(db, trusted)[0] == "pending"
    assert status(db, untrusted)[0] == "cancelled"
    opted = _graph(db, False, True)
    _emit(db, _run(db, untrusted=True), "pr.closed")
    assert status(db, opted)[0] == "cancelled" and status(db, trusted)[0] == "pending"
    # A trusted event cancels every graph that names it.
    db.execute("SELECT cryo.publish_event('dev', 'default', 'pr.closed')")
    assert status(db, trusted)[0] == "cancelled"


@pytest.mark.parametrize("untrusted", [True, False])
def test_a_handler_started_by_a_tainted_event_runs_untrusted(db: psycopg.Connection,
                                                             untrusted: bool) -> None:
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'h', 'h.sh', NULL, '\\x00')")
    db.execute("SELECT cryo.create_handler('dev', 'default', 'on-done', 'deploy.done', 'h')")
    _emit(db, _run(db, untrusted=untrusted), "deploy.done")
    assert db.execute("SELECT untrusted, workdir FROM cryo.runs WHERE trigger_kind = 'event'"
                      ).fetchall() == [(untrusted, None)]
