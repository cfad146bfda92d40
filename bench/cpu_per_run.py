"""Where a run's CPU goes, end to end: `.venv/bin/python bench/cpu_per_run.py [AGENTS] [RUNS]`
enqueues RUNS trivial bash runs (default 1,000) for AGENTS real `cryopg agent`s (default 8)
on a fresh bench cluster and prints CPU ms per run of the server, the agents, the agents'
children (bash under its PTY) and the database's backends, read from /proc: CPU time, so
it moves far less with the machine's load than a rate does. Then the spawn limit's CPU
per process, measured the same way as bench/driver.py's e2e section.

`bench/cpu_per_run.py graphs [RUNS]` does the same for RUNS 10-node state graphs (default
2,000) submitted over HTTP by 16 keep-alive clients, as the bench's concurrent figure
does: CPU ms a graph of the server, the database's backends and the clients."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import driver  # bench/driver.py, beside this file
import psycopg

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pids: list[str]) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of these processes."""
    own = kids = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        own += (int(fields[11]) + int(fields[12])) / TICKS
        kids += (int(fields[13]) + int(fields[14])) / TICKS
    return own, kids


def _pids(pattern: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()


def graphs(runs: int) -> int:
    import graph_bench

    bench = driver.Bench(driver.QUICK, 1)
    try:
        bench.start()
        db = bench.fresh_db()
        graph_bench._user_token(bench, db)
        doc = graph_bench._graph("state", 10)
        with driver.cryopg_server(bench, db) as port, psycopg.connect(
                bench.dsn(db), autocommit=True) as conn:
            server = _pids(f"cryopg server .*--port {port}")
            graph_bench.submit_burst(port, doc, 200)  # warms the server's pool and plans
            while graph_bench.graphs_ended(conn) < 200:
                time.sleep(0.01)
            backends = _pids(f"postgres: .* {db} ")
            before, t0 = (_cpu(server), _cpu(backends)), os.times()
            t = graph_bench.submit_burst(port, doc, runs)
            while graph_bench.graphs_ended(conn) < 200 + runs:
                time.sleep(0.005)
            secs = time.monotonic() - t
            after, t1 = (_cpu(server), _cpu(_pids(f"postgres: .* {db} "))), os.times()
        clients = t1.children_user + t1.children_system - t0.children_user - t0.children_system
        print(f"{runs} 10-node state graphs from 16 clients: {runs / secs:.0f} runs/s; CPU ms a "
              f"graph: server {(after[0][0] - before[0][0]) / runs * 1000:.2f}, database "
              f"backends {(after[1][0] - before[1][0]) / runs * 1000:.2f}, clients "
              f"{clients / runs * 1000:.2f}")
    finally:
        bench.stop()
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "graphs":
        return graphs(int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
    agents = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    bench = driver.Bench(driver.QUICK, 1)
    work = Path(tempfile.mkdtemp(prefix="cryopg-cpu-"))
    (work / "noop.sh").write_text(driver.NOOP_SH)
    try:
        bench.start()
        db = bench.fresh_db()
        with driver.cryopg_server(bench, db) as port:
            server = _pids(f"cryopg server .*--port {port}")
            procs = driver._agents(bench, port, agents, work)
            try:
                with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
                    driver.agents_up(conn, agents)
                    backends = _pids(f"postgres: .* {db} ")
                    mine = [str(p.pid) for p in procs]
                    before = (_cpu(server), _cpu(mine), _cpu(backends))
                    t = time.monotonic()
                    bench.enqueue(db, runs, vacuum=False)
                    while driver._queued(conn):
                        time.sleep(0.005)
                    secs = time.monotonic() - t
                    after = (_cpu(server), _cpu(mine), _cpu(_pids(f"postgres: .* {db} ")))
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(timeout=20)

        def per_run(i: int, part: int) -> float:
            return (after[i][part] - before[i][part]) / runs * 1000

        print(f"{agents} agents, {runs} runs: {runs / secs:.0f} runs/s; CPU ms a run: server "
              f"{per_run(0, 0):.2f}, agents {per_run(1, 0):.2f}, their children (bash) "
              f"{per_run(1, 1):.2f}, database backends {per_run(2, 0):.2f}")
        t0 = os.times()
        rate = driver.spawn_limit(work, agents, runs)
        t1 = os.times()
        spent = t1.children_user + t1.children_system - t0.children_user - t0.children_system
        print(f"spawn limit at {agents}: {rate:.0f}/s; CPU ms a process: {spent / runs * 1000:.2f}")
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
