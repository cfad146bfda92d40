"""The cryopg benchmark driver: one tuned throwaway cluster, every measurement side by side.

Run through `bench/run` (which prepares both virtualenvs). Every figure is taken in
this run on this server, and each is reported against a baseline of the same run:
pgbench's one-row write for the physical limit, procrastinate and pgqueuer for peers.
Fixture data (the backlog) is loaded with plain SQL straight into the tables; every
measured transition goes through the engine's functions.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import multiprocessing as mp
import os
import platform
import queue
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from cryopg.devpg import Cluster
from cryopg.migrate import migrate
from cryopg.seal import MasterKey, Sealer, generate_master_key, parse_master_key

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PEERS_PY = BENCH / ".venv-peers" / "bin" / "python"
CLI = Path(sys.executable).parent / "cryopg"
LEVELS = (1, 4, 16)
# The agent path and its peers are also measured at 64: a deployment runs many agents,
# each doing one job at a time.
AGENT_LEVELS = (1, 4, 16, 64)
CAPS = ["shell", "polyglot"]
AGENT_SECRET = "cryo_a_bench-agent-secret"

# synchronous_commit and fsync stay on: pgbench, cryopg and the peers all pay a real
# WAL flush per commit, as they would in production.
SETTINGS = [
    "shared_buffers=1GB",
    "max_connections=300",
    "synchronous_commit=on",
    "fsync=on",
    "wal_buffers=16MB",
    "max_wal_size=8GB",
    "checkpoint_timeout=30min",
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=top",
]


@dataclasses.dataclass(frozen=True)
class Sizes:
    jobs: dict[int, int]
    pgbench_seconds: int
    latency_samples: int
    finished_backlog: int
    parked_backlog: int
    steps: int
    e2e_runs: int


FULL = Sizes(jobs={1: 4000, 4: 12000, 16: 12000, 64: 12000}, pgbench_seconds=10,
             latency_samples=1000,
             finished_backlog=1_000_000, parked_backlog=100_000, steps=1000, e2e_runs=1000)
# The levels the target ratios read (4 and 64), pgbench's seconds, the latency samples and
# the e2e runs are sized so each measurement lasts seconds, not a fraction of one: a peer's
# start (worker processes, connections) in a half-second run halved its rate, and the
# quick run's ratios drifted 40-75% from the full run's.
QUICK = Sizes(jobs={1: 500, 4: 6000, 16: 1500, 64: 12000}, pgbench_seconds=5,
              latency_samples=300, finished_backlog=50_000, parked_backlog=5_000, steps=50,
              e2e_runs=500)
E2E_AGENTS = (4, 8)


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# -- the cluster and its databases ----------------------------------------------------------

class Bench:
    def __init__(self, sizes: Sizes, batch: int) -> None:
        self.sizes = sizes
        self.batch = batch
        self.base = Path(tempfile.mkdtemp(prefix="cryopg-bench-"))
        self.base.chmod(0o755)
        # (CRYOPG_BENCH_PG_PORT: a second bench on the same machine takes another port.)
        self.cluster = Cluster(self.base, port=int(os.environ.get("CRYOPG_BENCH_PG_PORT", "5433")),
                               options=SETTINGS)
        self.master_text = generate_master_key()
        self.results: dict[str, Any] = {"levels": sorted({*LEVELS, *AGENT_LEVELS}),
                                        "batch": batch}
        self._dbs = 0
        self.spent: list[str] = []  # never dropped mid-run: DROP DATABASE forces a checkpoint

    def dsn(self, db: str) -> str:
        return self.cluster.dsn(db)

    def sql(self, db: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def start(self) -> None:
        self.cluster.start()
        self.sql("postgres", "CREATE DATABASE cryo_tpl")
        migrate(self.dsn("cryo_tpl"))
        master = MasterKey(parse_master_key(self.master_text))
        key_id, wrapped, _ = master.new_org_key("dev")
        with psycopg.connect(self.dsn("cryo_tpl"), autocommit=True) as conn:
            key_id, wrapped = conn.execute("SELECT * FROM cryo.set_org_key('dev', %s, %s)",
                                           (key_id, wrapped)).fetchone()
            import hashlib

            conn.execute("SELECT cryo.create_token('agent', 'dev', 'bench', %s, %s)",
                         (hashlib.sha256(AGENT_SECRET.encode()).digest(), CAPS))
        self.sealer = Sealer("dev", key_id, master.unwrap("dev", key_id, wrapped))
        self.sealed_source = self.sealer.seal_text("#!/bin/sh\ntrue\n")

    def fresh_db(self) -> str:
        """A new database cloned from the migrated template (org key and agent token in)."""
        self._dbs += 1
        name = f"cryo_{self._dbs}"
        self.sql("postgres", f"CREATE DATABASE {name} TEMPLATE cryo_tpl")
        return name

    def drop_db(self, name: str) -> None:
        self.sql("postgres", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def enqueue(self, db: str, n: int, vacuum: bool = True) -> None:
        """n no-op runs through cryo.submit_script, in one transaction."""
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            conn.execute(
                "SELECT count(*) FROM (SELECT cryo.submit_script('dev', 'default', 'noop.sh',"
                " NULL, %s, NULL, NULL, '{shell}') FROM generate_series(1, %s)) s",
                (self.sealed_source, n))
            # A database reused across levels (the backlog one) still holds the dead
            # queue rows of the last drain; a live system's autovacuum clears them between
            # bursts, and a fresh database has none. Clear them here so both compare.
            if vacuum:
                conn.execute("VACUUM ANALYZE cryo.queue")
                conn.execute("ANALYZE cryo.runs")

    def stop(self) -> None:
        try:
            self.cluster.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


# -- the machine ----------------------------------------------------------------------------

def machine(bench: Bench) -> dict[str, Any]:
    mem_kb = next(int(line.split()[1]) for line in open("/proc/meminfo")
                  if line.startswith("MemTotal"))
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    version = bench.sql("postgres", "SELECT version()")[0][0]
    names = sorted({s.split("=")[0] for s in SETTINGS} | {"commit_delay", "wal_level",
                                                         "full_page_writes", "work_mem"})
    settings = dict(bench.sql("postgres", "SELECT name, setting || coalesce(' ' || unit, '')"
                                          " FROM pg_settings WHERE name = ANY(%s) ORDER BY name",
                              (names,)))
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kb / 1024 / 1024, 1), "cpu": cpu,
            "kernel": platform.release(), "python": platform.python_version(),
            "postgres": version, "settings": settings}


# -- pgbench --------------------------------------------------------------------------------

def _pgbench_init(bench: Bench) -> None:
    bench.sql("postgres", "CREATE DATABASE pgb")
    bench.sql("pgb", "CREATE TABLE counters (id integer PRIMARY KEY, n bigint NOT NULL)")
    bench.sql("pgb", "INSERT INTO counters SELECT g, 0 FROM generate_series(1, 100000) g")
    bench.sql("pgb", "VACUUM ANALYZE counters")
    (bench.base / "one_row_write.sql").write_text(
        "\\set id random(1, 100000)\nUPDATE counters SET n = n + 1 WHERE id = :id;\n")


def run_pgbench(bench: Bench, levels: tuple[int, ...] = LEVELS) -> dict[int, float]:
    """One-row UPDATE transactions per second, a custom script at each client count."""
    if not bench.sql("postgres", "SELECT 1 FROM pg_database WHERE datname = 'pgb'"):
        _pgbench_init(bench)
    out: dict[int, float] = {}
    for clients in levels:
        proc = subprocess.run(
            [str(bench.cluster.bindir / "pgbench"), "-n", "-f",
             str(bench.base / "one_row_write.sql"), "-c", str(clients),
             "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(bench.sizes.pgbench_seconds),
             "-h", str(bench.cluster.sockdir), "-p", str(bench.cluster.port), "-U", "cryopg",
             "pgb"], capture_output=True, text=True, check=True)
        tps = float(re.search(r"tps = ([\d.]+)", proc.stdout).group(1))
        out[clients] = tps
        log(f"pgbench {clients} clients: {tps:.0f} tps")
    return out


# -- cryopg claimers on the SQL functions ---------------------------------------------------

def _warm(conn: psycopg.Connection) -> None:
    """Compile the functions in this session before the clock starts (an org with no work)."""
    conn.execute("SELECT * FROM cryo.claim_job('bench-warm', 'bench', %s, 30)", (CAPS,))
    conn.execute("SELECT * FROM cryo.claim_jobs('bench-warm', 'bench', %s, 30, 1)", (CAPS,))
    conn.execute("SELECT * FROM cryo.finish_runs('{}', '{}', '{}', NULL, NULL)")
    try:
        conn.execute("SELECT cryo.finish_run('none', gen_random_uuid(), 'succeeded')")
    except psycopg.Error:
        pass


def _sql_claimer(dsn: str, batch: int, ready: Any, results: Any) -> None:
    done = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        _warm(conn)
        ready.wait()
        while True:
            if batch == 1:
                row = conn.execute(
                    "SELECT run_id, claim_token FROM cryo.claim_job('dev', 'bench', %s, 30)",
                    (CAPS,), prepare=True).fetchone()
                if row is None:
                    break
                conn.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0, NULL)", row,
                             prepare=True)
                done += 1
            else:
                rows = conn.execute(
                    "SELECT run_id, claim_token FROM cryo.claim_jobs('dev', 'bench', %s, 30, %s)",
                    (CAPS, batch), prepare=True).fetchall()
                if not rows:
                    break
                conn.execute(
                    "SELECT count(*) FROM cryo.finish_runs(%s, %s, %s, NULL, NULL)",
                    ([r[0] for r in rows], [r[1] for r in rows], ["succeeded"] * len(rows)),
                    prepare=True)
                done += len(rows)
    results.put((done, time.monotonic()))


def _http_claimer(port: int, index: int, ready: Any, results: Any) -> None:
    """What agent/api.py does per job, with a no-op job: a claim, then finishes that each
    ask for the next run in the same request, until one brings none."""
    import http.client

    headers = {"Authorization": f"Bearer {AGENT_SECRET}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    ask = {"agent_id": f"bench-{index}", "capabilities": ["shell"], "wait": 0}
    done = 0
    ready.wait()
    conn.request("POST", "/api/v1/agent/claim", json.dumps(ask), headers)
    resp = conn.getresponse()
    body = resp.read()
    grant = json.loads(body) if resp.status == 200 else None
    while grant is not None:
        conn.request("POST", f"/api/v1/agent/runs/{grant['run_id']}/finish",
                     json.dumps({"claim_token": grant["claim_token"], "outcome": "succeeded",
                                 "exit_code": 0, "claim": ask}), headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"finish answered {resp.status}: {body[:200]!r}")
        done += 1
        grant = json.loads(body)["next"]
    conn.close()
    results.put((done, time.monotonic()))


def _http_agents(port: int, agents: int, ready: Any, results: Any) -> None:
    """`agents` agents' worth of the same loop as _http_claimer, in one process: one
    keep-alive connection each, on asyncio streams with the few lines of HTTP/1.1 the
    agent API needs. As pgqueuer-fast runs its queue managers in one process, this keeps
    the load generator's own cost (64 processes of http.client parsing headers through
    the email package) from deciding a figure about the server."""
    import asyncio

    auth = f"Authorization: Bearer {AGENT_SECRET}\r\n"

    async def call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str,
                   body: bytes) -> tuple[int, bytes]:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: bench\r\n{auth}Content-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await reader.readexactly(length) if length else b""

    async def agent(index: int, go: asyncio.Event) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ask = {"agent_id": f"bench-{index}", "capabilities": ["shell"], "wait": 0}
        await go.wait()
        status, body = await call(reader, writer, "/api/v1/agent/claim",
                                  json.dumps(ask).encode())
        grant = json.loads(body) if status == 200 else None
        done = 0
        while grant is not None:
            status, body = await call(
                reader, writer, f"/api/v1/agent/runs/{grant['run_id']}/finish",
                json.dumps({"claim_token": grant["claim_token"], "outcome": "succeeded",
                            "exit_code": 0, "claim": ask}).encode())
            if status != 200:
                raise RuntimeError(f"finish answered {status}: {body[:200]!r}")
            done += 1
            grant = json.loads(body)["next"]
        writer.close()
        return done

    async def main() -> int:
        go = asyncio.Event()
        tasks = [asyncio.create_task(agent(i, go)) for i in range(agents)]
        await asyncio.sleep(0.2)  # every connection open before the start
        ready.wait()
        go.set()
        return sum(await asyncio.gather(*tasks))

    done = asyncio.run(main())
    results.put((done, time.monotonic()))


def _drive(target: Any, args_for: Any, workers: int) -> tuple[int, float]:
    ctx = mp.get_context("fork")
    ready = ctx.Barrier(workers + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_for(i), ready, results))
             for i in range(workers)]
    for p in procs:
        p.start()
    ready.wait(timeout=60)
    t0 = time.monotonic()
    got = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return sum(g[0] for g in got), max(g[1] for g in got) - t0


def _drive_one(target: Any, args: tuple[Any, ...]) -> tuple[int, float]:
    """One load process (`target(*args, ready, results)`), timed from its start signal."""
    ctx = mp.get_context("fork")
    ready = ctx.Barrier(2)
    results = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, ready, results))
    proc.start()
    ready.wait(timeout=60)
    t0 = time.monotonic()
    done, end = results.get(timeout=600)
    proc.join()
    return done, end - t0


def sql_throughput(bench: Bench, db: str | None, batch: int, label: str,
                   levels: tuple[int, ...] = LEVELS) -> dict[int, float]:
    out: dict[int, float] = {}
    for n in levels:
        use = db or bench.fresh_db()
        # Batched claimers go ~3x faster: give them ~3x the jobs, so every measured window
        # lasts seconds and a start-up hiccup does not decide the figure.
        jobs = bench.sizes.jobs[n] * (3 if batch > 1 else 1)
        bench.enqueue(use, jobs)
        done, secs = _drive(_sql_claimer, lambda i, use=use: (bench.dsn(use), batch), n)
        if done != jobs:
            raise RuntimeError(f"{label}: {done} of {jobs} jobs finished")
        out[n] = done / secs
        log(f"{label} {n} claimers: {out[n]:.0f} jobs/s ({done} in {secs:.2f} s)")
        if db is None:
            bench.spent.append(use)
    return out


@contextlib.contextmanager
def cryopg_server(bench: Bench, db: str) -> Iterator[int]:
    port = _free_port()
    env = dict(os.environ, CRYOPG_MASTER_KEY=bench.master_text)
    proc = subprocess.Popen([str(CLI), "server", "--database-url", bench.dsn(db), "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"cryopg server did not start: {proc.stderr.read()}") from None
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_throughput(bench: Bench, db: str | None = None, label: str = "cryopg HTTP",
                    levels: tuple[int, ...] = AGENT_LEVELS) -> dict[int, float]:
    """The agent path through a real `cryopg server`: each claimer is an HTTP client
    doing what an agent does per job (the claim's long-poll, then the finish)."""
    out: dict[int, float] = {}
    for n in levels:
        use = db or bench.fresh_db()
        jobs = bench.sizes.jobs[n]
        bench.enqueue(use, jobs)
        with cryopg_server(bench, use) as port:
            done, secs = _drive_one(_http_agents, (port, n))
        if done != jobs:
            raise RuntimeError(f"{label}: {done} of {jobs} jobs finished")
        out[n] = done / secs
        log(f"{label} {n} claimers: {out[n]:.0f} jobs/s ({done} in {secs:.2f} s)")
        if db is None:
            bench.spent.append(use)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- enqueue -> start latency ---------------------------------------------------------------

def _listening_claimer(dsn: str, count: int, ready: Any, results: Any) -> None:
    seen = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN cryo_work")
        ready.wait()
        while seen < count:
            for _ in conn.notifies(timeout=5.0, stop_after=1):
                pass
            while True:
                row = conn.execute(
                    "SELECT run_id, claim_token FROM cryo.claim_job('dev', 'bench', %s, 30)",
                    (CAPS,), prepare=True).fetchone()
                if row is None:
                    break
                results.put((row[0], time.monotonic()))
                seen += 1
                conn.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0, NULL)", row,
                             prepare=True)


def _long_poll_claimer(port: int, count: int, ready: Any, results: Any) -> None:
    import http.client

    headers = {"Authorization": f"Bearer {AGENT_SECRET}", "Content-Type": "application/json"}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"agent_id": "bench-lp", "capabilities": ["shell"], "wait": 25})
    ready.wait()
    seen = 0
    while seen < count:
        conn.request("POST", "/api/v1/agent/claim", body, headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status == 204:
            continue
        at = time.monotonic()
        grant = json.loads(data)
        results.put((grant["run_id"], at))
        seen += 1
        conn.request("POST", f"/api/v1/agent/runs/{grant['run_id']}/finish",
                     json.dumps({"claim_token": grant["claim_token"], "outcome": "succeeded"}),
                     headers)
        conn.getresponse().read()


def _latency(bench: Bench, db: str, target: Any, first_arg: Any, samples: int) -> dict[str, float]:
    ctx = mp.get_context("fork")
    ready = ctx.Barrier(2)
    results = ctx.Queue()
    proc = ctx.Process(target=target, args=(first_arg, samples, ready, results))
    proc.start()
    ready.wait(timeout=60)
    time.sleep(0.5)  # let the claimer settle into its wait
    lat: list[float] = []
    # The enqueue's own round trip, its commit's WAL flush among it: no claimer can start
    # a run sooner, so it is printed beside the latency as its floor on this machine.
    submits: list[float] = []
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        for i in range(samples):
            t0 = time.monotonic()
            run_id = conn.execute(
                "SELECT run_id FROM cryo.submit_script('dev', 'default', 'noop.sh', NULL, %s,"
                " NULL, NULL, '{shell}')", (bench.sealed_source,), prepare=True).fetchone()[0]
            submits.append((time.monotonic() - t0) * 1000)
            try:
                got, at = results.get(timeout=30)
            except queue.Empty:
                raise RuntimeError(f"latency: no claim of sample {i} within 30 s") from None
            if got != run_id:
                raise RuntimeError("latency: the claimer took another run")
            lat.append((at - t0) * 1000)
            time.sleep(0.01)  # the claimer is idle again before the next enqueue
    proc.join(timeout=30)
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {"p50_ms": statistics.median(lat), "p99_ms": p99, "samples": len(lat),
            "submit_p50_ms": statistics.median(submits)}


def latency(bench: Bench) -> dict[str, dict[str, float]]:
    db = bench.fresh_db()
    sql = _latency(bench, db, _listening_claimer, bench.dsn(db), bench.sizes.latency_samples)
    log(f"latency (SQL, LISTEN cryo_work): p50 {sql['p50_ms']:.2f} ms, p99 {sql['p99_ms']:.2f} ms"
        f" (the enqueue itself: p50 {sql['submit_p50_ms']:.2f} ms)")
    with cryopg_server(bench, db) as port:
        http = _latency(bench, db, _long_poll_claimer, port, bench.sizes.latency_samples)
    log(f"latency (HTTP long-poll): p50 {http['p50_ms']:.2f} ms, p99 {http['p99_ms']:.2f} ms"
        f" (the enqueue itself: p50 {http['submit_p50_ms']:.2f} ms)")
    bench.spent.append(db)
    out: dict[str, Any] = {"sql": sql, "http": http}
    if PEERS_PY.exists():  # right after cryopg's: this machine's speed drifts within minutes
        out["peers"] = {p: peer_latency(bench, p, bench.sizes.latency_samples)
                        for p in LATENCY_PEERS}
        best = min(out["peers"], key=lambda p: out["peers"][p]["p50_ms"])
        out["best_peer"] = best
        out["ratio_http_best_peer"] = http["p50_ms"] / out["peers"][best]["p50_ms"]
        log(f"ratio p50 http/best-peer: {out['ratio_http_best_peer']:.2f} (best peer {best},"
            f" p50 {out['peers'][best]['p50_ms']:.2f} ms; target <= 1.0)")
    return out


# The peers' LISTEN/NOTIFY paths (pgqueuer on asyncpg, its fastest driver).
LATENCY_PEERS = ("procrastinate", "pgqueuer")


def peer_latency(bench: Bench, peer: str, samples: int) -> dict[str, Any]:
    """A peer's enqueue -> start latency (bench/peers.py latency), in a database of its own."""
    db = f"lat_{peer}"
    bench.sql("postgres", f"DROP DATABASE IF EXISTS {db}")
    bench.sql("postgres", f"CREATE DATABASE {db}")
    proc = subprocess.run([str(PEERS_PY), str(BENCH / "peers.py"), "latency", peer,
                           bench.dsn(db), str(samples)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{peer} latency: {proc.stderr.strip()[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"latency ({peer}, LISTEN/NOTIFY): p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f}"
        f" ms (the enqueue itself: p50 {got['submit_p50_ms']:.2f} ms)")
    return got


# -- backlog ---------------------------------------------------------------------------------

BACKLOG_SQL = """
CREATE FUNCTION pg_temp.rid(t timestamptz, salt text) RETURNS text LANGUAGE sql IMMUTABLE AS
$f$ SELECT 'dev:default:run-' || lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0')
           || left(md5(salt), 8) $f$;
INSERT INTO cryo.runs (id, org, project, filename, source, status, attempt, exit_code,
                       created_at, started_at, finished_at, updated_at)
SELECT pg_temp.rid(t, 'f' || g), 'dev', 'default', 'noop.sh', %(src)s,
       'succeeded', 1, 0, t, t, t, t
  FROM generate_series(1, %(finished)s) g, LATERAL (SELECT now() - g * interval '1 s' AS t) x;
INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
SELECT pg_temp.rid(now() - g * interval '1 s', 'f' || g), 'dev', 'default', k, 1, now()
  FROM generate_series(1, %(finished)s) g, unnest(ARRAY['submitted', 'succeeded']) k;
INSERT INTO cryo.runs (id, org, project, filename, source, status, substate, attempt,
                       created_at, started_at, updated_at)
SELECT pg_temp.rid(now() - g * interval '1 ms', 'p' || g), 'dev', 'default', 'noop.sh', %(src)s,
       'parked', 'sleeping', 1, now(), now(), now()
  FROM generate_series(1, %(parked)s) g;
INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                          key_ordinal, attempt, status, due_at, created_at)
SELECT pg_temp.rid(now() - g * interval '1 ms', 'p' || g), 'dev', 'default', 0, 'sleep//0',
       'run', 'sleep', '', 0, 1, 'pending', now() + interval '30 days' + g * interval '1 s', now()
  FROM generate_series(1, %(parked)s) g;
INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at, wake_at,
                        park_reason, park_path, parked_at)
SELECT pg_temp.rid(now() - g * interval '1 ms', 'p' || g), 'dev', 'default', 'parked', '{shell}',
       now(), now() + interval '30 days' + g * interval '1 s', 'sleeping', 'sleep//0', now()
  FROM generate_series(1, %(parked)s) g;
"""

CLAIM_QUERY = """SELECT c.run_id FROM cryo.queue c
 WHERE c.org = 'dev' AND c.state = 'pending' AND c.required_caps <@ '{shell,polyglot}'
 ORDER BY c.enqueued_at LIMIT 1 FOR UPDATE SKIP LOCKED"""
WAKE_QUERY = """SELECT q.run_id, q.park_path FROM cryo.queue q
 WHERE q.state = 'parked' AND q.wake_at <= cryo.now()
 ORDER BY q.wake_at LIMIT 1000 FOR UPDATE SKIP LOCKED"""
LEASE_QUERY = """SELECT q.run_id FROM cryo.queue q
 WHERE q.state = 'claimed' AND q.claim_expires_at < cryo.now()
 LIMIT 1000 FOR UPDATE SKIP LOCKED"""


def backlog(bench: Bench, batch: int) -> dict[str, Any]:
    db = bench.fresh_db()
    t0 = time.monotonic()
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        with conn.transaction():
            for stmt in filter(str.strip, BACKLOG_SQL.split(";\n")):
                conn.execute(stmt, {"src": bench.sealed_source,
                                    "finished": bench.sizes.finished_backlog,
                                    "parked": bench.sizes.parked_backlog})
        # No CHECKPOINT here: the first write to each page after one costs a full-page
        # image in WAL, which would tax the measured runs rather than the backlog.
        conn.execute("VACUUM ANALYZE")
    log(f"backlog loaded in {time.monotonic() - t0:.1f} s")
    out: dict[str, Any] = {"finished": bench.sizes.finished_backlog,
                           "parked": bench.sizes.parked_backlog}
    bench.enqueue(db, 200)
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        plans = {}
        for name, query in (("claim", CLAIM_QUERY), ("wake", WAKE_QUERY), ("lease", LEASE_QUERY)):
            with conn.transaction(force_rollback=True):
                rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + query)
                plans[name] = "\n".join(r[0] for r in rows)
        t = time.monotonic()
        conn.execute("SELECT * FROM cryo.tick()")
        out["tick_ms"] = (time.monotonic() - t) * 1000
        # Drain those 200 so the measured runs start from only the backlog.
        while conn.execute("SELECT count(*) FROM (SELECT cryo.finish_run(run_id, claim_token,"
                           " 'succeeded') FROM cryo.claim_jobs('dev', 'bench', %s, 30, 100)) s",
                           (CAPS,)).fetchone()[0]:
            pass
    out["plans"] = plans
    # The HTTP path level by level beside a fresh empty database, so each ratio compares
    # figures taken within seconds of each other (the figures of the throughput section
    # are minutes older, and this machine's noise between them is 10-20%).
    out["http"], out["http_empty"] = {}, {}
    for n in LEVELS:
        out["http_empty"].update(http_throughput(bench, None, "cryopg HTTP (empty, beside)", (n,)))
        out["http"].update(http_throughput(bench, db, "cryopg HTTP (backlog)", (n,)))
        log(f"cryopg HTTP backlog / empty at {n}: {out['http'][n] / out['http_empty'][n]:.2f}")
    out["sql"] = sql_throughput(bench, db, 1, "cryopg SQL (backlog)")
    if batch > 1:
        out["sql_batched"] = sql_throughput(bench, db, batch, f"cryopg SQL batch {batch} (backlog)")
    bench.spent.append(db)
    return out


# -- peers -----------------------------------------------------------------------------------

PEERS = ("procrastinate", "pgqueuer", "pgqueuer-fast")


def peer_rate(bench: Bench, peer: str, n: int) -> float:
    """Jobs/s of one peer at n workers, in its own database (made on first use)."""
    db = peer.replace("-", "_")
    if not bench.sql("postgres", "SELECT 1 FROM pg_database WHERE datname = %s", (db,)):
        bench.sql("postgres", f"CREATE DATABASE {db}")
    # procrastinate is the slower of the two here: half the jobs keeps its runs short.
    jobs = bench.sizes.jobs[n] // (2 if peer == "procrastinate" else 1)
    proc = subprocess.run([str(PEERS_PY), str(BENCH / "peers.py"), peer,
                           bench.dsn(db), str(n), str(jobs), "120"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{peer}: {proc.stderr.strip()[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"{peer} {n} workers: {res['rate']:.0f} jobs/s ({res['jobs']} in"
        f" {res['seconds']:.2f} s{'' if res['complete'] else ', stopped at the time cap'})")
    return res["rate"]


def agent_path_and_peers(bench: Bench, http: bool, peers: bool) -> dict[str, Any]:
    """The HTTP agent path and every peer, level by level: at each level the peers run
    right after cryopg, so a ratio compares figures taken within a minute of each other
    (this shared machine's speed drifts by half over a quarter of an hour)."""
    out: dict[str, Any] = {}
    for n in AGENT_LEVELS:
        if http:
            out.setdefault("http", {}).update(http_throughput(bench, levels=(n,)))
        if peers:
            for peer in PEERS:
                out.setdefault("peers", {}).setdefault(peer, {})[n] = peer_rate(bench, peer, n)
    return out


# -- end to end: real agents running a trivial bash script ---------------------------------

NOOP_SH = "#!/bin/sh\ntrue\n"  # what bench.sealed_source holds


def spawn_limit(work: Path, parallel: int, runs: int) -> float:
    """Processes per second the machine starts the way an agent does (a PTY, then bash
    on the script): `script -qec 'bash noop.sh'` under `xargs -P`."""
    t = time.monotonic()
    subprocess.run(f"seq {runs} | xargs -P {parallel} -I{{}} script -qec 'bash noop.sh' /dev/null",
                   shell=True, cwd=work, check=True, stdout=subprocess.DEVNULL)
    return runs / (time.monotonic() - t)


def _agents(bench: Bench, port: int, n: int, work: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, CRYOPG_URL=f"http://127.0.0.1:{port}",
               CRYOPG_AGENT_TOKEN=AGENT_SECRET)
    return [subprocess.Popen([str(CLI), "agent", "--id", f"bench-e2e-{i}", "--scratch"],
                             cwd=work, env=env, stdout=subprocess.DEVNULL,
                             stderr=open(work / f"agent-{i}.log", "wb"))
            for i in range(n)]


def agents_up(conn: psycopg.Connection, n: int) -> None:
    """Waits (a minute at most) until n agents have registered, then until each is in
    its long-poll."""
    deadline = time.monotonic() + 60
    while conn.execute("SELECT count(*) FROM cryo.agents").fetchone()[0] < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: {n} agents did not come up")
        time.sleep(0.05)
    time.sleep(0.5)


def _queued(conn: psycopg.Connection) -> bool:
    """Whether any run is still queued (pending, claimed or parked)."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM cryo.queue)",
                        prepare=True).fetchone()[0]


def _finished(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM cryo.runs WHERE status = 'succeeded'",
                        prepare=True).fetchone()[0]


def e2e(bench: Bench) -> dict[str, Any]:
    """Runs/s of a trivial bash script through real `cryopg agent` processes (one job
    at a time each), beside the spawn limit measured the same way in the same minute.
    The agents are up and long-polling before the runs are enqueued in one commit; the
    clock stops when the last run's success has committed."""
    runs = bench.sizes.e2e_runs
    work = Path(tempfile.mkdtemp(prefix="cryopg-bench-e2e-"))
    (work / "noop.sh").write_text(NOOP_SH)
    out: dict[str, Any] = {"runs": runs, "e2e": {}, "spawn": {}}
    try:
        for n in E2E_AGENTS:
            before = spawn_limit(work, n, runs)
            db = bench.fresh_db()
            with cryopg_server(bench, db) as port:
                agents = _agents(bench, port, n, work)
                try:
                    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
                        agents_up(conn, n)
                        t = time.monotonic()
                        bench.enqueue(db, runs, vacuum=False)  # agents are waiting
                        deadline = time.monotonic() + 600
                        # A run's queue row goes in the transaction that ends it: the
                        # poll asks only whether any is left (a probe of a few rows),
                        # not a count of every run 200 times a second, which on two
                        # cores taxed the agents it was timing.
                        while _queued(conn):
                            if time.monotonic() > deadline:
                                raise RuntimeError(f"e2e: {_finished(conn)} of {runs} runs"
                                                   " finished")
                            time.sleep(0.005)
                        out["e2e"][n] = runs / (time.monotonic() - t)
                        if (done := _finished(conn)) != runs:
                            raise RuntimeError(f"e2e: {done} of {runs} runs succeeded")
                finally:
                    for a in agents:
                        a.terminate()
                    for a in agents:
                        try:
                            a.wait(timeout=20)
                        except subprocess.TimeoutExpired:
                            a.kill()
            bench.spent.append(db)
            # Taken again just after: the limit is the mean of the two, so a drift in
            # this machine's speed during the run moves both sides of the ratio alike.
            after = spawn_limit(work, n, runs)
            out["spawn"][n] = (before + after) / 2
            out.setdefault("spawn_each", {})[n] = [before, after]
            log(f"e2e {n} agents: {out['e2e'][n]:.0f} runs/s; spawn limit "
                f"{out['spawn'][n]:.0f} /s ({before:.0f} before, {after:.0f} after); "
                f"ratio {out['e2e'][n] / out['spawn'][n]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


# -- durable calls in a real script ---------------------------------------------------------

STEP_SCRIPT = """#!/usr/bin/env bash
set -e
t0=$(date +%s%N)
for i in $(seq {n}); do
    cryopg step noop -- true
done
t1=$(date +%s%N)
echo "BENCH-PASS $(( (t1 - t0) / 1000 ))"
cryopg sleep 1s
"""


# The same through the Python SDK: step_fn records the function's JSON result.
STEP_FN_SCRIPT = """import time
from cryosleep import script
t0 = time.monotonic_ns()
for i in range({n}):
    script.step_fn("noop", lambda: i)
print(f"BENCH-PASS {(time.monotonic_ns() - t0) // 1000}", flush=True)
script.sleep("1s")
"""


def _two_passes(work: Path, env: dict[str, str], name: str) -> list[float]:
    """Submits a script whose passes print their own timing, follows it, returns them."""
    proc = subprocess.run([str(CLI), "submit", name, "--follow"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1800)
    passes = [int(m) / 1e6 for m in re.findall(r"BENCH-PASS (\d+)", proc.stdout)]
    if proc.returncode != 0 or len(passes) != 2:
        raise RuntimeError(f"{name}: exit {proc.returncode}: {proc.stdout[-500:]}"
                           f" {proc.stderr[-500:]}")
    return passes


def steps(bench: Bench) -> dict[str, Any]:
    db = "cryo_steps"
    bench.sql("postgres", f"CREATE DATABASE {db} TEMPLATE cryo_tpl")
    work = Path(tempfile.mkdtemp(prefix="cryopg-bench-steps-"))
    n = bench.sizes.steps
    (work / "steps.sh").write_text(STEP_SCRIPT.replace("{n}", str(n)))
    (work / "steps.py").write_text(STEP_FN_SCRIPT.replace("{n}", str(n)))
    env = dict(os.environ, CRYOPG_MASTER_KEY=bench.master_text,
               PATH=f"{CLI.parent}:{os.environ.get('PATH', '')}")
    dev = subprocess.Popen([str(CLI), "dev", "--database-url", bench.dsn(db), "--port", "0",
                            "--agents", "1"], cwd=work, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (work / ".cryopg" / "dev.json").exists():
            if dev.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cryopg dev did not start: {dev.stderr.read()[-2000:]}")
            time.sleep(0.1)
        t0 = time.monotonic()
        passes = _two_passes(work, env, "steps.sh")
        total = time.monotonic() - t0
        fn_passes = _two_passes(work, env, "steps.py")
    finally:
        dev.terminate()
        try:
            dev.wait(timeout=20)
        except subprocess.TimeoutExpired:
            dev.kill()
        shutil.rmtree(work, ignore_errors=True)
        bench.spent.append(db)
    # Bare interpreter start, for scale: what any `cryopg …` call cannot go below.
    t = time.monotonic()
    for _ in range(20):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = (time.monotonic() - t) / 20 * 1000
    out = {"calls": n, "first_s": passes[0], "replay_s": passes[1],
           "first_ms": passes[0] * 1000 / n, "replay_ms": passes[1] * 1000 / n,
           "wall_s": total, "python_start_ms": bare,
           "step_fn_first_ms": fn_passes[0] * 1000 / n,
           "step_fn_replay_ms": fn_passes[1] * 1000 / n}
    log(f"cryopg step: first pass {out['first_ms']:.1f} ms/call, replay {out['replay_ms']:.1f}"
        f" ms/call (bare python start {bare:.1f} ms); step_fn: "
        f"{out['step_fn_first_ms']:.2f} / {out['step_fn_replay_ms']:.2f} ms/call")
    return out


# -- report -----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="reduced sizes, about six minutes")
    ap.add_argument("--batch", type=int, default=10, help="jobs per batched claim/finish")
    ap.add_argument("--out", type=Path, default=BENCH / "results")
    ap.add_argument("--only", default="", help="comma list of sections (for development)")
    args = ap.parse_args()
    sizes = QUICK if args.quick else FULL
    only = set(filter(None, args.only.split(",")))

    def want(section: str) -> bool:
        return not only or section in only

    bench = Bench(sizes, args.batch)
    started = time.monotonic()
    try:
        bench.start()
        r = bench.results
        r["mode"] = "quick" if args.quick else "full"
        r["machine"] = machine(bench)
        r["sizes"] = dataclasses.asdict(sizes)
        if want("peers"):  # (an --only run without peers needs no peers venv)
            r["peer_versions"] = json.loads(subprocess.run(
                [str(PEERS_PY), str(BENCH / "peers.py"), "versions"], capture_output=True,
                text=True, check=True).stdout)
        # pgbench and the SQL claimers alternate level by level, so a ratio compares
        # figures taken within seconds of each other.
        # pgbench runs before and after the claimers of each level and the mean is used,
        # as e2e does with the spawn limit: the commit latency both are bound by drifts
        # by 10-20% within minutes here.
        for n in LEVELS:
            before = run_pgbench(bench, (n,))[n] if want("pgbench") else None
            if want("sql"):
                r.setdefault("sql", {}).update(sql_throughput(bench, None, 1, "cryopg SQL", (n,)))
                if args.batch > 1:
                    r.setdefault("sql_batched", {}).update(sql_throughput(
                        bench, None, args.batch, f"cryopg SQL batch {args.batch}", (n,)))
            if before is not None:
                after = run_pgbench(bench, (n,))[n]
                r.setdefault("pgbench", {})[n] = (before + after) / 2
                r.setdefault("pgbench_each", {})[n] = [before, after]
        r.update(agent_path_and_peers(bench, want("http"), want("peers")))
        if want("e2e"):
            r["e2e"] = e2e(bench)
        if want("latency"):
            r["latency"] = latency(bench)
        if want("backlog"):
            r["backlog"] = backlog(bench, args.batch)
        if want("steps"):
            r["steps"] = steps(bench)
        if want("graphs"):
            import graph_bench  # bench/graph_bench.py; it imports this module's helpers

            r["graphs"] = graph_bench.graphs(bench, args.quick)
        if want("artifacts"):
            import artifact_bench  # bench/artifact_bench.py

            r["artifacts"] = artifact_bench.artifacts(args.quick)
        if want("artifact_latency"):
            import artifacts  # bench/artifacts.py

            r["artifact_latency"] = artifacts.artifact_latency(bench, args.quick)
        if want("replicas"):
            import replica_bench  # bench/replica_bench.py

            r["replicas"] = replica_bench.replicas(bench)
        if want("log_mover"):
            import log_mover  # bench/log_mover.py

            r["log_mover"] = log_mover.log_mover(bench, args.quick)
        if want("metrics"):
            import metrics_bench  # bench/metrics_bench.py

            r["metrics"] = metrics_bench.metrics(bench, args.quick)
        r["elapsed_s"] = time.monotonic() - started
    finally:
        bench.stop()
    from report import check, write_all  # bench/report.py, beside this file

    write_all(bench.results, args.out, PEERS_PY)
    return check(args.out / "latest.md")


if __name__ == "__main__":
    sys.exit(main())
