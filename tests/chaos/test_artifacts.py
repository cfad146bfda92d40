"""Chaos for artifacts (issue 36): a replica killed in the middle of a large put, and the
S3 store stopped and started again under puts and gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.deploy import Chaos, S3Store
from tests.e2e.helpers import script, wait_for

BUCKET = "artifacts"


def _on_store(chaos: Chaos, s3: S3Store, **extra: str) -> None:
    """Every process keeps artifacts in `s3`, with short bounds (so an outage shows in
    seconds) and spools the test can see."""
    (chaos.dir / "server-tmp").mkdir()
    chaos.use_artifact_store(s3, BUCKET, CRYOPG_ARTIFACTS_TIMEOUT="5",
                             CRYOPG_AGENT_SPOOL=str(chaos.dir / "agent-spool"),
                             # A server spools an upload here before it moves it to the store.
                             TMPDIR=str(chaos.dir / "server-tmp"), **extra)


def _ended(chaos: Chaos, replica: str, run_id: str, timeout: float) -> dict:
    def done() -> dict | None:
        got = chaos.run(replica, run_id)
        return got if got.get("status") in ("succeeded", "failed", "cancelled") else None
    return wait_for(f"{run_id} to end", done, timeout=timeout)


def _uploads(folder: Path) -> list[Path]:
    return [p for p in folder.glob("upload-*") if p.is_file() and p.stat().st_size > 0]


def test_a_replica_killed_mid_put_hands_the_put_to_another(chaos: Chaos, s3: S3Store) -> None:
    # Three replicas, the bytes going through them (CRYOPG_ARTIFACTS_PROXY), so killing
    # one cuts an upload in flight.
    _on_store(chaos, s3, CRYOPG_ARTIFACTS_PROXY="1")
    for name in ("r1", "r2", "r3"):
        chaos.replica(name)
    d = chaos.dir
    urls = ",".join(chaos.url(r) for r in ("r1", "r2", "r3"))  # r1 first: it dies
    chaos.agent("chaos", url=urls)
    path = script(d, "big.sh", f"""set -e
head -c 100000000 /dev/urandom > big.bin
sha256sum big.bin | cut -d' ' -f1 > {d}/want.txt
cryopg artifact put big big.bin
cryopg artifact get big copy.bin
cmp big.bin copy.bin
echo put-and-got
""")
    sub = chaos.cli("r2", "submit", str(path))
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip()
    # r1 has the upload's first bytes in its spool: the put is in flight through it.
    wait_for("the upload to reach r1", lambda: _uploads(d / "server-tmp"), timeout=60,
             every=0.01)
    chaos.kill("r1")
    run = _ended(chaos, "r2", run_id, timeout=120)
    logs = chaos.cli("r2", "logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "put-and-got" in logs
    listed = chaos.cli("r2", "artifact", "list", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(a["name"], a["sha256"], a["size"]) for a in rows] == [
        ("big", (d / "want.txt").read_text().strip(), 100000000)]
    # r1 died with the upload half spooled (a live server removes its spool either way).
    assert _uploads(d / "server-tmp")


def _one_line(path: Path) -> str:
    text = path.read_text()
    assert "Traceback" not in text, text
    assert len(text.strip().splitlines()) == 1, text
    return text.strip()


@pytest.mark.parametrize("bytes_via", ["signed", "proxied"])
def test_a_stopped_store_fails_puts_and_gets_in_a_bound_then_serves_again(
        chaos: Chaos, s3: S3Store, bytes_via: str) -> None:
    # One server and one agent on the store; the agent moves bytes to and from the store
    # itself (signed URLs) or through the server.
    _on_store(chaos, s3, **({"CRYOPG_ARTIFACTS_PROXY": "1"} if bytes_via == "proxied" else {}))
    chaos.replica("r1")
    chaos.agent("outage")
    d = chaos.dir
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
    sub = chaos.cli("r1", "submit", str(path))
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip()
    wait_for("the first put", lambda: (d / "stored").exists(), timeout=60)
    s3.stop()
    (d / "store-down").touch()
    # The bound: CRYOPG_ARTIFACTS_TIMEOUT (5 s here) of retries for each call, where the
    # store's own retries used to hold a put for about a minute, and the agent's read
    # timeout up to five.
    try:
        wait_for("the put and the get to fail",
                 lambda: (d / "get.rc").exists() and (d / "get.rc").read_text().strip(),
                 timeout=45)
    except AssertionError:
        raise AssertionError(chaos.cli("r1", "logs", run_id).stdout
                             + chaos.cli("r1", "runs", "show", run_id).stdout) from None
    for what in ("put", "get"):
        assert (d / f"{what}.rc").read_text().strip() == "1", what
        line = _one_line(d / f"{what}.err")
        assert f"S3 bucket '{BUCKET}' at {s3.url}" in line, line
        assert line.startswith("Error: artifact "), line
    s3.start()
    (d / "store-up").touch()
    run = _ended(chaos, "r1", run_id, timeout=60)
    logs = chaos.cli("r1", "logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "served-again" in logs
