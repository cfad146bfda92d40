"""Chaos for artifacts (issue 36): a replica killed in the middle of a large put, and the
S3 store stopped and started again under puts and gets.

Own fixtures for now (a restartable moto store, replicas on it, a split deployment on
it), built from tests/e2e/test_replicas.py's `Replicas` and tests/artifacts_s3.py's
`moto_s3`; tests/chaos/conftest.py is to hold shared ones."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.artifacts_s3 import _free_port, moto_s3
from tests.e2e.conftest import Split
from tests.e2e.helpers import script, wait_for
from tests.e2e.test_replicas import Replicas

pytestmark = pytest.mark.chaos

BUCKET = "artifacts"


class Store:
    """moto's S3 server at a fixed address, to stop and start again (empty: moto keeps
    objects in memory)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._running: contextlib.ExitStack | None = None

    def start(self) -> None:
        self._running = contextlib.ExitStack()
        self._running.enter_context(moto_s3(BUCKET, port=self.port))

    def stop(self) -> None:
        if self._running is not None:
            self._running.close()
            self._running = None


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Store]:
    """A running store, and the environment every process started afterwards gets: the
    bucket, short bounds (so an outage shows in seconds), spools the test can see."""
    s3 = Store()
    s3.start()
    for name, value in {
        "CRYOPG_ARTIFACTS_S3_BUCKET": BUCKET,
        "CRYOPG_ARTIFACTS_S3_ENDPOINT": s3.endpoint,
        "CRYOPG_ARTIFACTS_S3_ACCESS_KEY_ID": "test",
        "CRYOPG_ARTIFACTS_S3_SECRET_ACCESS_KEY": "test",
        "CRYOPG_ARTIFACTS_TIMEOUT": "5",
        "CRYOPG_AGENT_SPOOL": str(tmp_path / "agent-spool"),
        # A server spools an upload here before it moves it to the store.
        "TMPDIR": str(tmp_path / "server-tmp"),
    }.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "server-tmp").mkdir()
    for name in ("CRYOPG_ARTIFACTS_MAX_BYTES", "CRYOPG_ARTIFACTS_PROXY", "CRYOPG_ARTIFACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield s3
    finally:
        s3.stop()


@pytest.fixture
def replicas(store: Store, dsn: str, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Replicas]:
    """Three replicas on the store, the bytes going through them (CRYOPG_ARTIFACTS_PROXY),
    so killing one cuts an upload in flight."""
    monkeypatch.setenv("CRYOPG_REPLICA_ID", "r1")
    monkeypatch.setenv("CRYOPG_ARTIFACTS_PROXY", "1")
    deployment = Replicas(dsn, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


def _ended(cli: Callable[..., subprocess.CompletedProcess[str]], run_id: str,
           timeout: float) -> dict:
    def done() -> dict | None:
        out = cli("runs", "show", run_id, "--json")
        got = json.loads(out.stdout) if out.returncode == 0 else {}
        return got if got.get("status") in ("succeeded", "failed", "cancelled") else None
    return wait_for(f"{run_id} to end", done, timeout=timeout)


def _uploads(folder: Path) -> list[Path]:
    return [p for p in folder.glob("upload-*") if p.is_file() and p.stat().st_size > 0]


def test_a_replica_killed_mid_put_hands_the_put_to_another(replicas: Replicas) -> None:
    d = replicas.dir
    urls = ",".join(replicas.urls[r] for r in ("r1", "r2", "r3"))  # r1 first: it dies
    replicas.spawn("agent", "--url", urls, "--token", replicas.agent_token, "--id", "chaos")
    path = script(d, "big.sh", f"""set -e
head -c 100000000 /dev/urandom > big.bin
sha256sum big.bin | cut -d' ' -f1 > {d}/want.txt
cryopg artifact put big big.bin
cryopg artifact get big copy.bin
cmp big.bin copy.bin
echo put-and-got
""")
    sub = replicas.cli_on("r2", "submit", str(path))
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip()
    # r1 has the upload's first bytes in its spool: the put is in flight through it.
    wait_for("the upload to reach r1", lambda: _uploads(d / "server-tmp"), timeout=60,
             every=0.01)
    replicas.kill("r1")
    run = _ended(lambda *a: replicas.cli_on("r2", *a), run_id, timeout=120)
    logs = replicas.cli_on("r2", "logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "put-and-got" in logs
    listed = replicas.cli_on("r2", "artifact", "list", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(a["name"], a["sha256"], a["size"]) for a in rows] == [
        ("big", (d / "want.txt").read_text().strip(), 100000000)]
    # r1 died with the upload half spooled (a live server removes its spool either way).
    assert _uploads(d / "server-tmp")


@pytest.fixture(params=["signed", "proxied"])
def split(request: pytest.FixtureRequest, store: Store, dsn: str, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Split]:
    """One server and one agent on the store; the agent moves bytes to and from the store
    itself (signed URLs) or through the server."""
    if request.param == "proxied":
        monkeypatch.setenv("CRYOPG_ARTIFACTS_PROXY", "1")
    deployment = Split(dsn, tmp_path)
    deployment.agent("outage")
    try:
        yield deployment
    finally:
        deployment.close()


def _one_line(path: Path) -> str:
    text = path.read_text()
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    return text.strip()


def test_a_stopped_store_fails_puts_and_gets_in_a_bound_then_serves_again(
        store: Store, split: Split) -> None:
    d = split.dir
    path = script(d, "outage.sh", f"""
head -c 2000 /dev/urandom > before.bin
cryopg artifact put before before.bin
touch {d}/stored
while [ ! -f {d}/store-down ]; do sleep 0.05; done
head -c 3000 /dev/urandom > during.bin
# (a bash job runs under errexit: `if` keeps a failure from ending it)
if cryopg artifact put during during.bin 2> {d}/put.err; then echo 0; else echo $?; fi > {d}/put.rc
if cryopg artifact get before got.bin 2> {d}/get.err; then echo 0; else echo $?; fi > {d}/get.rc
while [ ! -f {d}/store-up ]; do sleep 0.05; done
cryopg artifact put during during.bin
cryopg artifact get during back.bin
cmp during.bin back.bin
echo served-again
""")
    sub = split.cli("submit", str(path))
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip()
    wait_for("the first put", lambda: (d / "stored").exists(), timeout=60)
    store.stop()
    (d / "store-down").touch()
    # The bound: CRYOPG_ARTIFACTS_TIMEOUT (5 s here) of retries for each call, where the
    # store's own retries used to hold a put for about a minute, and the agent's read
    # timeout up to five.
    try:
        wait_for("the put and the get to fail",
                 lambda: (d / "get.rc").exists() and (d / "get.rc").read_text().strip(),
                 timeout=45)
    except AssertionError:
        raise AssertionError(split.cli("logs", run_id).stdout + split.cli(
            "runs", "show", run_id).stdout) from None
    for what in ("put", "get"):
        assert (d / f"{what}.rc").read_text().strip() == "1", what
        line = _one_line(d / f"{what}.err")
        assert f"S3 bucket '{BUCKET}' at {store.endpoint}" in line, line
        assert line.startswith("Error: artifact "), line
    store.start()
    (d / "store-up").touch()
    run = _ended(split.cli, run_id, timeout=60)
    logs = split.cli("logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "served-again" in logs
