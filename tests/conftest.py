"""Session fixtures: one throwaway PostgreSQL cluster, one migrated template database,
a fresh clone of it per test (`postgresql`, `dsn`), and a real dev stack (`stack`)."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
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


def _conninfo(postgresql: Any) -> str:
    i = postgresql.info
    return make_conninfo("", host=i.host, port=i.port, user=i.user, dbname=i.dbname)


@pytest.fixture
def dsn(request: pytest.FixtureRequest) -> str:
    """libpq conninfo of this test's database: a fresh, migrated one; for a test on its
    worker's shared stack (see `stack`), that stack's database, where the test's runs
    are those of its own project."""
    if "stack" in request.fixturenames and not _private_stack(request.node):
        view: Stack = request.getfixturevalue("stack")
        return view.dsn
    return _conninfo(request.getfixturevalue("postgresql"))


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


class Stack:
    """A `cryopg dev` stack as one test sees it: its URL, a directory of the test's own
    whose `.cryopg/dev.json` the CLI finds (`cli` runs there), the environment to run the
    CLI with, and the org, project, token and database of the test.

    On a stack shared by a worker's tests the directory is the test's, the project and
    user token are made for it and `proc` is refused (a test that stops, kills or restarts
    its stack asks for its own: `@pytest.mark.private_stack`)."""

    def __init__(self, dir: Path, url: str, proc: subprocess.Popen[bytes], env: dict[str, str],
                 info: dict[str, Any] | None = None, *, dsn: str = "", org: str = "dev",
                 project: str = "default", shared: bool = False) -> None:
        self.dir, self.url, self.env = dir, url, env
        self.info: dict[str, Any] = info if info is not None else {}
        self.dsn = dsn or str(self.info.get("database_url", ""))
        self.org, self.project, self.shared = org, project, shared
        self._proc = proc

    def __repr__(self) -> str:
        return f"Stack({self.url} {self.org}/{self.project} in {self.dir})"

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        if self.shared:
            raise RuntimeError("this test runs on its worker's shared stack, whose process other "
                               "tests use: mark it @pytest.mark.private_stack to stop or kill it")
        return self._proc

    @property
    def token(self) -> str:
        """The test's user token (an owner of its org)."""
        return str(self.info["user_token"])

    @property
    def project_url(self) -> str:
        return f"{self.url}/api/v1/orgs/{self.org}/projects/{self.project}"

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


def _private_stack(node: pytest.Item) -> bool:
    """Whether the test gets a `cryopg dev` of its own: it asks (`private_stack`), or it needs
    environment no other test's stack has (`dev_env`)."""
    return any(node.get_closest_marker(m) for m in ("private_stack", "dev_env"))


def _stack_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CRYOPG_MASTER_KEY", None)  # dev generates one under .cryopg/
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(extra or {})
    return env


class _Dev:
    """One `cryopg dev` process: its directory, database, URL and dev.json."""

    def __init__(self, dir: Path, dsn: str, agents: int, claim: float,
                 env: dict[str, str]) -> None:
        self.dir, self.dsn, self.env = dir, dsn, env
        self.err_path = dir / "dev.stderr"
        cmd = [sys.executable, "-m", "cryopg.cli.entry", "dev", "--database-url", dsn]
        cmd += ["--port", str(_free_tcp_port()), "--agents", str(agents), "--no-sample"]
        cmd += ["--claim-seconds", str(claim), "--tick-interval", "0.3"]
        with open(self.err_path, "wb") as err, open(dir / "dev.stdout", "wb") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=dir, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL
            )
        self.info: dict[str, Any] = {}

    def stderr_text(self, start: int = 0) -> str:
        with open(self.err_path, "rb") as fh:
            fh.seek(start)
            return fh.read().decode(errors="replace")

    def wait_healthy(self, timeout: float = 90) -> None:
        dev_json = self.dir / ".cryopg" / "dev.json"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"cryopg dev exited with {self.proc.returncode}:\n{self.stderr_text()}")
            if not self.info and dev_json.exists():
                try:
                    self.info = json.loads(dev_json.read_text())
                except ValueError:
                    self.info = {}  # caught mid-write
            if self.info and _healthy(self.info["url"]):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"cryopg dev not healthy within {timeout} s:\n{self.stderr_text()}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None and _healthy(self.info["url"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _stack_config(node: pytest.Item) -> tuple[int, float]:
    agents = node.get_closest_marker("agents")
    # Short claims make the tests of a lapsed claim quick; a test that checks no lapse
    # asks for a longer one (`@pytest.mark.claim_seconds(n)`), since on a loaded machine
    # a renewal can come later than 3 s without anything being wrong.
    claim = node.get_closest_marker("claim_seconds")
    return (int(agents.args[0]) if agents else 1), float(claim.args[0] if claim else 3)


class _SharedStacks:
    """A worker's shared `cryopg dev` stacks, one per (agents, claim seconds) asked for,
    each on a database of its own; the two used last stay up."""

    KEEP = 2

    def __init__(self, factory: pytest.TempPathFactory, noproc: Any) -> None:
        self.factory, self.noproc = factory, noproc
        self.stacks: dict[tuple[int, float], _Dev] = {}
        self.count = 0

    def dsn(self, config: tuple[int, float]) -> str:
        """A database of each stack's own: agents serve every project of their org in
        their database, so a test asking for one agent must not find another stack's."""
        from pytest_postgresql.janitor import DatabaseJanitor

        n = self.noproc
        name = f"cryoshared_{config[0]}_{round(config[1] * 1000)}"
        janitor = DatabaseJanitor(user=n.user, host=n.host, port=n.port, dbname=name,
                                  template_dbname=n.template_dbname,
                                  maintenance_dbname=n.maintenance_dbname, password=n.password)
        janitor.drop()
        janitor.init()
        return make_conninfo("", host=n.host, port=n.port, user=n.user, dbname=name)

    def get(self, config: tuple[int, float]) -> _Dev:
        dev = self.stacks.pop(config, None)
        if dev is not None and not dev.alive():
            dev.stop()
            dev = None
        if dev is None:
            dev = _Dev(self.factory.mktemp("shared-stack"), self.dsn(config), *config,
                       _stack_env())
            dev.wait_healthy()
        self.stacks[config] = dev  # the most recently used last
        while len(self.stacks) > self.KEEP:
            self.stacks.pop(next(iter(self.stacks))).stop()
        return dev

    def retire(self, dev: _Dev) -> None:
        for config, one in list(self.stacks.items()):
            if one is dev:
                del self.stacks[config]
        dev.stop()

    def close(self) -> None:
        while self.stacks:
            self.stacks.popitem()[1].stop()


@pytest.fixture(scope="session")
def _shared_stacks(tmp_path_factory: pytest.TempPathFactory,
                   postgresql_noproc: Any) -> Iterator[_SharedStacks]:
    stacks = _SharedStacks(tmp_path_factory, postgresql_noproc)
    try:
        yield stacks
    finally:
        stacks.close()


def _project_slug(n: int, name: str) -> str:
    return f"t{n}-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}"[:63].rstrip("-")


def _open_project(dsn: str, org: str, project: str) -> str:
    """The test's project in the dev org, and an owner's user token for it."""
    import psycopg

    from cryopg.server.auth import new_secret, secret_hash

    secret = new_secret("user")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SELECT cryo.ensure_project(%s, %s, %s)", (org, project, project))
        db.execute("SELECT cryo.create_token('user', %s, %s, %s, '{}', NULL, 'dev')",
                   (org, f"test {project}", secret_hash(secret)))
    return secret


def _close_project(dsn: str, org: str, project: str, timeout: float = 60) -> bool:
    """Stops what the test left behind in its project so the next test has the shared
    agents to itself: its schedules go and its unfinished runs are cancelled. True when
    every run ended in time."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        for (name,) in db.execute("SELECT name FROM cryo.schedules WHERE org = %s AND "
                                  "project = %s", (org, project)).fetchall():
            db.execute("SELECT cryo.delete_schedule(%s, %s, %s)", (org, project, name))
        asked: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            live = [r for (r,) in db.execute(
                "SELECT id FROM cryo.runs WHERE org = %s AND project = %s AND "
                "NOT cryo.is_terminal(status)", (org, project)).fetchall()]
            if not live:
                return True
            if time.monotonic() > deadline:
                return False
            for run_id in set(live) - asked:
                asked.add(run_id)
                try:
                    db.execute("SELECT cryo.cancel_run(%s)", (run_id,))
                except psycopg.Error:
                    pass  # it ended meanwhile (or its parent's cancel took it)
            time.sleep(0.1)


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """A `cryopg dev` stack for the test (`stack.cli` runs the CLI in `stack.dir`).

    By default the worker's shared stack: the test gets a fresh project in org `dev` and
    a token of its own, so it sees no other test's runs, state or events; what it leaves
    running is cancelled when it ends. `@pytest.mark.private_stack` (for a test that stops,
    kills or restarts it, or reads its whole log) and `@pytest.mark.dev_env(NAME=value)`
    (environment for the dev process, its agents) give the test a stack of its own on a
    fresh database, in project `dev/default`. `@pytest.mark.agents(n)` sets the agents
    (default 1) and `@pytest.mark.claim_seconds(n)` the claims' length (default 3)."""
    agents, claim = _stack_config(request.node)
    if _private_stack(request.node):
        yield from _own(request, tmp_path, agents, claim)
    else:
        yield from _shared(request, tmp_path, (agents, claim))


def _own(request: pytest.FixtureRequest, tmp_path: Path, agents: int,
         claim: float) -> Iterator[Stack]:
    extra = request.node.get_closest_marker("dev_env")
    dsn = _conninfo(request.getfixturevalue("postgresql"))
    dev = _Dev(tmp_path, dsn, agents, claim, _stack_env(extra.kwargs if extra else None))
    try:
        dev.wait_healthy()
        yield Stack(dir=tmp_path, url=dev.info["url"], proc=dev.proc, env=dev.env,
                    info=dev.info, dsn=dsn)
    finally:
        dev.stop()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            sys.stderr.write(f"--- cryopg dev stderr ---\n{dev.stderr_text()}\n")


def _shared(request: pytest.FixtureRequest, tmp_path: Path,
            config: tuple[int, float]) -> Iterator[Stack]:
    stacks: _SharedStacks = request.getfixturevalue("_shared_stacks")
    dev = stacks.get(config)
    stacks.count += 1
    project = _project_slug(stacks.count, request.node.name)
    info = dict(dev.info, project=project, user_token=_open_project(dev.dsn, "dev", project))
    # The test's directory looks like a dev stack's: the CLI run there finds the test's
    # dev.json; the stack's master key and log are linked in for tests that read them.
    state = tmp_path / ".cryopg"
    state.mkdir()
    (state / "dev.json").write_text(json.dumps(info, indent=2))
    (state / "master.key").symlink_to(dev.dir / ".cryopg" / "master.key")
    for name in ("dev.stderr", "dev.stdout"):
        (tmp_path / name).symlink_to(dev.dir / name)
    start = dev.err_path.stat().st_size
    try:
        yield Stack(dir=tmp_path, url=dev.info["url"], proc=dev.proc, env=dict(dev.env), info=info,
                    dsn=dev.dsn, project=project, shared=True)
    finally:
        if not dev.alive() or not _close_project(dev.dsn, "dev", project):
            stacks.retire(dev)  # the next test gets a fresh one
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            sys.stderr.write(f"--- shared cryopg dev stderr during the test ---\n"
                             f"{dev.stderr_text(start)}\n")
