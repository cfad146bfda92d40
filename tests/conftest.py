"""Session fixtures: one throwaway PostgreSQL cluster, one migrated template database,
a fresh clone of it per test (`postgresql`, `dsn`), and a real dev stack (`stack`)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from pytest_postgresql import factories

from cryopg.devpg import Cluster

TEST_OPTIONS = ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]
_BASE_PREFIX = "cryopg-test-"


def _reap_stale_clusters() -> None:
    # A killed session leaves its cluster running; stop those whose pytest is gone.
    for d in Path("/tmp").glob(_BASE_PREFIX + "*"):
        pid = d.name.removeprefix(_BASE_PREFIX)
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            Cluster(d).stop()
        except Exception:
            pass
        shutil.rmtree(d, ignore_errors=True)


def _pick_base_and_port() -> tuple[Path, int]:
    base = Path("/tmp") / f"{_BASE_PREFIX}{os.getpid()}"
    # pytest-xdist workers (gw0, gw1 ...) start together: each probes from its own range so
    # two never settle on the same free port.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    port = 55432 + 20 * (int(worker) if worker.isdigit() else 0)
    while (base / "run" / f".s.PGSQL.{port}").exists():
        port += 1
    return base, port


# Chosen at import: the pytest-postgresql factories below need host and port up front.
_BASE, _PORT = _pick_base_and_port()
_cluster = Cluster(_BASE, port=_PORT, options=TEST_OPTIONS)


def _stop_cluster() -> None:
    try:
        _cluster.stop()
    finally:
        shutil.rmtree(_BASE, ignore_errors=True)


def _xdist_controller(session: pytest.Session) -> bool:
    # Under `pytest -n N` the controller runs no test: only its workers need a cluster.
    return bool(getattr(session.config.option, "numprocesses", None)) and \
        "PYTEST_XDIST_WORKER" not in os.environ


def pytest_sessionstart(session: pytest.Session) -> None:
    if _xdist_controller(session):
        return
    _reap_stale_clusters()
    _BASE.mkdir(exist_ok=True)
    _BASE.chmod(0o755)  # when root, the postgres OS user must enter it
    atexit.register(_stop_cluster)  # also covers sessions that die before sessionfinish
    # Artifact bytes of servers built in process (whose default is ./.cryopg-artifacts,
    # the checkout) go with the cluster; a test that cares sets its own directory.
    os.environ["CRYOPG_ARTIFACTS_DIR"] = str(_BASE / "artifacts")
    _cluster.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _xdist_controller(session):
        return
    atexit.unregister(_stop_cluster)
    _stop_cluster()


def _migrate(
    host: str, port: int, user: str, dbname: str, password: str | None = None, **_: Any
) -> None:
    import psycopg

    from cryopg.migrate import migrate  # lazy: only tests that use a database need it

    conninfo = make_conninfo("", host=host, port=port, user=user, dbname=dbname)
    migrate(conninfo)
    # A test database: cryo.fake_now moves its clock (every test's clone inherits the mark).
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT cryo.mark_test_database()")


postgresql_noproc = factories.postgresql_noproc(
    host=str(_cluster.sockdir), port=_PORT, user="cryopg", dbname="cryotest", load=[_migrate]
)
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def dsn(postgresql: Any) -> str:
    """libpq conninfo of this test's fresh, migrated database."""
    i = postgresql.info
    return make_conninfo("", host=i.host, port=i.port, user=i.user, dbname=i.dbname)


# -- end-to-end stack -------------------------------------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Keep each phase's report on the item so fixtures can tell whether the test failed.
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    dir: Path
    url: str
    proc: subprocess.Popen[bytes]
    env: dict[str, str] = field(repr=False)
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    def cli(
        self, *args: str, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the CLI as a user would, from the stack's directory."""
        return subprocess.run(
            [sys.executable, "-m", "cryopg.cli.entry", *args],
            cwd=self.dir,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/api/v1/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def stack(request: pytest.FixtureRequest, dsn: str, tmp_path: Path) -> Iterator[Stack]:
    """`cryopg dev` against this test's database; `@pytest.mark.agents(n)` sets agents,
    `@pytest.mark.claim_seconds(n)` the claims' length (default 3) and
    `@pytest.mark.dev_env(NAME=value)` adds environment for the dev process (its agents)."""
    marker = request.node.get_closest_marker("agents")
    agents = int(marker.args[0]) if marker else 1
    env = dict(os.environ)
    env.pop("CRYOPG_MASTER_KEY", None)  # dev generates one under .cryopg/
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTEST_CURRENT_TEST", None)
    extra = request.node.get_closest_marker("dev_env")
    if extra:
        env.update(extra.kwargs)
    port = _free_tcp_port()
    cmd = [sys.executable, "-m", "cryopg.cli.entry", "dev", "--database-url", dsn]
    cmd += ["--port", str(port), "--agents", str(agents), "--no-sample"]
    # Short claims make the tests of a lapsed claim quick; a test that checks no lapse
    # asks for a longer one (`@pytest.mark.claim_seconds(n)`), since on a loaded machine
    # a renewal can come later than 3 s without anything being wrong.
    claim = request.node.get_closest_marker("claim_seconds")
    cmd += ["--claim-seconds", str(claim.args[0] if claim else 3), "--tick-interval", "0.3"]
    err_path = tmp_path / "dev.stderr"
    with open(err_path, "wb") as err, open(tmp_path / "dev.stdout", "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL
        )

    def stderr_text() -> str:
        return err_path.read_text(errors="replace")

    dev_json = tmp_path / ".cryopg" / "dev.json"
    deadline = time.monotonic() + 30
    info: dict[str, Any] = {}
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"cryopg dev exited with {proc.returncode}:\n{stderr_text()}")
            if not info and dev_json.exists():
                try:
                    info = json.loads(dev_json.read_text())
                except ValueError:
                    info = {}  # caught mid-write
            if info and _healthy(info["url"]):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"cryopg dev not healthy within 30 s:\n{stderr_text()}")
            time.sleep(0.1)
        yield Stack(dir=tmp_path, url=info["url"], proc=proc, env=env, info=info)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            sys.stderr.write(f"--- cryopg dev stderr ---\n{stderr_text()}\n")
