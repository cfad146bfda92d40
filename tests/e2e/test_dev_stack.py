"""The dev stack's rough edges (issue 24 item 11): a master key rotated under a running
`cryopg dev` is the key its next start uses; a taken port is refused before any cluster
is created; a stack stopped while PostgreSQL is down exits within 5 s."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cryopg.seal import generate_master_key
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import script, show, submit, wait_for
from tests.e2e.test_outage import OwnStack

# Its tests stop, restart and re-key their stacks: never the worker's shared one.
pytestmark = pytest.mark.private_stack

CLI = [sys.executable, "-m", "cryopg.cli.entry"]


def _start_dev(dir: Path, dsn: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`cryopg dev` in `dir` on `dsn`, as the `stack` fixture starts it; returns it and its URL."""
    dev_json = dir / ".cryopg" / "dev.json"
    with open(dir / "dev2.stderr", "ab") as err:
        proc = subprocess.Popen(
            [*CLI, "dev", "--database-url", dsn, "--port", str(_free_tcp_port()), "--agents", "1",
             "--no-sample", "--claim-seconds", "3", "--tick-interval", "0.3"],
            cwd=dir, env=env, stdout=err, stderr=err, stdin=subprocess.DEVNULL)

    def up() -> str | None:
        assert proc.poll() is None, (dir / "dev2.stderr").read_text()
        try:
            url = str(json.loads(dev_json.read_text())["url"])
        except (OSError, ValueError, KeyError):
            return None
        return url if _healthy(url) else None

    return proc, wait_for("cryopg dev to start again", up, timeout=60)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_master_key_rotate_in_a_dev_directory_rotates_the_stacks_key(stack: Any,
                                                                      dsn: str) -> None:
    run_id = submit(stack, script(stack.dir, "wf.sh", "echo sealed\n"), "--input",
                    '{"order": 42}')
    wait_for("the run to end", lambda: show(stack, run_id)["status"] == "succeeded")
    key_file = stack.dir / ".cryopg" / "master.key"
    old = key_file.read_text()
    done = stack.cli("master-key", "rotate", "--generate")  # no CRYOPG_MASTER_KEY: the file's
    assert done.returncode == 0, done.stderr
    new = done.stdout.strip()
    assert key_file.read_text().strip() == new and new != old.strip()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert "restart `cryopg dev`" in done.stderr, done.stderr
    assert not key_file.with_name("master.key.new").exists()
    # The next start reads the new key, and everything sealed before still opens.
    _stop(stack.proc)
    proc, _ = _start_dev(stack.dir, dsn, stack.env)
    try:
        assert show(stack, run_id)["input"] == {"order": 42}
        again = submit(stack, script(stack.dir, "wf2.sh", "echo ok\n"), "--input", '{"a": 1}')
        wait_for("a new run", lambda: show(stack, again)["status"] in ("succeeded", "failed"))
        assert show(stack, again)["status"] == "succeeded"
    finally:
        _stop(proc)


def test_a_wrong_current_key_rotates_nothing(stack: Any) -> None:
    submit(stack, script(stack.dir, "wf.sh", "echo sealed\n"))  # the org has a key now
    key_file = stack.dir / ".cryopg" / "master.key"
    before = key_file.read_text()
    env = dict(stack.env, CRYOPG_MASTER_KEY=generate_master_key())  # not the stack's key
    done = subprocess.run([*CLI, "master-key", "rotate", "--generate"], cwd=stack.dir, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert key_file.read_text() == before
    assert not key_file.with_name("master.key.new").exists()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the postgres OS user can enter (pytest's tmp tree is closed to it), so
    a `cryopg dev` there could really make a cluster."""
    made = Path(tempfile.mkdtemp(prefix="cryo-port-"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_taken_port_is_refused_before_a_cluster_is_made(open_dir: Path) -> None:
    env = dict(os.environ)
    env.pop("CRYOPG_MASTER_KEY", None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run([*CLI, "dev", "--port", str(port), "--no-sample"], cwd=open_dir,
                              env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"another process holds port {port}" in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert not (open_dir / ".cryopg" / "pgdata").exists()


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[OwnStack]:
    stack = OwnStack(tmp_path, 1, claim_seconds=30)
    try:
        yield stack
    finally:
        stack.close()


def test_a_stack_stopped_while_postgres_is_down_exits_within_5s(own_stack: OwnStack) -> None:
    own_stack.cluster.stop()
    wait_for("the server to lose its database",
             lambda: "lost its connection" in own_stack.err.read_text(), timeout=30)
    started = time.monotonic()
    own_stack.proc.send_signal(signal.SIGINT)
    try:
        own_stack.proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    took = time.monotonic() - started
    print(f"stopped in {took:.2f}s")
    assert took < 5, f"exited after {took:.1f}s:\n{own_stack.err.read_text()[-3000:]}"
    assert "Traceback" not in own_stack.err.read_text(), own_stack.err.read_text()[-6000:]
