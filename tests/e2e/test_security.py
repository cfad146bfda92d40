"""Security end to end, through a real `cryopg dev`: secrets are injected, redacted and
withheld from untrusted runs, and payloads that will not open (or a server started with
the wrong master key) end their run as unreadable instead of re-running a step.

Tenancy, roles, tokens, agent ceilings and a corrupt memo met at claim time need no
script and no process of their own: tests/server covers them in process."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from cryopg.seal import generate_master_key
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import lines, script, show, submit, wait_for

# Whole-log assertions: a claim lapsing on a loaded machine would replay a pass and
# print its lines twice, so these runs keep a claim long enough to ride out the load.
pytestmark = pytest.mark.claim_seconds(30)

SECRET = "s3cr3t-VALUE-0042"
CLI = [sys.executable, "-m", "cryopg.cli.entry"]


def _set_secret(stack: Any, name: str, value: str) -> None:
    done = stack.cli("secret", "set", name, input=value + "\n")
    assert done.returncode == 0, done.stderr


def test_secrets_are_injected_and_redacted_even_split_across_flushes(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    assert stack.cli("secret", "list").stdout.split() == ["API_KEY"]
    wf = script(stack.dir, "s.sh", """\
echo "whole: $API_KEY"
printf 'split: %s' "$(echo "$API_KEY" | cut -c1-6)"
sleep 0.5
printf '%s\\n' "$(echo "$API_KEY" | cut -c7-)"
cryopg step use --secret API_KEY -- sh -c 'echo "in step: $API_KEY"'
""")
    run_id = submit(stack, wf)
    done = stack.cli("logs", run_id, "--follow")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout and SECRET[:6] not in done.stdout.replace("[secret]", "")
    assert done.stdout.count("[secret]") == 3, done.stdout
    assert "in step: [secret]" in done.stdout
    assert stack.cli("secret", "delete", "API_KEY").returncode == 0
    assert stack.cli("secret", "list").stdout.strip() == ""


def test_untrusted_run_gets_no_secret_and_a_step_needing_one_fails(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    charged = stack.dir / "charged"
    wf = script(stack.dir, "u.sh", f"""\
echo "env: [${{API_KEY:-none}}]"
cryopg step charge --secret API_KEY -- sh -c 'echo x >> {charged}'
echo "after the step"
""")
    run_id = submit(stack, wf, "--untrusted")
    done = stack.cli("logs", run_id, "--follow")
    assert done.returncode == 1
    assert "env: [none]" in done.stdout and "after the step" not in done.stdout
    run = show(stack, run_id)
    assert run["status"] == "failed" and "withheld" in run["error"], run
    assert not charged.exists()


def _wait_status(dsn: str, run_id: str, want: str, timeout: float = 60) -> None:
    seen: list[Any] = []

    def probe() -> bool:
        with psycopg.connect(dsn, autocommit=True) as db:
            got = db.execute("SELECT status, error FROM cryo.get_run(%s)", (run_id,)).fetchone()
        seen[:] = [got]
        return got[0] == want
    try:
        wait_for(f"run {run_id} to be {want}", probe, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


PARKING = """\
cryopg step charge -- sh -c 'echo x >> {calls}; echo charged'
cryopg sleep 1s
echo resumed
"""


def _stop_stack(stack: Any) -> None:
    stack.proc.send_signal(signal.SIGINT)
    stack.proc.wait(15)


def _server_and_agent(stack: Any, dsn: str, master_key: str) -> list[subprocess.Popen[bytes]]:
    env = dict(stack.env, CRYOPG_MASTER_KEY=master_key)
    port = _free_tcp_port()
    url = f"http://127.0.0.1:{port}"
    log = open(stack.dir / f"split-{port}.log", "wb")
    procs = [subprocess.Popen([*CLI, "server", "--database-url", dsn, "--port", str(port),
                               "--tick-interval", "0.2"], env=env, stdout=log, stderr=log,
                              start_new_session=True)]
    wait_for("the server", lambda: _healthy(url), timeout=30)
    procs.append(subprocess.Popen([*CLI, "agent", "--url", url, "--token",
                                   stack.info["agent_token"]], env=env, cwd=stack.dir,
                                  stdout=log, stderr=log, start_new_session=True))
    return procs


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.mark.private_stack  # it stops the stack and rotates the org's key
def test_wrong_master_key_ends_runs_unreadable_and_rotation_keeps_them_readable(
        stack: Any, dsn: str) -> None:
    calls = stack.dir / "calls"
    # Both runs wait for a signal, not a timer: however slow the machine, neither wakes
    # before it is meant to (a 1 s sleep could end, and the run succeed, before a poll saw
    # it parked). The wrong run is signalled once the wrong-key server runs.
    wrong = submit(stack, script(stack.dir, "w.sh", PARKING.format(calls=calls).replace(
        "cryopg sleep 1s", "cryopg wait-signal go")))
    kept = submit(stack, script(stack.dir, "k.sh", PARKING.format(calls=calls).replace(
        "cryopg sleep 1s", "cryopg wait-signal go")))
    _wait_status(dsn, wrong, "parked")
    _wait_status(dsn, kept, "parked")
    _stop_stack(stack)
    old = (stack.dir / ".cryopg" / "master.key").read_text().strip()
    # A server with a key that never wrapped this org: the due run ends unreadable.
    procs = _server_and_agent(stack, dsn, generate_master_key())
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("SELECT cryo.send_signal(%s, 'go')", (wrong,))
        _wait_status(dsn, wrong, "unreadable")
    finally:
        _kill(procs)
    # Rotate to a new key; the other run then resumes under it, its step not re-run.
    new = generate_master_key()
    env = dict(stack.env, CRYOPG_MASTER_KEY=old)
    done = subprocess.run([*CLI, "master-key", "rotate", "--database-url", dsn], input=new + "\n",
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    procs = _server_and_agent(stack, dsn, new)
    try:
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("SELECT cryo.send_signal(%s, 'go')", (kept,))
        _wait_status(dsn, kept, "succeeded")
    finally:
        _kill(procs)
    assert lines(calls) == ["x", "x"]  # one charge per run, none repeated
    with psycopg.connect(dsn, autocommit=True) as db:
        wrapped = db.execute("SELECT wrapped_key FROM cryo.get_org_key('dev')").fetchone()[0]
    assert base64.b64decode(new) not in bytes(wrapped)  # the key itself is never stored
