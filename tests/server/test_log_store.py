"""Finished runs' logs in an S3-compatible store (issue 25), against a real S3 endpoint:
moto's server mode on loopback. A log moves sealed and compressed and is served from the
store; while the endpoint is down (killed mid-run) nothing blocks, a waiting log is
bounded with a marked gap, and it moves once the endpoint is back."""

from __future__ import annotations

import dataclasses
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import boto3
import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from cryopg.logstore.mover import log_store
from cryopg.logstore.settings import LogStoreSettings
from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from tests.server.conftest import CLAIM_SECONDS, Server, _bootstrap

BUCKET = "cryopg-logs"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Moto:
    """`moto_server` on a fixed loopback port, stopped and started again at will (its
    buckets live in its memory, so a restart recreates the bucket, empty)."""

    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / "moto.log", "wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.s3().create_bucket(Bucket=BUCKET)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def s3(self):  # type: ignore[no-untyped-def]
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", **KEYS)


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[Moto]:
    server = Moto(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def stored(dsn: str, tmp_path: Path, moto: Moto) -> AsyncIterator[Server]:
    tokens = await _bootstrap(dsn)
    settings = LogStoreSettings(bucket=BUCKET, endpoint=moto.url,
                                access_key_id=KEYS["aws_access_key_id"],
                                secret_access_key=KEYS["aws_secret_access_key"],
                                move_after_seconds=0)
    config = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                          claim_seconds=CLAIM_SECONDS, tick_interval=3600.0,
                          claim_wait_max=2.0, pool_size=4, log_store=settings)
    async with TestClient(TestServer(build_app(config))) as client:
        yield Server(client, dsn, tokens, tmp_path)


async def _move(srv: Server) -> None:
    """One round of the mover, now (the tick starts one every few seconds)."""
    store = log_store(srv.app)
    assert store is not None
    await store.round()


def _archived_key(srv: Server, run_id: str) -> str:
    with psycopg.connect(srv.dsn) as db:
        row = db.execute("SELECT object_key FROM cryo.log_archives WHERE run_id = %s",
                         (run_id,)).fetchone()
    assert row is not None, f"{run_id} has not moved"
    return str(row[0])


def _key_of(run_id: str) -> str:
    """The key prefix of a run's log objects (each attempt adds its own id)."""
    return f"logs/{run_id.replace(':', '/')}/"


def _db_chunks(srv: Server, run_id: str) -> tuple[int, int]:
    with psycopg.connect(srv.dsn) as db:
        return db.execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM cryo.logs "
                          "WHERE run_id = %s", (run_id,)).fetchone()  # type: ignore[return-value]


async def _log_text(srv: Server, run_id: str) -> str:
    reply = await srv.user("GET", f"/runs/{run_id}/logs")
    assert reply.status == 200, reply.text
    return reply.text


async def test_a_finished_log_moves_sealed_and_is_served_from_the_store(
        stored: Server, moto: Moto) -> None:
    run_id = await stored.submit()
    grant = await stored.claim_run(run_id)
    for i in range(20):
        await stored.log(grant, f"PLAINTEXT-LINE-{i:03d}\n".encode())
    await stored.finish(grant)
    await _move(stored)
    assert _db_chunks(stored, run_id) == (0, 0)  # gone from the hot tier
    text = await _log_text(stored, run_id)
    assert text == "".join(f"PLAINTEXT-LINE-{i:03d}\n" for i in range(20))
    tail = (await stored.user("GET", f"/runs/{run_id}/logs?after=0")).text
    assert tail == text
    streamed = (await stored.user("GET", f"/runs/{run_id}/stream?tail=100")).text
    assert "PLAINTEXT-LINE-019" in streamed and "PLAINTEXT-LINE-000" not in streamed
    assert "event: end" in streamed
    listed = moto.s3().list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [_archived_key(stored, run_id)]
    assert listed[0]["Key"].startswith(_key_of(run_id))
    blob = moto.s3().get_object(Bucket=BUCKET, Key=listed[0]["Key"])["Body"].read()
    assert b"PLAINTEXT" not in blob  # sealed (and compressed) under the org key
    # A live run is left alone; a second round moves nothing twice.
    live = await stored.claim_run(await stored.submit())
    await stored.log(live, b"still running\n")
    await _move(stored)
    assert _db_chunks(stored, live["run_id"])[0] == 1
    assert len(moto.s3().list_objects_v2(Bucket=BUCKET)["Contents"]) == 1


def _dropped(text: str) -> tuple[int, str]:
    """The byte count the gap marker gives, and the log without the marker line."""
    found = re.search(r"\n\[cryopg: (\d+) bytes of this log were dropped while the log store "
                      r"was unavailable\]\n", text)
    assert found is not None, text[:200]
    return int(found[1]), text[:found.start()] + text[found.end():]


async def test_an_outage_bounds_a_waiting_log_only_past_its_grace_and_counts_every_byte(
        stored: Server, moto: Moto) -> None:
    earlier = await stored.submit()
    before = await stored.claim_run(earlier)
    await stored.log(before, b"moved before the outage\n")
    await stored.finish(before)
    await _move(stored)  # in the store before the outage
    assert _db_chunks(stored, earlier) == (0, 0)
    run_id = await stored.submit()
    grant = await stored.claim_run(run_id)
    piece = 256 << 10
    for i in range(24):  # 6 MiB, the store going down half-way
        if i == 12:
            moto.stop()
        await stored.log(grant, (f"{i:02d}" * (piece // 2)).encode())
    await stored.finish(grant)
    # Nothing of the control plane waits on the store.
    other = await stored.run_to_end()
    assert await stored.status(other) == "succeeded"
    whole = _db_chunks(stored, run_id)
    await _move(stored)  # fails: within the grace the log waits whole (issue 36)
    assert _db_chunks(stored, run_id) == whole
    with psycopg.connect(stored.dsn) as db:  # its lease was given back
        assert db.execute("SELECT count(*) FROM cryo.log_moves WHERE lease_expires_at > now()"
                          ).fetchone() == (0,)
    # A log already in the store is unavailable for now: a clear 503, no traceback.
    (await stored.user("GET", f"/runs/{earlier}/logs")).refused(503, "unavailable")
    store = log_store(stored.app)
    assert store is not None and store.down_since is not None
    store.down_since -= store.settings.outage_grace_seconds  # the grace has passed
    await _move(stored)  # fails again: now the waiting log is cut to its bound
    count, size = _db_chunks(stored, run_id)
    assert 0 < size <= (4 << 20) + 4096, size
    text = await _log_text(stored, run_id)  # from the database, marker and all
    dropped, rest = _dropped(text)
    assert dropped + len(rest) == 24 * piece  # every byte dropped is counted
    assert rest.endswith("23" * (piece // 2)) and not rest.startswith("00")
    # A second cut (a smaller bound) counts the first one's bytes too.
    store.settings = dataclasses.replace(store.settings, run_buffer_bytes=1 << 20)
    await _move(stored)
    dropped, rest = _dropped(await _log_text(stored, run_id))
    assert dropped + len(rest) == 24 * piece and len(rest) <= 1 << 20
    moto.start()  # back (empty: moto keeps buckets in memory)
    await _move(stored)
    assert _db_chunks(stored, run_id) == (0, 0)
    moved = await _log_text(stored, run_id)
    assert _dropped(moved) == (dropped, rest)
    assert rest.endswith("23" * (piece // 2))


def _queued(srv: Server) -> list[str]:
    with psycopg.connect(srv.dsn) as db:
        return [k for (k,) in db.execute(
            "SELECT object_key FROM cryo.log_objects_to_delete ORDER BY id").fetchall()]


def _keys(moto: Moto) -> list[str]:
    return sorted(o["Key"] for o in moto.s3().list_objects_v2(Bucket=BUCKET).get("Contents", []))


async def _moved_run(srv: Server, text: bytes) -> str:
    grant = await srv.claim_run(await srv.submit())
    await srv.log(grant, text)
    await srv.finish(grant)
    await _move(srv)
    assert _db_chunks(srv, grant["run_id"]) == (0, 0)
    return str(grant["run_id"])


async def test_collected_runs_take_their_log_objects_with_them(
        stored: Server, moto: Moto) -> None:
    old = [await _moved_run(stored, f"old {i}\n".encode()) for i in range(2)]
    assert _keys(moto) == sorted(_archived_key(stored, r) for r in old)
    (await stored.user("PUT", "/retention", {"runs_seconds": 60}, role="admin")).ok()
    await stored.tick(later=3600)  # retention collects both runs...
    assert sorted(_queued(stored)) == _keys(moto)  # ...queuing their objects, same transaction
    kept = await _moved_run(stored, b"young\n")  # a later round deletes them; a young run stays
    kept_key = _archived_key(stored, kept)
    assert _queued(stored) == [] and _keys(moto) == [kept_key]
    await _move(stored)  # idempotent: nothing queued, nothing more goes
    assert _keys(moto) == [kept_key]
    # A mover that wrote a run's object after the run was collected queues it itself.
    moto.s3().put_object(Bucket=BUCKET, Key="logs/late/object", Body=b"x")
    with psycopg.connect(stored.dsn, autocommit=True) as db:
        assert db.execute("SELECT cryo.archive_run_log('dev:gone', 'a1', 'logs/late/object', "
                          "1, 1, sha256(''))").fetchone() == (False,)
    await _move(stored)
    assert _keys(moto) == [kept_key]
    # Deleting the project takes the rest.
    (await stored.user("DELETE", "", role="owner")).ok()
    await _move(stored)
    assert _keys(moto) == [] and _queued(stored) == []


def _buffers(plan: dict) -> int:  # type: ignore[type-arg]
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


@pytest.mark.slow
async def test_finding_logs_to_move_does_not_grow_with_finished_runs(srv: Server) -> None:
    done = await srv.run_to_end()
    waiting = await srv.claim_run(await srv.submit())
    await srv.log(waiting, b"not moved yet\n")
    await srv.finish(waiting)
    explain = ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
               "SELECT * FROM cryo.logs_to_archive('0 seconds', 50)")
    with psycopg.connect(srv.dsn, autocommit=True) as db:
        before = _buffers(db.execute(explain).fetchone()[0][0]["Plan"])  # type: ignore[index]
        # 20000 more finished runs whose logs moved (or who logged nothing).
        db.execute("""
            INSERT INTO cryo.runs
            SELECT (json_populate_record(r, json_build_object(
                        'id', r.id || '-' || g, 'idempotency_key', NULL))).*
              FROM cryo.runs r, generate_series(1, 20000) g WHERE r.id = %s""", (done,))
        db.execute("ANALYZE cryo.runs")
        got = db.execute("SELECT run_id FROM cryo.logs_to_archive('0 seconds', 50)").fetchall()
        assert got == [(waiting["run_id"],)]
        after = _buffers(db.execute(explain).fetchone()[0][0]["Plan"])  # type: ignore[index]
    assert after <= before + 20, (before, after)


async def test_a_graph_runs_log_reads_the_same_once_its_jobs_logs_moved(
        stored: Server, moto: Moto) -> None:
    from tests.server.test_graphs import graph, submit_graph, until
    from tests.server.test_pipelines import until_claim

    doc = graph([{"id": "a", "type": "shell", "config": {"run": "echo a"}},
                 {"id": "b", "type": "shell", "config": {"run": "echo b"}}])
    run_id = await submit_graph(stored, doc)
    jobs = [await until_claim(stored), await until_claim(stored)]
    for i in range(3):  # the two jobs' lines interleave, one cut across two flushes
        for job in jobs:
            await stored.log(job, f"line {i} of {job['run_id'][-6:]}\nhal".encode())
            await stored.log(job, b"f\n")
    for job in jobs:
        await stored.finish(job)
    await until(stored, run_id, lambda r: r["status"] == "succeeded")
    before = await _log_text(stored, run_id)
    assert before.count("half") == 6 and before.count("] succeeded") == 2, before
    await _move(stored)
    assert all(_db_chunks(stored, j["run_id"]) == (0, 0) for j in jobs)  # both moved
    assert await _log_text(stored, run_id) == before  # same lines, same order
