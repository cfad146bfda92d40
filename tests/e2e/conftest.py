"""Fixtures for end-to-end tests: a split deployment of separate server and agent processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cryopg.seal import generate_master_key
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import token, wait_for

CLI = [sys.executable, "-m", "cryopg.cli.entry"]


class Split:
    """`cryopg server` plus agents started and killed one by one, as in production."""

    def __init__(self, dsn: str, dir: Path) -> None:
        self.dsn, self.dir = dsn, dir
        self.env = dict(os.environ, CRYOPG_MASTER_KEY=generate_master_key(),
                        PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
        self.env.pop("CRYOPG_URL", None)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.user_token = self.token("user")
        self.agent_token = self.token("agent")
        port = _free_tcp_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = self.spawn("server", "--database-url", dsn, "--port", str(port),
                                 "--claim-seconds", "2", "--tick-interval", "0.2")
        wait_for("the server", lambda: _healthy(self.url), timeout=30)
        self.env.update(CRYOPG_URL=self.url, CRYOPG_TOKEN=self.user_token)

    def token(self, kind: str) -> str:
        """What `cryopg token --kind KIND` does (its own tests run the CLI), in this process:
        two interpreter starts less for every deployment."""
        return token(self.dsn, kind, member="owner" if kind == "user" else None)

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{args[0]}-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([*CLI, *args], env=self.env, cwd=self.dir, stdout=log, stderr=log,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def agent(self, name: str) -> subprocess.Popen[bytes]:
        return self.spawn("agent", "--url", self.url, "--token", self.agent_token, "--id", name)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=self.env, cwd=self.dir, capture_output=True,
                              text=True, timeout=timeout)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def split(dsn: str, tmp_path: Path) -> Iterator[Split]:
    deployment = Split(dsn, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


