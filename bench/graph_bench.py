"""Graph figures, beside the script ones: a 10-node state-only graph and a 10-node shell
graph (runs/s at 1 / 4 / 16 submitters, through a real `cryopg server` whose driver
advances them; the shell nodes' agent is the bench's HTTP claimer, which finishes each
job at once, so the figure is the engine's), and a chain of 400 trivial shell nodes on
one real `cryopg agent`, as per-node overhead beside the cost of starting a process.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import subprocess
import time
import urllib.request
from typing import Any

import psycopg
from driver import (  # bench/driver.py, beside this file
    AGENT_SECRET,
    CLI,
    LEVELS,
    Bench,
    _http_claimer,
    cryopg_server,
    log,
)

USER_SECRET = "cryo_u_bench-user-secret"
CHAIN = int(os.environ.get("CRYOPG_BENCH_CHAIN", "400"))


def _graph(kind: str, n: int) -> str:
    if kind == "state":
        nodes = [{"id": f"n{i}", "type": "state",
                  "config": {"op": "set", "key": f"k{i}", "value": i}} for i in range(n)]
    else:
        nodes = [{"id": f"n{i}", "type": "shell", "config": {"run": "true"}} for i in range(n)]
    edges = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(n - 1)]
    return json.dumps({"version": "cryosleep-graph/v1", "nodes": nodes, "edges": edges})


def _user_token(bench: Bench, db: str) -> None:
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        conn.execute("SELECT cryo.ensure_member('dev', 'bench', 'owner')")
        conn.execute("SELECT cryo.create_token('user', 'dev', 'bench', %s, '{}', NULL, 'bench')",
                     (hashlib.sha256(USER_SECRET.encode()).digest(),))


def _submitter(port: int, doc: str, count: int, ready: Any, results: Any) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {USER_SECRET}", "Content-Type": "application/json"}
    body = json.dumps({"source": doc, "filename": "g.json"})
    ready.wait()
    for _ in range(count):
        conn.request("POST", "/api/v1/orgs/dev/projects/default/runs", body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 201:
            raise RuntimeError(f"submit answered {resp.status}")
    results.put(count)


def _finished(bench: Bench, db: str) -> int:
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM cryo.runs WHERE kind = 'graph' "
                            "AND finished_at IS NOT NULL").fetchone()[0]


def _claimers(port: int, n: int, stop: Any) -> list[Any]:
    ctx = mp.get_context("fork")

    def loop(i: int) -> None:  # finish node jobs until told to stop
        while not stop.is_set():
            _http_claimer(port, i, _Ready(), _Sink())
            time.sleep(0.005)

    procs = [ctx.Process(target=loop, args=(i,)) for i in range(n)]
    for p in procs:
        p.start()
    return procs


class _Ready:
    def wait(self) -> None:
        return None


class _Sink:
    def put(self, _: Any) -> None:
        return None


def graph_throughput(bench: Bench, kind: str, per_level: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for n in LEVELS:
        db = bench.fresh_db()
        _user_token(bench, db)
        with cryopg_server(bench, db) as port:
            stop = mp.get_context("fork").Event()
            claimers = _claimers(port, 4, stop) if kind == "shell" else []
            ctx = mp.get_context("fork")
            ready, results = ctx.Barrier(n + 1), ctx.Queue()
            count = max(per_level // n, 1)
            procs = [ctx.Process(target=_submitter, args=(port, _graph(kind, 10), count, ready,
                                                          results)) for _ in range(n)]
            for p in procs:
                p.start()
            ready.wait(timeout=60)
            t0 = time.monotonic()
            total = sum(results.get(timeout=600) for _ in procs)
            deadline = time.monotonic() + 600
            while _finished(bench, db) < total and time.monotonic() < deadline:
                time.sleep(0.05)
            secs = time.monotonic() - t0
            stop.set()
            for p in procs + claimers:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        out[n] = total / secs
        log(f"graphs {kind} x10 {n} submitters: {out[n]:.1f} runs/s ({total} in {secs:.2f} s)")
        bench.spent.append(db)
    return out


def chain(bench: Bench) -> dict[str, float]:
    """A chain of trivial shell nodes on one real agent: per-node overhead from the end of
    one node to the start of the next, beside the cost of starting the process."""
    db = bench.fresh_db()
    _user_token(bench, db)
    with cryopg_server(bench, db) as port:
        env = dict(os.environ, CRYOPG_AGENT_TOKEN=AGENT_SECRET)
        agent = subprocess.Popen([str(CLI), "agent", "--url", f"http://127.0.0.1:{port}",
                                  "--cap", "shell"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/orgs/dev/projects/default/runs",
                json.dumps({"source": _graph("shell", CHAIN), "filename": "chain.json"}).encode(),
                {"Authorization": f"Bearer {USER_SECRET}", "Content-Type": "application/json"})
            with urllib.request.urlopen(req) as resp:
                run_id = json.loads(resp.read())["run_id"]
            deadline = time.monotonic() + 900
            while _finished(bench, db) < 1 and time.monotonic() < deadline:
                time.sleep(0.2)
            with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
                # From the first node job's start to the last one's end, over the jobs.
                started, finished, jobs, busy = conn.execute(
                    "SELECT min(started_at), max(finished_at), count(*),"
                    " sum(extract(epoch FROM finished_at - started_at))"
                    " FROM cryo.runs WHERE parent_run_id = %s", (run_id,)).fetchone()
                # Where the time between nodes goes: the driver (a job's end to the next
                # job's creation, read off the run id's wall-clock milliseconds, since
                # created_at is its transaction's start) and the agent (creation to claim).
                driver_s, claim_s = conn.execute(
                    "SELECT avg(extract(epoch FROM made - prev_end)),"
                    " avg(extract(epoch FROM started_at - made)) FROM ("
                    " SELECT started_at, lag(finished_at) OVER (ORDER BY created_at) AS prev_end,"
                    " to_timestamp(('x' || lpad(substr(split_part(id, ':run-', 2), 1, 12), 16,"
                    " '0'))::bit(64)::bigint / 1000.0) AS made"
                    " FROM cryo.runs WHERE parent_run_id = %s) s", (run_id,)).fetchone()
        finally:
            agent.terminate()
            agent.wait(timeout=20)
    span, busy = (finished - started).total_seconds(), float(busy)
    t = time.monotonic()
    for _ in range(50):
        subprocess.run(["script", "-qec", "bash -c true", "/dev/null"],
                       stdout=subprocess.DEVNULL, check=True)
    spawn_ms = (time.monotonic() - t) / 50 * 1000
    out = {"nodes": jobs, "span_s": span, "per_node_ms": span / jobs * 1000,
           "job_ms": busy / jobs * 1000, "between_ms": (span - busy) / max(jobs - 1, 1) * 1000,
           "spawn_ms": spawn_ms, "driver_ms": float(driver_s) * 1000,
           "claim_ms": float(claim_s) * 1000}
    log(f"graph chain of {jobs}: {out['per_node_ms']:.1f} ms a node "
        f"({out['between_ms']:.1f} ms between nodes: driver {out['driver_ms']:.1f} ms, "
        f"agent claim {out['claim_ms']:.1f} ms); process start {spawn_ms:.1f} ms")
    bench.spent.append(db)
    return out


def graphs(bench: Bench, quick: bool) -> dict[str, Any]:
    per_level = 40 if quick else 200
    if os.environ.get("CRYOPG_BENCH_GRAPHS") == "chain":  # while working on the chain
        return {"state": {}, "shell": {}, "chain": chain(bench)}
    return {"state": graph_throughput(bench, "state", per_level),
            "shell": graph_throughput(bench, "shell", per_level // 2),
            "chain": chain(bench)}
