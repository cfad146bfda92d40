"""Trust as a property of data, end to end (docs/security/trust.md): through a real
`cryopg dev` and its confining agent, an untrusted run (what a fork's pull request
starts) tries what issue 37 found -- read the project's cells, artifacts and events,
replace them, wake trusted waiters, cancel trusted graphs -- and gets only its own
tainted namespace and what trusted writers published; trusted runs read or hear the
tainted data only when they ask for it by name."""

from __future__ import annotations

import hashlib
import json
import shutil
from typing import Any

import psycopg
import pytest

from tests.e2e.helpers import script, show, submit, wait_for

# Whole-log assertions: a claim lapsing on a loaded machine would replay a pass.
pytestmark = [
    pytest.mark.claim_seconds(30),
    pytest.mark.skipif(shutil.which("bwrap") is None,
                       reason="bubblewrap is not installed (scripts/setup installs it)"),
]

SECRET = "s3cret-creds-5521"


def _log(stack: Any, run_id: str) -> str:
    """Follows the run to its end; its whole log."""
    out = stack.cli("logs", run_id, "--follow", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _status(stack: Any, run_id: str, want: str) -> dict[str, Any]:
    return wait_for(f"{run_id} to be {want}",
                    lambda: (r := show(stack, run_id))["status"] == want and r, timeout=60)


def test_an_untrusted_run_reads_only_published_data_and_writes_beside_trusted_data(
        stack: Any, dsn: str) -> None:
    writer = submit(stack, script(stack.dir, "writer.sh", f"""\
set -e
cryopg state set creds {SECRET} --entity shared
echo trusted-tool > tool.txt
cryopg artifact put tool tool.txt --key K
cryopg artifact put own tool.txt
echo wrote
"""))
    assert "wrote" in _log(stack, writer)
    attacker = submit(stack, script(stack.dir, "attack.sh", f"""\
echo "creds=[$(cryopg state get creds --entity shared)]"
cryopg state list --entity shared
cryopg artifact get tool got.txt --key K 2>/dev/null && echo "LEAK cached $(cat got.txt)"
cryopg artifact get own got2.txt --run {writer} 2>/dev/null && echo "LEAK run $(cat got2.txt)"
cryopg artifact list --cached
cryopg state set creds evil --entity shared
echo evil-tool > evil.txt
cryopg artifact put tool evil.txt --key K >/dev/null
echo "mine=[$(cryopg state get creds --entity shared)]"
cryopg artifact get tool back.txt --key K && echo "back=$(cat back.txt)"
echo trusted-tool > guess.txt
cryopg artifact put guess guess.txt >/dev/null && cryopg artifact get guess g.txt \
    && echo "guess=$(cat g.txt)"
echo done
"""), "--untrusted")
    log = _log(stack, attacker)
    assert "done" in log, log
    # A right guess of a trusted blob's content is its own artifact only because its
    # bytes went through the server, which hashed them (the blob was not there for it).
    assert "guess=trusted-tool" in log, log
    with psycopg.connect(dsn) as db:
        assert db.execute("SELECT untrusted_known FROM cryo.artifact_blobs WHERE sha256 = %s",
                          (hashlib.sha256(b"trusted-tool\n").hexdigest(),)).fetchall() == [(True,)]
    assert "creds=[]" in log and "LEAK" not in log and SECRET not in log, log
    assert "mine=[evil]" in log and "back=evil-tool" in log, log  # its own writes, back
    reader = submit(stack, script(stack.dir, "reader.sh", """\
echo "creds=[$(cryopg state get creds --entity shared)]"
cryopg artifact get tool t.txt --key K && echo "tool=$(cat t.txt)"
echo "tainted=[$(cryopg state get creds --entity shared --tainted)]"
cryopg artifact get tool tt.txt --key K --tainted && echo "ttool=$(cat tt.txt)"
set -e
cryopg state set cfg public-config --entity shared --public
cryopg artifact put pub t.txt --key K2 --public >/dev/null
echo published
"""))
    log = _log(stack, reader)
    assert f"creds=[{SECRET}]" in log and "tool=trusted-tool" in log, log  # not replaced
    assert "tainted=[evil]" in log and "ttool=evil-tool" in log, log  # asked for by name
    assert "published" in log, log
    # What a trusted writer published, an untrusted run reads.
    consumer = submit(stack, script(stack.dir, "consume.sh", """\
echo "cfg=[$(cryopg state get cfg --entity shared)]"
cryopg artifact get pub pub.txt --key K2 && echo "pub=$(cat pub.txt)"
echo "creds=[$(cryopg state get creds --entity shared)]"
"""), "--untrusted")
    log = _log(stack, consumer)
    assert "cfg=[public-config]" in log and "pub=trusted-tool" in log, log
    assert "creds=[evil]" in log and SECRET not in log, log  # its namespace, not the secret
    # People see the trusted cell, and the tainted one when they ask.
    got = stack.cli("state", "get", "creds", "--entity", "shared")
    assert got.stdout.strip() == SECRET, got.stderr
    got = stack.cli("state", "get", "creds", "--entity", "shared", "--tainted")
    assert got.stdout.strip() == "evil", got.stderr


def _graph(stack: Any, name: str, cancel_on: dict[str, Any], *args: str) -> str:
    path = script(stack.dir, name, json.dumps({
        "version": "cryosleep-graph/v1", "cancel_on": cancel_on,
        "nodes": [{"id": "hold", "type": "wait", "config": {"sleep": "1h"}}]}))
    return submit(stack, path, *args)


EMITS = """\
cryopg emit deploy.approved '"evil"'
cryopg emit pr.closed
cryopg emit deploy.started
echo emitted
"""


def test_an_untrusted_runs_events_wake_cancel_and_start_only_what_opted_in(
        stack: Any, dsn: str) -> None:
    assert stack.cli("workflow", "put", "h", str(script(stack.dir, "h.sh", "echo handled\n"))
                     ).returncode == 0
    done = stack.cli("handler", "create", "on-start", "--event", "deploy.started",
                     "--workflow", "h")
    assert done.returncode == 0, done.stderr
    waiter = submit(stack, script(stack.dir, "w.sh",
                                  'echo "approved=$(cryopg wait-event deploy.approved)"\n'))
    untrusted_waiter = submit(stack, script(stack.dir, "uw.sh",
                                            'echo "got=$(cryopg wait-event deploy.done)"\n'),
                              "--untrusted")
    trusted_graph = _graph(stack, "g.json", {"event": "pr.closed"})
    untrusted_graph = _graph(stack, "g3.json", {"event": "pr.closed"}, "--untrusted")
    for run_id in (waiter, untrusted_waiter, trusted_graph, untrusted_graph):
        _status(stack, run_id, "parked")
    emits = script(stack.dir, "emit.sh", EMITS)
    assert "emitted" in _log(stack, submit(stack, emits, "--untrusted"))
    # Woken, cancelled and started in the emits' own transactions: settled by now.
    _status(stack, untrusted_graph, "cancelled")
    assert show(stack, waiter)["status"] == "parked"
    assert show(stack, trusted_graph)["status"] == "parked"
    with psycopg.connect(dsn) as db:
        handled = db.execute("SELECT id, untrusted FROM cryo.runs WHERE trigger_kind = 'event'"
                             ).fetchall()
    assert [u for _, u in handled] == [True], handled  # the handler run is untrusted
    assert "handled" in _log(stack, handled[0][0])
    # A trusted event reaches an untrusted waiter only when it is published.
    assert stack.cli("emit", "deploy.done", '"private"').returncode == 0
    assert show(stack, untrusted_waiter)["status"] == "parked"
    assert stack.cli("emit", "deploy.done", '"hello"', "--public").returncode == 0
    log = _log(stack, untrusted_waiter)
    assert "got=hello" in log and "private" not in log, log
    # Trusted runs that opt in by name hear, and are cancelled by, untrusted runs' events.
    opted = submit(stack, script(stack.dir, "w2.sh",
                                 'echo "heard=$(cryopg wait-event deploy.approved --tainted)"\n'))
    opted_graph = _graph(stack, "g2.json", {"event": "pr.closed", "tainted": True})
    for run_id in (opted, opted_graph):
        _status(stack, run_id, "parked")
    assert "emitted" in _log(stack, submit(stack, emits, "--untrusted"))
    assert "heard=evil" in _log(stack, opted)
    _status(stack, opted_graph, "cancelled")
    assert show(stack, waiter)["status"] == "parked"
    assert show(stack, trusted_graph)["status"] == "parked"
    # Trusted events still wake and cancel the trusted runs as before.
    assert stack.cli("emit", "deploy.approved", '"ok"').returncode == 0
    assert "approved=ok" in _log(stack, waiter)
    assert stack.cli("emit", "pr.closed").returncode == 0
    _status(stack, trusted_graph, "cancelled")
