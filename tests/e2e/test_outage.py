"""Outages and lost claims (issue 17 items 11 and 12, and the fault test).

The database goes away while 20 runs are inside a step: every durable call in flight
waits it out (bounded only by the claim), so every run ends succeeded on its first attempt
and no script ever sees a failed durable call. 35 s in the suite: past the 30 s a recording
call retries without a claim to bound it (agent/api.py). CRYO_FAULT_OUTAGE_SECONDS=60
gives the minute-long fault run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cryopg.devpg import Cluster
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import script, show, wait_for

CLI = [sys.executable, "-m", "cryopg.cli.entry"]
RUNS = 20
OUTAGE_SECONDS = float(os.environ.get("CRYO_FAULT_OUTAGE_SECONDS") or 35)

FAULT_SCRIPT = """\
cryopg step before -- true
v=$(cryopg step mid -- sh -c 'touch "marks/$CRYO_IDEMPOTENCY_KEY"; sleep 3; echo ok')
n=$(cryopg state incr finished --entity fault)
cryopg step after -- echo "after $v"
echo "run finished"
"""


class OwnStack:
    """`cryopg dev` on a cluster of the test's own, which the test can stop and start."""

    def __init__(self, dir: Path, agents: int, claim_seconds: float) -> None:
        self.dir = dir
        # Outside pytest's tmp tree, which the postgres OS user may not enter.
        self.pgbase = Path(tempfile.mkdtemp(prefix="cryo-fault-"))
        self.pgbase.chmod(0o755)
        self.cluster = Cluster(self.pgbase, port=_free_tcp_port(), options=["fsync=off"])
        self.cluster.start()
        self.cluster.create_database("cryopg")
        self.dsn = self.cluster.dsn("cryopg")
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.env.pop("CRYOPG_MASTER_KEY", None)
        self.env.pop("CRYOPG_URL", None)
        self.env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + self.env["PATH"]
        port = _free_tcp_port()
        self.err = dir / "dev.stderr"
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [*CLI, "dev", "--database-url", self.dsn, "--port", str(port), "--agents",
                 str(agents), "--no-sample", "--claim-seconds", str(claim_seconds),
                 "--tick-interval", "0.5"],
                cwd=dir, env=self.env, stdout=err, stderr=err, stdin=subprocess.DEVNULL)
        dev_json = dir / ".cryopg" / "dev.json"
        wait_for("cryopg dev", lambda: dev_json.exists() and _healthy(
            json.loads(dev_json.read_text())["url"]), timeout=60)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], cwd=self.dir, env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.cluster.stop()
        shutil.rmtree(self.pgbase, ignore_errors=True)


@pytest.fixture
def own_stack(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    marker = request.node.get_closest_marker("agents")
    stack = OwnStack(tmp_path, int(marker.args[0]) if marker else 1,
                     claim_seconds=float(getattr(request, "param", 120)))
    try:
        yield stack
    finally:
        stack.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            sys.stderr.write(f"--- cryopg dev stderr ---\n{stack.err.read_text()[-6000:]}\n")


def _runs(dsn: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        return db.execute("SELECT id, status, attempt FROM cryo.runs ORDER BY id").fetchall()


@pytest.mark.agents(RUNS)
def test_a_database_outage_mid_step_fails_no_run(own_stack: OwnStack) -> None:
    stack = own_stack
    (stack.dir / "marks").mkdir()
    wf = script(stack.dir, "fault.sh", FAULT_SCRIPT)
    for _ in range(RUNS):
        done = stack.cli("submit", str(wf))
        assert done.returncode == 0, done.stderr
    wait_for("every run inside its step", lambda: len(list((stack.dir / "marks").iterdir()))
             == RUNS, timeout=120)
    stack.cluster.stop()
    started = time.monotonic()
    time.sleep(OUTAGE_SECONDS)
    stack.cluster.start()
    outage = time.monotonic() - started
    assert outage >= OUTAGE_SECONDS

    def all_finished() -> bool:
        try:
            return all(status in ("succeeded", "failed", "cancelled", "unreadable")
                       for _, status, _ in _runs(stack.dsn))
        except psycopg.OperationalError:
            return False

    wait_for("every run to finish", all_finished, timeout=180, every=1)
    runs = _runs(stack.dsn)
    assert len(runs) == RUNS
    assert [(s, a) for _, s, a in runs] == [("succeeded", 1)] * RUNS  # no replay needed
    for run_id, _, _ in runs:
        log = stack.cli("logs", run_id).stdout
        assert "run finished" in log and "after ok" in log, log
        assert "cryopg:" not in log, log  # no verb reported trouble to its script
    total = stack.cli("state", "get", "finished", "--entity", "fault").stdout.strip()
    assert total == str(RUNS)  # each incr counted once


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_an_agent_past_its_claim_kills_its_step_at_once(split: Any) -> None:
    """Item 12 (and issue 36 item 4): an agent paused past its claim (2 s here) cannot kill
    its job, so its guard does as the claim lapses: the step body it started is dead
    before the replay's body starts on another agent. The agent, woken, finds its claim
    gone and leaves the live claim's body alone."""
    pids = split.dir / "pids"
    first = split.agent("a1")
    wf = script(split.dir, "long.sh",
                f"cryopg step long -- sh -c 'echo $$ >> {pids}; exec sleep 300'\n")
    done = split.cli("submit", str(wf))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    wait_for("the step body to start", lambda: pids.exists() and pids.read_text().strip())
    body = int(pids.read_text().split()[0])
    os.kill(first.pid, signal.SIGSTOP)  # the agent freezes; its guard does not
    try:
        wait_for("the guard to kill the body as the claim lapses", lambda: not _alive(body),
                 timeout=30)
        split.agent("a2")
        wait_for("the replay's step body on a2",
                 lambda: len(pids.read_text().split()) >= 2, timeout=60)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    replay = int(pids.read_text().split()[1])
    assert _alive(replay)  # the live claim's body is untouched
    assert split.cli("cancel", run_id).returncode == 0


class Proxy:
    """A TCP relay to the server that the test can cut, as a network partition would:
    open connections drop and new ones are refused."""

    def __init__(self, url: str) -> None:
        import socket
        import threading

        self._target = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._socks: list[Any] = []
        self._cut = False
        self._socket, self._threading = socket, threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                if self._cut:
                    client.close()
                    return
                upstream = self._socket.create_connection(self._target)
            except OSError:
                return
            self._socks += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: Any, b: Any) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def cut(self) -> None:
        self._cut = True
        try:  # wakes the accept() blocked in the other thread, which close() alone does not
            self._listener.shutdown(self._socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for s in self._socks:
            try:
                s.shutdown(self._socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass


def test_an_agent_cut_off_past_its_claim_kills_its_step(split: Any) -> None:
    """Item 12, partition: an agent that cannot reach the server cannot renew its claim;
    when the claim has lapsed (2 s here) it kills the job's process group itself, since
    the run may be replaying on another agent already."""
    pids = split.dir / "pids"
    proxy = Proxy(split.url)
    split.spawn("agent", "--url", proxy.url, "--token", split.agent_token, "--id", "cut")
    wf = script(split.dir, "long.sh",
                f"cryopg step long -- sh -c 'echo $$ >> {pids}; exec sleep 300'\n")
    done = split.cli("submit", str(wf))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    wait_for("the step body to start", lambda: pids.exists() and pids.read_text().strip())
    body = int(pids.read_text().split()[0])
    proxy.cut()
    cut_at = time.monotonic()
    wait_for("the cut-off agent to kill its body", lambda: not _alive(body), timeout=10)
    assert time.monotonic() - cut_at < 6  # at the claim's lapse, not whenever it reconnects
    split.agent("a2")
    try:
        wait_for("the replay on a2", lambda: len(pids.read_text().split()) >= 2, timeout=60)
    except AssertionError:
        for log in sorted(split.dir.glob("*.log")):
            sys.stderr.write(f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}\n")
        sys.stderr.write(split.cli("runs", "show", run_id).stdout)
        raise
    assert split.cli("cancel", run_id).returncode == 0


@pytest.mark.claim_seconds(30)  # a lapse under load would replay busy.sh, not what is tested
@pytest.mark.private_stack  # it reads the stack's whole log
def test_a_job_ending_mid_call_leaves_no_traceback_in_the_agent_log(stack: Any) -> None:
    """Item 13: calls still in flight when a pass ends (a park, a cancel, the script
    exiting) are dropped quietly, not with asyncio tracebacks in the agent's log."""
    wf = script(stack.dir, "busy.sh", """\
for i in 1 2 3 4 5 6 7 8; do cryopg state incr "n$i" >/dev/null & done
for i in 1 2 3 4; do cryopg step "s$i" -- sleep 0.3 >/dev/null & done
cryopg sleep 200ms
for i in 1 2 3 4 5 6; do cryopg annotate "a$i" & done
exit 0
""")
    for _ in range(3):
        done = stack.cli("submit", str(wf), "--follow", timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    cancelled = script(stack.dir, "cancelled.sh", """\
for i in 1 2 3 4 5 6; do cryopg step "c$i" -- sleep 5 & done
wait
""")
    run_id = stack.cli("submit", str(cancelled)).stdout.strip()
    wait_for("the steps to start", lambda: show(stack, run_id)["status"] == "running")
    time.sleep(1)
    assert stack.cli("cancel", run_id).returncode == 0
    assert stack.cli("logs", run_id, "--follow", timeout=30).returncode == 130
    time.sleep(1)
    log = (stack.dir / "dev.stderr").read_text(errors="replace")
    assert "Traceback" not in log and "Task exception" not in log, log[-4000:]
