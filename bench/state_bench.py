#!/usr/bin/env python3
"""Benchmark of durable-state operations, beside pgbench on the same server in one run.

Measures, for a fixed time each:
  * get, set, add, cas and incr per second through the SQL path (the engine wrappers,
    sealing and opening values as the server does) and through HTTP (a real
    `cryopg server` subprocess, the agent state routes), with --workers concurrent
    callers, each holding its own claimed run;
  * incr of one hot entity key with 1, 4 and 16 concurrent writers, on both paths,
    checking that the final count equals the number of increments acknowledged;
  * pgbench one-row-update TPS (random rows and one hot row) at 1, 4 and 16 clients.

Standalone: `python bench/state_bench.py [--database-url DSN] [--seconds S] [--json]`.
Without --database-url it starts a private PostgreSQL cluster in a temp directory (the
same code as `cryopg dev`), with default (durable) settings. With one, it migrates
that database and creates its runs and tables in it -- use a scratch database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench.scratch import free_port, scratch_database  # noqa: E402
from cryopg import engine  # noqa: E402
from cryopg.db import connection, open_pool  # noqa: E402
from cryopg.devpg import find_bindir  # noqa: E402
from cryopg.migrate import migrate  # noqa: E402
from cryopg.seal import MasterKey, generate_master_key, parse_master_key  # noqa: E402
from cryopg.server.auth import new_secret, secret_hash  # noqa: E402
from cryopg.server.keys import OrgKeys  # noqa: E402
from cryopg.state_incr import incr_cell  # noqa: E402

OPS = ("get", "set", "add", "cas", "incr")
HOT_WRITERS = (1, 4, 16)
PGBENCH_CLIENTS = (1, 4, 16)


async def _timed(seconds: float, workers: list[Callable[[int], Awaitable[None]]]) -> float:
    """Run each worker's op in a loop for `seconds`; returns completed ops per second."""
    deadline = time.monotonic() + seconds
    counts = [0] * len(workers)

    async def loop(w: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            await workers[w](i)
            i += 1
        counts[w] = i

    start = time.monotonic()
    await asyncio.gather(*(loop(w) for w in range(len(workers))))
    return sum(counts) / (time.monotonic() - start)


class Bench:
    def __init__(self, dsn: str, seconds: float, workers: int) -> None:
        self.dsn, self.seconds, self.workers = dsn, seconds, workers
        self.master_text = generate_master_key()
        self.master = MasterKey(parse_master_key(self.master_text))
        self.tag = uuid.uuid4().hex[:6]  # keeps repeated runs on one database apart

    async def setup(self, runs_needed: int) -> None:
        self.pool = await open_pool(self.dsn, max_size=max(32, runs_needed + 4))
        self.sealer = await OrgKeys(self.pool, self.master).sealer("dev")
        self.agent_secret = new_secret("agent")
        async with connection(self.pool) as conn:
            await engine.create_token(conn, "agent", "dev", "state-bench",
                                      secret_hash(self.agent_secret), ["shell"])
            self.runs: list[tuple[str, uuid.UUID]] = []
            for _ in range(runs_needed):
                await engine.submit_script(conn, "dev", "default", filename="bench.sh",
                                           interpreter=None, source=self.sealer.seal_text(""),
                                           input=None, idempotency_key=None,
                                           required_caps=["shell"])
            while len(self.runs) < runs_needed:
                got = await engine.claim_job(conn, "dev", "state-bench", ["shell"], 86400)
                if got is None:
                    raise SystemExit("could not claim the bench runs")
                self.runs.append((got.run_id, got.claim_token))

    # -- the SQL path -------------------------------------------------------------------

    def sql_op(self, op: str, w: int, ent: str) -> Callable[[int], Awaitable[None]]:
        run_id, token = self.runs[w]
        state: dict[str, Any] = {"version": None}

        async def go(i: int) -> None:
            async with connection(self.pool) as conn:
                if op == "get":
                    cell = await engine.state_get(conn, "dev", "default", None, ent, "shared")
                    assert cell is not None and self.sealer.open_json(cell.value) == {"n": 1}
                elif op == "set":
                    await engine.state_set(conn, run_id, token, ent, f"set-{w}",
                                           self.sealer.seal_json({"i": i}))
                elif op == "add":
                    key = f"add-{w}-{i}"
                    got = await engine.state_add(conn, run_id, token, ent, key,
                                                 self.sealer.seal_json(True),
                                                 path=f"state.add/entity:{ent}:{key}/0",
                                                 name=f"entity:{ent}:{key}", ordinal=0)
                    assert got.won
                elif op == "cas":
                    if state["version"] is None:
                        state["version"] = await engine.state_set(
                            conn, run_id, token, ent, f"cas-{w}", self.sealer.seal_json(0))
                    got = await engine.state_cas(conn, run_id, token, ent, f"cas-{w}",
                                                 self.sealer.seal_json(i), state["version"],
                                                 path=f"state.cas/{ent}-cas-{i}/0",
                                                 name=f"{ent}-cas-{i}", ordinal=0)
                    assert got.won
                    state["version"] = got.version
            if op == "incr":
                await incr_cell(self.pool, self.sealer, run_id, token, ent, f"incr-{w}", 1,
                                {"path": f"state.incr/{ent}-incr-{i}/0", "name": f"{ent}-incr-{i}",
                                 "ordinal": 0})

        return go

    async def seed_shared(self, ent: str) -> None:
        run_id, token = self.runs[0]
        async with connection(self.pool) as conn:
            await engine.state_set(conn, run_id, token, ent, "shared",
                                   self.sealer.seal_json({"n": 1}))

    async def sql_hot(self, writers: int, ent: str) -> tuple[float, int, int]:
        done = [0]

        def worker(w: int) -> Callable[[int], Awaitable[None]]:
            run_id, token = self.runs[w]

            async def go(i: int) -> None:
                await incr_cell(self.pool, self.sealer, run_id, token, ent, "hot", 1,
                                {"path": f"state.incr/{ent}-hot-{i}/0", "name": f"{ent}-hot-{i}",
                                 "ordinal": 0})
                done[0] += 1

            return go

        rate = await _timed(self.seconds, [worker(w) for w in range(writers)])
        return rate, done[0], await self.total(ent, "hot")

    async def total(self, ent: str, key: str) -> int:
        async with connection(self.pool) as conn:
            cell = await engine.state_get(conn, "dev", "default", None, ent, key)
        return int(self.sealer.open_json(cell.value)) if cell else 0

    # -- the HTTP path ------------------------------------------------------------------

    def start_server(self, workdir: Path) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, CRYOPG_MASTER_KEY=self.master_text)
        self.server_log = open(workdir / "server.log", "wb")
        self.server = subprocess.Popen(
            [sys.executable, "-m", "cryopg.cli.entry", "server", "--database-url", self.dsn,
             "--port", str(port), "--claim-seconds", "86400"],
            cwd=ROOT, env=env, stdout=self.server_log, stderr=self.server_log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/api/v1/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"cryopg server did not start; see {workdir / 'server.log'}")

    def stop_server(self) -> None:
        self.server.terminate()
        self.server.wait(10)
        self.server_log.close()

    def http_op(self, session: aiohttp.ClientSession, op: str, w: int,
                ent: str, key: str | None = None) -> Callable[[int], Awaitable[None]]:
        run_id, token = self.runs[w]
        url = f"{self.url}/api/v1/agent/runs/{run_id}/state/"
        state: dict[str, Any] = {"version": None}

        async def post(what: str, body: dict[str, Any]) -> dict[str, Any]:
            async with session.post(url + what, json={"claim_token": str(token), "entity": ent,
                                                      **body}) as resp:
                got = await resp.json()
                if resp.status != 200:
                    raise SystemExit(f"{what}: HTTP {resp.status} {got}")
                return got

        async def go(i: int) -> None:
            if op == "get":
                assert (await post("get", {"key": "shared"}))["value"] == {"n": 1}
            elif op == "set":
                await post("set", {"key": f"hset-{w}", "value": {"i": i}})
            elif op == "add":
                k = f"hadd-{w}-{i}"
                got = await post("add", {"key": k, "path": f"state.add/entity:{ent}:{k}/0",
                                         "name": f"entity:{ent}:{k}", "ordinal": 0})
                assert got["claimed"]
            elif op == "cas":
                if state["version"] is None:
                    first = await post("set", {"key": f"hcas-{w}", "value": 0})
                    state["version"] = first["version"]
                got = await post("cas", {"key": f"hcas-{w}", "value": i, "expect": state["version"],
                                         "path": f"state.cas/{ent}-hcas-{i}/0",
                                         "name": f"{ent}-hcas-{i}", "ordinal": 0})
                assert got["swapped"]
                state["version"] = got["version"]
            elif op == "incr":
                k = key or f"hincr-{w}"
                await post("incr", {"key": k, "by": 1, "path": f"state.incr/{ent}-{k}-{i}/0",
                                    "name": f"{ent}-{k}-{i}", "ordinal": 0})

        return go


def pgbench(dsn: str, seconds: float) -> dict[str, dict[int, float]]:
    exe = shutil.which("pgbench") or str(find_bindir() / "pgbench")
    subprocess.run([exe, "-i", "-s", "1", "-q", dsn], check=True, capture_output=True)
    out: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {
            "update_random_row": "\\set aid random(1, 100000)\n"
                                 "UPDATE pgbench_accounts SET abalance = abalance + 1 "
                                 "WHERE aid = :aid;\n",
            "update_one_hot_row": "UPDATE pgbench_accounts SET abalance = abalance + 1 "
                                  "WHERE aid = 1;\n",
        }
        for name, body in scripts.items():
            path = Path(tmp) / f"{name}.sql"
            path.write_text(body)
            out[name] = {}
            for clients in PGBENCH_CLIENTS:
                done = subprocess.run(
                    [exe, "-n", "-c", str(clients), "-j", str(min(clients, 4)), "-T",
                     str(max(1, round(seconds))), "-f", str(path), dsn],
                    check=True, capture_output=True, text=True)
                m = re.search(r"tps = ([\d.]+)", done.stdout)
                out[name][clients] = float(m.group(1)) if m else float("nan")
    return out


async def run(args: argparse.Namespace, dsn: str, workdir: Path) -> dict[str, Any]:
    migrate(dsn)
    b = Bench(dsn, args.seconds, args.workers)
    await b.setup(max(args.workers, max(HOT_WRITERS)))
    results: dict[str, Any] = {"seconds_per_measure": args.seconds, "workers": args.workers,
                               "sql": {}, "http": {}, "hot_incr": {"sql": {}, "http": {}}}
    ent = f"bench-{b.tag}"
    await b.seed_shared(ent)
    for op in OPS:
        results["sql"][op] = await _timed(args.seconds, [b.sql_op(op, w, ent)
                                                         for w in range(args.workers)])
    for writers in HOT_WRITERS:
        hot_ent = f"hot-{b.tag}-sql-{writers}"
        rate, acked, total = await b.sql_hot(writers, hot_ent)
        assert total == acked, f"hot incr lost or doubled: {acked} acknowledged, total {total}"
        results["hot_incr"]["sql"][writers] = rate
    b.start_server(workdir)
    try:
        async with aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {b.agent_secret}"},
                connector=aiohttp.TCPConnector(limit=64)) as session:
            for op in OPS:
                results["http"][op] = await _timed(
                    args.seconds, [b.http_op(session, op, w, ent) for w in range(args.workers)])
            for writers in HOT_WRITERS:
                hot_ent = f"hot-{b.tag}-http-{writers}"
                rate = await _timed(args.seconds, [b.http_op(session, "incr", w, hot_ent, "hot")
                                                   for w in range(writers)])
                results["hot_incr"]["http"][writers] = rate
                acked = await _journal_count(b, f"{hot_ent}-hot-%")
                total = await b.total(hot_ent, "hot")
                assert total == acked, f"hot incr over HTTP: {acked} memos, total {total}"
    finally:
        b.stop_server()
        await b.pool.close()
    results["pgbench_tps"] = pgbench(dsn, args.seconds)
    return results


async def _journal_count(b: Bench, name_like: str) -> int:
    async with connection(b.pool) as conn:
        # Counting memos is a read of the journal, for the exactness check only.
        cur = await conn.execute("SELECT count(*) FROM cryo.journal WHERE key_name LIKE %s",
                                 (name_like,))
        return (await cur.fetchone())[0]


def _report(r: dict[str, Any]) -> str:
    lines = [f"state ops per second ({r['workers']} concurrent callers, "
             f"{r['seconds_per_measure']:g} s each)",
             f"{'op':<8}{'SQL path':>12}{'HTTP':>12}"]
    for op in OPS:
        lines.append(f"{op:<8}{r['sql'][op]:>12.0f}{r['http'][op]:>12.0f}")
    lines.append("")
    lines.append("incr on one hot key (ops/s; final count checked against acknowledged)")
    lines.append(f"{'writers':<8}{'SQL path':>12}{'HTTP':>12}"
                 f"{'pgbench hot row':>18}{'pgbench random':>16}")
    pg = r["pgbench_tps"]
    for n in HOT_WRITERS:
        lines.append(f"{n:<8}{r['hot_incr']['sql'][n]:>12.0f}{r['hot_incr']['http'][n]:>12.0f}"
                     f"{pg['update_one_hot_row'][n]:>18.0f}{pg['update_random_row'][n]:>16.0f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", help="a scratch database (default: a private cluster)")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each measure")
    ap.add_argument("--workers", type=int, default=4, help="concurrent callers per op")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args()
    with scratch_database(args.database_url, "statebench") as (dsn, workdir):
        results = asyncio.run(run(args, dsn, workdir))
    print(json.dumps(results, indent=2) if args.json else _report(results))


if __name__ == "__main__":
    main()
