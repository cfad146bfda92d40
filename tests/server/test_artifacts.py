"""Artifacts through the in-process app, on the directory store: cached puts from
outside a run, a run's put through the agent routes (proxied), downloads, the bound per
project counted per distinct blob, collection with the run and by retention, and a
1 GiB artifact that never sits in memory on either side."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from cryopg.artifacts.service import ARTIFACTS, collect
from tests.server.conftest import AGENT_PATH, PROJECT_PATH, Server


@pytest.fixture
def art_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Listed before `srv`, so the app starts with these settings."""
    path = tmp_path / "blobs"
    monkeypatch.setenv("CRYOPG_ARTIFACTS_DIR", str(path))
    monkeypatch.setenv("CRYOPG_ARTIFACTS_MAX_BYTES", "1000")
    monkeypatch.delenv("CRYOPG_ARTIFACTS_S3_BUCKET", raising=False)
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def put_cached(srv: Server, name: str, key: str, data: bytes, role: str = "member") -> Any:
    async with srv.client.put(f"{PROJECT_PATH}/artifacts/{name}", params={"key": key},
                              data=data, headers={"Authorization":
                                                  f"Bearer {srv.tokens[role]}"}) as resp:
        return resp.status, await resp.json()


async def download(srv: Server, path: str) -> tuple[int, bytes]:
    async with srv.client.get(PROJECT_PATH + path, headers={
            "Authorization": f"Bearer {srv.tokens['viewer']}"}) as resp:
        return resp.status, await resp.read()


async def run_put(srv: Server, grant: dict[str, Any], name: str, data: bytes,
                  key: str | None = None) -> dict[str, Any]:
    """What the agent does for `cryopg artifact put`: prepare, proxied upload, commit."""
    digest = sha(data)
    ready = (await srv.in_run(grant, "artifacts/prepare", sha256=digest, size=len(data))).ok()
    if ready["upload"]:
        assert ready["upload"] == {"proxy": True}
        url = f"{AGENT_PATH}/runs/{grant['run_id']}/artifacts/blobs/{digest}"
        async with srv.client.put(url, data=data, headers={
                "Authorization": f"Bearer {srv.tokens['agent']}",
                "X-Cryo-Claim": grant["claim_token"]}) as resp:
            assert resp.status == 200, await resp.text()
    return (await srv.in_run(grant, "artifacts/commit", name=name, key=key, sha256=digest,
                             size=len(data))).ok()


async def test_cached_artifact_put_get_list(art_dir: Path, srv: Server) -> None:
    status, row = await put_cached(srv, "dist/app.tar", "v1", b"hello")
    assert status == 201 and row["sha256"] == sha(b"hello") and row["key"] == "v1"
    assert (art_dir / "dev" / "default" / row["sha256"][:2] / row["sha256"]).read_bytes() \
        == b"hello"
    assert await download(srv, "/artifacts/dist/app.tar?key=v1") == (200, b"hello")
    listed = (await srv.user("GET", "/artifacts", role="viewer")).ok()["artifacts"]
    assert [(a["name"], a["key"], a["size"]) for a in listed] == [("dist/app.tar", "v1", 5)]
    (await srv.user("GET", "/artifacts/dist/app.tar?key=v2")).refused(404, "not_found")
    # A viewer may read but not put; outside a run a put needs a key.
    assert (await put_cached(srv, "x", "v1", b"x", role="viewer"))[0] == 403
    async with srv.client.put(f"{PROJECT_PATH}/artifacts/x", data=b"x", headers={
            "Authorization": f"Bearer {srv.tokens['member']}"}) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_argument"


async def test_bound_counts_each_distinct_blob_once(art_dir: Path, srv: Server) -> None:
    big = b"a" * 600
    assert (await put_cached(srv, "one", "k", big))[0] == 201
    # The same bytes under other names cost nothing more.
    assert (await put_cached(srv, "two", "k", big))[0] == 201
    assert (await put_cached(srv, "three", "other", big))[0] == 201
    status, body = await put_cached(srv, "four", "k", b"b" * 600)
    assert status == 413 and body["error"]["code"] == "artifact_quota"
    assert "CRYOPG_ARTIFACTS_MAX_BYTES" in body["error"]["message"]
    async with await srv.connect() as conn:
        used = await (await conn.execute("SELECT cryo.artifact_usage('dev', 'default')")).fetchone()
    assert used == (600,)


async def test_run_artifacts_go_with_their_run(art_dir: Path, srv: Server) -> None:
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    row = await run_put(srv, grant, "report.txt", b"report")
    assert row["run_id"] == run_id and row["key"] is None
    cached = await run_put(srv, grant, "deps", b"deps", key="lock-1")
    assert cached["key"] == "lock-1"
    # A second put of the same bytes sends none: the store holds them already.
    again = (await srv.in_run(grant, "artifacts/prepare", sha256=sha(b"report"),
                              size=6)).ok()
    assert again == {"present": True, "upload": None}
    found = (await srv.in_run(grant, "artifacts/find", name="deps", key="lock-1")).ok()
    assert found["sha256"] == sha(b"deps") and found["download"] == {"proxy": True}
    await srv.finish(grant)

    listed = (await srv.user("GET", f"/runs/{run_id}/artifacts", role="viewer")).ok()
    assert [a["name"] for a in listed["artifacts"]] == ["report.txt"]
    assert await download(srv, f"/runs/{run_id}/artifacts/report.txt") == (200, b"report")
    other = "dev:default:run-nope"
    (await srv.user("GET", f"/runs/{other}/artifacts/report.txt")).refused(404, "not_found")

    # The run is collected after its retention, its artifact with it, and the
    # collector round then removes the bytes no name points at; the cached one stays.
    (await srv.user("PUT", "/retention", {"runs_seconds": 60})).ok()
    await srv.tick(later=120)
    assert (await srv.user("GET", f"/runs/{run_id}/artifacts")).status == 200
    blob = art_dir / "dev" / "default" / sha(b"report")[:2] / sha(b"report")
    assert blob.exists()
    arts = srv.app[ARTIFACTS]
    arts.settings = dataclasses.replace(arts.settings, grace=dt.timedelta(0))
    assert await collect(srv.app) == 1
    assert not blob.exists()
    assert [a["name"] for a in (await srv.user("GET", "/artifacts")).ok()["artifacts"]] \
        == ["deps"]
    (await srv.user("GET", f"/runs/{run_id}/artifacts/report.txt")).refused(404, "not_found")


async def test_a_put_that_lost_its_blob_is_refused_and_uploads_again(art_dir: Path,
                                                                    srv: Server) -> None:
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    await run_put(srv, grant, "a", b"bytes")
    digest = sha(b"bytes")
    (art_dir / "dev" / "default" / digest[:2] / digest).unlink()  # a collector got there
    (await srv.in_run(grant, "artifacts/commit", name="b", sha256=digest,
                      size=5)).refused(409, "artifact_missing")
    ready = (await srv.in_run(grant, "artifacts/prepare", sha256=digest, size=5,
                              force=True)).ok()
    assert ready["upload"] == {"proxy": True}


async def test_stale_claim_and_bad_digest_are_refused(art_dir: Path, srv: Server) -> None:
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "artifacts/prepare", sha256="xyz", size=1)).refused(
        400, "invalid_argument")
    url = f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{sha(b'x')}"
    async with srv.client.put(url, data=b"y", headers={
            "Authorization": f"Bearer {srv.tokens['agent']}",
            "X-Cryo-Claim": grant["claim_token"]}) as resp:
        assert resp.status == 400  # the bytes are not the digest named
    await srv.finish(grant)
    (await srv.in_run(grant, "artifacts/list")).refused(409, "stale_claim")


GIB = 1 << 30


@pytest.fixture
def unbounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "blobs"
    monkeypatch.setenv("CRYOPG_ARTIFACTS_DIR", str(path))
    monkeypatch.delenv("CRYOPG_ARTIFACTS_MAX_BYTES", raising=False)
    return path


@pytest.mark.slow
async def test_a_1_gib_artifact_streams(unbounded: Path, tmp_path: Path, srv: Server) -> None:
    """Through the CLI (a child process) and the server (this process): neither holds
    more than a few MiB of it at once."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as fh:
        fh.truncate(GIB)  # sparse: costs no disk until the store writes its copy
        fh.seek(GIB - 5)
        fh.write(b"tail!")
    # Each CLI runs under a launcher that reports that process's own peak RSS (this
    # process's RUSAGE_CHILDREN would count every child the session ever had: rustc...).
    launcher = tmp_path / "peak.py"
    launcher.write_text(
        "import resource, subprocess, sys\n"
        "code = subprocess.run(sys.argv[1:]).returncode\n"
        "print(f'PEAK_KIB {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}',"
        " file=sys.stderr)\n"
        "sys.exit(code)\n")
    peaks = []
    tracemalloc.start()
    try:
        put = await srv.cli("artifact", "put", "big", str(big), "--key", "k",
                            token=srv.tokens["member"], launcher=(sys.executable, str(launcher)))
        assert put.returncode == 0, put.stderr
        back = tmp_path / "back.bin"
        got = await srv.cli("artifact", "get", "big", str(back), "--key", "k",
                            launcher=(sys.executable, str(launcher)))
        assert got.returncode == 0, got.stderr
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"the server held {peak} bytes at once"
    for done in (put, got):
        peaks.append(int(done.stderr.rsplit("PEAK_KIB ", 1)[1].split()[0]))
    assert max(peaks) < 256 << 10, f"a CLI process reached {peaks} KiB"
    assert back.stat().st_size == GIB
    with open(back, "rb") as fh:
        fh.seek(GIB - 5)
        assert fh.read() == b"tail!"
    os.unlink(back)
    (unbounded / "dev" / "default" / put.stdout.split()[0][:2] / put.stdout.split()[0]).unlink()


def blob_path(art_dir: Path, sha256: str, project: str = "default") -> Path:
    return art_dir / "dev" / project / sha256[:2] / sha256


async def test_a_refused_put_leaves_no_bytes(art_dir: Path, srv: Server) -> None:
    assert (await put_cached(srv, "one", "k", b"a" * 600))[0] == 201
    # Without X-Cryo-SHA256 the bound is known only once the bytes are in the store.
    status, body = await put_cached(srv, "four", "k", b"b" * 600)
    assert status == 413 and body["error"]["code"] == "artifact_quota"
    assert not blob_path(art_dir, sha(b"b" * 600)).exists()
    assert blob_path(art_dir, sha(b"a" * 600)).exists()
    # The same through a run: the proxied upload lands, the commit is refused.
    run_id = await srv.submit("true\n")
    grant = await srv.claim_run(run_id)
    data = b"c" * 500
    url = f"{AGENT_PATH}/runs/{run_id}/artifacts/blobs/{sha(data)}"
    async with srv.client.put(url, data=data, headers={
            "Authorization": f"Bearer {srv.tokens['agent']}",
            "X-Cryo-Claim": grant["claim_token"]}) as resp:
        assert resp.status == 200
    assert blob_path(art_dir, sha(data)).exists()
    (await srv.in_run(grant, "artifacts/commit", name="c", sha256=sha(data),
                      size=len(data))).refused(413, "artifact_quota")
    assert not blob_path(art_dir, sha(data)).exists()
    # A refused put of bytes a name already points at leaves them for that name.
    (await srv.in_run(grant, "artifacts/commit", name="a", sha256=sha(b"a" * 600),
                      size=5)).refused(409, "artifact_missing")
    assert blob_path(art_dir, sha(b"a" * 600)).exists()


def _orphan(art_dir: Path, data: bytes, project: str = "default", age: float = 3600) -> Path:
    """Bytes in the store no index row knows (a put that never committed), `age` old."""
    path = blob_path(art_dir, sha(data), project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    then = path.stat().st_mtime - age
    os.utime(path, (then, then))
    return path


async def test_the_sweep_removes_bytes_no_index_knows(art_dir: Path, srv: Server) -> None:
    from cryopg.artifacts.service import collect_round

    assert (await put_cached(srv, "kept", "k", b"kept"))[0] == 201
    kept = blob_path(art_dir, sha(b"kept"))
    os.utime(kept, (kept.stat().st_mtime - 3600,) * 2)
    old, fresh = _orphan(art_dir, b"never committed"), _orphan(art_dir, b"uploading", age=0)
    stale_upload = art_dir / ".uploads" / "upload-dead"
    stale_upload.write_bytes(b"half")
    os.utime(stale_upload, (stale_upload.stat().st_mtime - 3600,) * 2)
    # A deleted project's bytes: its index rows went with it.
    async with await srv.connect() as conn:
        await conn.execute("SELECT cryo.ensure_project('dev', 'gone', 'gone')")
        await conn.execute("SELECT cryo.put_artifact('dev', 'gone', 'k', 'x', %s, 4, NULL)",
                           (sha(b"gone"),))
        gone = _orphan(art_dir, b"gone", project="gone")
        await conn.execute("SELECT cryo.delete_project('dev', 'gone')")
        await conn.commit()
    srv.app[ARTIFACTS].swept_at -= 3600  # the app's first round swept when it started
    await collect_round(srv.app)
    assert kept.exists() and fresh.exists()
    assert not old.exists() and not gone.exists() and not stale_upload.exists()
    assert await download(srv, "/artifacts/kept?key=k") == (200, b"kept")
    # The store is listed at most once per grace period on each server.
    later = _orphan(art_dir, b"later")
    await collect_round(srv.app)
    assert later.exists()


async def test_artifact_get_keeps_the_executable_bit(art_dir: Path, tmp_path: Path,
                                                     srv: Server) -> None:
    """A tool kept as an artifact comes back executable; a plain file comes back with a
    new file's mode, not 0600 (issue 42, item 5). Outside a run, over HTTP."""
    tool, note = tmp_path / "tool.sh", tmp_path / "note.txt"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    note.write_text("just text\n")
    note.chmod(0o644)
    umask = os.umask(0)
    os.umask(umask)
    for src, want in ((tool, 0o777 & ~umask), (note, 0o666 & ~umask)):
        put = await srv.cli("artifact", "put", src.name, str(src), "--key", "k")
        assert put.returncode == 0, put.stderr
        back = tmp_path / f"back-{src.name}"
        got = await srv.cli("artifact", "get", src.name, str(back), "--key", "k")
        assert got.returncode == 0, got.stderr
        assert back.read_bytes() == src.read_bytes()
        assert back.stat().st_mode & 0o777 == want, oct(back.stat().st_mode)
    listed = (await srv.user("GET", "/artifacts?key=k")).ok()
    assert {a["name"]: a["executable"] for a in listed["artifacts"]} == {
        "tool.sh": True, "note.txt": False}
