#!/usr/bin/env python3
"""Artifact latency end to end: what a script waits for a 1 KB and a 100 MB put and get,
through a real `cryopg server`, a real `cryopg agent` and its socket, against an S3
endpoint (moto's server mode on loopback) with signed URLs, the same through the server
(CRYOPG_ARTIFACTS_PROXY=1), and the directory store.

Each put of the small size sends new bytes (a put of bytes the project holds sends none).
Timed inside the job: the Python SDK's calls (`script.artifact_put|get`: the socket, the
agent, the server, the store), and the `cryopg artifact put|get` commands (the same plus
starting the CLI).

Standalone: `python bench/artifacts.py [--quick] [--json]`. From bench/run it is the
`artifact_latency` section.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

from driver import AGENT_SECRET, CLI, Bench, cryopg_server, log  # noqa: E402

from tests.artifacts_s3 import moto_s3  # noqa: E402

SMALL = 1 << 10
LARGE = 100 << 20

# The job: times its own calls and writes them to RESULT as JSON.
JOB = """\
import json, os, statistics, subprocess, time
from cryosleep import script

SMALL, LARGE, N, CLI_N = {small}, {large}, {n}, {cli_n}
out = {{}}

def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000

def put_new(name, size, i):
    with open(name, "wb") as fh:
        fh.write(os.urandom(16) + i.to_bytes(8, "big") + b"x" * (size - 24))
    return timed(lambda: script.artifact_put(name, name))

out["small_put_ms"] = [put_new("small", SMALL, i) for i in range(N)]
out["small_get_ms"] = [timed(lambda: script.artifact_get("small", "small.out"))
                       for _ in range(N)]
cli = lambda *a: subprocess.run(["cryopg", "artifact", *a], check=True,
                                stdout=subprocess.DEVNULL)
out["cli_small_put_ms"] = []
for i in range(CLI_N):
    with open("c", "wb") as fh:
        fh.write(os.urandom(SMALL))
    out["cli_small_put_ms"].append(timed(lambda: cli("put", "c", "c")))
out["cli_small_get_ms"] = [timed(lambda: cli("get", "c", "c.out")) for _ in range(CLI_N)]
out["large_put_ms"] = [put_new("large", LARGE, i) for i in range(2)]
out["large_get_ms"] = [timed(lambda: script.artifact_get("large", "large.out"))
                       for _ in range(2)]
with open({result!r} + ".tmp", "w") as fh:
    json.dump(out, fh)
os.replace({result!r} + ".tmp", {result!r})
"""


def _submit(bench: Bench, db: str, source: str) -> str:
    sealed = bench.sealer.seal_text(source)
    rows = bench.sql(db, "SELECT run_id FROM cryo.submit_script('dev', 'default', 'lat.py', "
                         "NULL, %s, NULL, NULL, '{polyglot}')", (sealed,))
    return str(rows[0][0])


def _wait(bench: Bench, db: str, run_id: str, result: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not result.exists():
        status = bench.sql(db, "SELECT status FROM cryo.runs WHERE id = %s", (run_id,))
        if status and status[0][0] in ("failed", "cancelled", "succeeded"):
            if not result.exists():
                raise RuntimeError(f"bench: the artifact job {status[0][0]} (see its log)")
        if time.monotonic() > deadline:
            raise RuntimeError("bench: the artifact job did not finish in time")
        time.sleep(0.1)


def _one(bench: Bench, work: Path, env: dict[str, str], n: int, cli_n: int) -> dict[str, Any]:
    db = bench.fresh_db()
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with cryopg_server(bench, db) as port:
            agent_env = dict(os.environ, CRYOPG_URL=f"http://127.0.0.1:{port}",
                             CRYOPG_AGENT_TOKEN=AGENT_SECRET)
            # The jobs' CLI starts as deployed: from compiled modules (without them each
            # call compiles what it imports, which is what the CLI figures would show).
            agent_env.pop("PYTHONDONTWRITEBYTECODE", None)
            agent = subprocess.Popen([str(CLI), "agent", "--id", "bench-artifacts",
                                      "--scratch"], cwd=work, env=agent_env,
                                     stdout=subprocess.DEVNULL,
                                     stderr=open(work / "agent.log", "ab"))
            try:
                result = work / f"result-{db}.json"
                source = JOB.format(small=SMALL, large=LARGE, n=n, cli_n=cli_n,
                                    result=str(result))
                _wait(bench, db, _submit(bench, db, source), result, timeout=600)
                return json.loads(result.read_text())
            finally:
                agent.terminate()
                agent.wait(10)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        bench.spent.append(db)


def _summary(samples: dict[str, list[float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in samples.items():
        out[k.removesuffix("_ms") + "_p50_ms"] = statistics.median(v)
        out[k.removesuffix("_ms") + "_max_ms"] = max(v)
    return out


def artifact_latency(bench: Bench, quick: bool) -> dict[str, Any]:
    n, cli_n = (20, 5) if quick else (50, 10)
    work = Path(tempfile.mkdtemp(prefix="cryopg-bench-art-"))
    s3 = {"CRYOPG_ARTIFACTS_S3_ACCESS_KEY_ID": "test",
          "CRYOPG_ARTIFACTS_S3_SECRET_ACCESS_KEY": "test"}
    out: dict[str, Any] = {"small_bytes": SMALL, "large_bytes": LARGE}
    try:
        with moto_s3("bench") as endpoint:
            s3.update(CRYOPG_ARTIFACTS_S3_BUCKET="bench", CRYOPG_ARTIFACTS_S3_ENDPOINT=endpoint)
            for label, env in (("s3", s3), ("s3_proxy", {**s3, "CRYOPG_ARTIFACTS_PROXY": "1"}),
                               ("directory", {"CRYOPG_ARTIFACTS_DIR": str(work / "blobs")})):
                out[label] = _summary(_one(bench, work, env, n, cli_n))
                log(f"artifacts ({label}): " + ", ".join(f"{k} {v:.1f}"
                                                         for k, v in out[label].items()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def render(r: dict[str, Any]) -> list[str]:
    a = r.get("artifact_latency")
    if not a:
        return []
    rows = [("S3 (moto), signed URLs", "s3"), ("S3 (moto), through the server", "s3_proxy"),
            ("directory", "directory")]

    def cell(d: dict[str, float], k: str) -> str:
        return f"{d[k + '_p50_ms']:,.1f}"

    lines = ["## Artifact latency", "",
             "Milliseconds a job waits (median) for a put and a get of 1 KiB (new bytes each "
             "put) and of 100 MiB, through the agent's socket, a `cryopg server` and the "
             "store; `cryopg artifact` adds starting the CLI. moto is a Python S3 server, so "
             "its rows measure moto too.", "",
             "| store | 1 KiB put | 1 KiB get | CLI 1 KiB put | CLI 1 KiB get "
             "| 100 MiB put | 100 MiB get |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for title, key in rows:
        d = a[key]
        lines.append(f"| {title} | " + " | ".join(cell(d, k) for k in (
            "small_put", "small_get", "cli_small_put", "cli_small_get", "large_put",
            "large_get")) + " |")
    return [*lines, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from driver import QUICK, SETTINGS, Cluster, _free_port

    bench = Bench(QUICK, 1)
    bench.cluster = Cluster(bench.base, port=_free_port(), options=SETTINGS)
    try:
        bench.start()
        r = {"artifact_latency": artifact_latency(bench, args.quick)}
    finally:
        bench.stop()
    print(json.dumps(r, indent=2) if args.json else "\n".join(render(r)))


if __name__ == "__main__":
    main()
