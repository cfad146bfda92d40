#!/usr/bin/env python3
"""The log mover (issue 36): how fast `cryopg server` replicas move finished runs' logs to
an S3 store (moto's server mode on loopback), and a replica's memory while a 50 MB log
moves.

Finished runs with logs are made through the engine's own calls (submit, claim,
append_log, finish: what an agent's posts do, without the agent), then replicas with
CRYOPG_LOGS_S3_* are started and timed until every log is recorded in cryo.log_archives:
each move claimed, streamed, read back and verified, and recorded.

Standalone: `python bench/log_mover.py [--quick] [--json]`. From bench/run it is the
`log_mover` section of bench/driver.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from driver import CAPS, CLI, QUICK, Bench, _free_port, log  # noqa: E402

from cryopg.seal import MasterKey, Sealer, parse_master_key  # noqa: E402
from tests.artifacts_s3 import moto_s3  # noqa: E402

CHUNK = 256 << 10  # what an agent posts at most


def _block() -> bytes:
    """256 KiB of log-like lines (numbers and words), as compressible as real output."""
    lines, i = [], 0
    while sum(map(len, lines)) < CHUNK:
        lines.append(f"{i:08d} step {i % 17} of the build: compiled module_{i % 331}.o\n")
        i += 1
    return "".join(lines).encode()[:CHUNK]


def _sealer(bench: Bench, db: str) -> Sealer:
    with psycopg.connect(bench.dsn(db)) as conn:
        key_id, wrapped = conn.execute("SELECT * FROM cryo.get_org_key('dev')").fetchone()
    master = MasterKey(parse_master_key(bench.master_text))
    return Sealer("dev", key_id, master.unwrap("dev", key_id, bytes(wrapped)))


def _logs(bench: Bench, db: str, sizes: list[int]) -> list[tuple[str, Any]]:
    """One claimed run per size, its log that many bytes; the runs' (id, claim token)."""
    sealer, block = _sealer(bench, db), _block()
    bench.enqueue(db, len(sizes))
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        grants = conn.execute("SELECT run_id, claim_token FROM cryo.claim_jobs("
                              "'dev', 'bench', %s, 3600, %s)", (CAPS, len(sizes))).fetchall()
        assert len(grants) == len(sizes), len(grants)
        for (run_id, token), size in zip(grants, sizes, strict=True):
            for at in range(0, size, CHUNK):
                conn.execute("SELECT cryo.append_log(%s, %s, %s, 3600)",
                             (run_id, token, sealer.seal(block[:min(CHUNK, size - at)])))
    return [(str(r), t) for r, t in grants]


def _finish(bench: Bench, db: str, grants: list[tuple[str, Any]]) -> None:
    """All the runs end at once (one transaction): their logs are due together."""
    with psycopg.connect(bench.dsn(db)) as conn, conn.transaction():
        for run_id, token in grants:
            conn.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0)", (run_id, token))


@contextlib.contextmanager
def _replica(bench: Bench, db: str, endpoint: str, name: str) -> Iterator[subprocess.Popen[str]]:
    port = _free_port()
    env = dict(os.environ, CRYOPG_MASTER_KEY=bench.master_text, CRYOPG_REPLICA_ID=name,
               CRYOPG_LOGS_S3_BUCKET="logs", CRYOPG_LOGS_S3_ENDPOINT=endpoint,
               CRYOPG_LOGS_S3_ACCESS_KEY_ID="test", CRYOPG_LOGS_S3_SECRET_ACCESS_KEY="test",
               CRYOPG_LOGS_S3_MOVE_AFTER="0")
    proc = subprocess.Popen([str(CLI), "server", "--database-url", bench.dsn(db), "--port",
                             str(port), "--tick-interval", "0.2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"cryopg server did not start: {proc.stderr.read()}"
                                       ) from None
                time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _move(bench: Bench, sizes: list[int], replicas: int, label: str) -> dict[str, float]:
    """Makes the logs, then times `replicas` replicas moving them all; with one replica,
    also its resident memory above what it held idle, at the peak of the moves."""
    db = bench.fresh_db()
    grants, logged = _logs(bench, db, sizes), sum(sizes)
    with moto_s3("logs") as endpoint, contextlib.ExitStack() as stack:
        procs = [stack.enter_context(_replica(bench, db, endpoint, f"r{i + 1}"))
                 for i in range(replicas)]
        idle = _rss(procs[0].pid)
        peak, stop = [idle], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], _rss(procs[0].pid))
                stop.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _finish(bench, db, grants)
        with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
            # From the first claim: not the up to MOVE_EVERY an idle mover waits to look.
            while not conn.execute("SELECT EXISTS (SELECT FROM cryo.log_moves) OR EXISTS "
                                   "(SELECT FROM cryo.log_archives)").fetchone()[0]:
                time.sleep(0.002)
            started = time.monotonic()
            while True:
                done, objects = conn.execute(
                    "SELECT count(*), coalesce(sum(object_bytes), 0)::float8 "
                    "FROM cryo.log_archives").fetchone()
                if done == len(sizes):
                    break
                if time.monotonic() - started > 600:
                    raise RuntimeError(f"{label}: {done} of {len(sizes)} logs moved in 600 s")
                time.sleep(0.02)
        secs = time.monotonic() - started
        stop.set()
        sampler.join()
    bench.spent.append(db)
    out = {"logs": len(sizes), "replicas": replicas, "seconds": secs,
           "logs_s": len(sizes) / secs, "log_mb_s": logged / 1e6 / secs,
           "object_mb_s": objects / 1e6 / secs, "log_mb": logged / 1e6,
           "object_mb": objects / 1e6}
    if replicas == 1:
        out["rss_idle_mib"], out["rss_above_mib"] = idle / 2**20, (peak[0] - idle) / 2**20
    log(f"log mover, {label}: {len(sizes)} logs ({logged / 1e6:.1f} MB) by {replicas} "
        f"replica(s) in {secs:.1f} s: {out['logs_s']:.1f} logs/s, {out['log_mb_s']:.1f} MB/s "
        f"of log, {out['object_mb_s']:.1f} MB/s to the store"
        + (f"; RSS +{out['rss_above_mib']:.1f} MiB" if replicas == 1 else ""))
    return out


def log_mover(bench: Bench, quick: bool) -> dict[str, Any]:
    small = [16 << 10] * (100 if quick else 400)
    large = [20_000_000] * (2 if quick else 4)
    return {"small_1": _move(bench, small, 1, "small logs, one replica"),
            "small_2": _move(bench, small, 2, "small logs, two replicas"),
            "large_1": _move(bench, large, 1, "20 MB logs, one replica"),
            "fifty_mb": _move(bench, [50_000_000], 1, "one 50 MB log")}


def render(r: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py), or nothing when it was not run."""
    lm = r.get("log_mover")
    if not lm:
        return []
    rows = [("16 KiB logs, 1 replica", lm["small_1"]),
            ("16 KiB logs, 2 replicas", lm["small_2"]),
            ("20 MB logs, 1 replica", lm["large_1"]),
            ("one 50 MB log, 1 replica", lm["fifty_mb"])]
    out = ["## Log mover", "",
           "Finished runs' logs moved to an S3 store (moto's server mode on loopback, a Python "
           "server: it bounds these figures as much as cryopg does) by `cryopg server` "
           "replicas: each log leased, streamed (sealed, compressed), read back and verified, "
           "and recorded. RSS is the replica's resident memory above idle at the peak.", "",
           "| logs | count | logs/s | log MB/s | MB/s to the store | RSS above idle |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for label, m in rows:
        rss = f"{m['rss_above_mib']:.1f} MiB" if "rss_above_mib" in m else "-"
        out.append(f"| {label} | {m['logs']} | {m['logs_s']:.1f} | {m['log_mb_s']:.1f} | "
                   f"{m['object_mb_s']:.1f} | {rss} |")
    return out + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer logs")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    bench = Bench(QUICK, 1)
    try:
        bench.start()
        r = {"log_mover": log_mover(bench, args.quick)}
    finally:
        bench.stop()
    print(json.dumps(r, indent=2) if args.json else "\n".join(render(r)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
