"""Graphs at any size (issue 39 items 1, 2, 8), as ratios taken in one run:

- a reading chain (state nodes, each writing the status of the node before it) at 400
  and 2,000 nodes: a node's cost must not grow with the chain (the scope a turn sends
  and SQL reads is what changed, not every ended node);
- a 20,000-item fan_out beside a one-node graph: the small graph ends within 2x its time
  alone, whether the fan_out runs (its limit raised for it) or is refused at its limit;
- node jobs of 10-node shell graphs against plain jobs, through the same four claimers
  that finish each job at once, 16 submitters.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

import psycopg
from driver import Bench, cryopg_server, log  # bench/driver.py, beside this file
from graph_bench import (
    _claimers,
    _graph,
    _one_graph,
    _run_ended,
    _span_ms,
    _submitter,
    _user_token,
)

ROUNDS = int(os.environ.get("CRYOPG_BENCH_ROUNDS", "3"))  # medians of this many


def reading_chain(bench: Bench, sizes: tuple[int, ...] = (400, 2000)) -> dict[str, Any]:
    """ms a node of a reading chain at each size, each size on its own server and fresh
    database, the sizes taken in turn round by round (the machine's load drifts over
    minutes; a ratio of figures taken apart would measure the drift)."""
    out: dict[str, Any] = {}
    got: dict[int, list[float]] = {n: [] for n in sizes}
    with contextlib.ExitStack() as stack:
        ports = {}
        for n in sizes:
            db = bench.fresh_db()
            _user_token(bench, db)
            ports[n] = (db, stack.enter_context(cryopg_server(bench, db)))
        for _ in range(ROUNDS):
            for n in sizes:
                db, port = ports[n]
                got[n].append(_span_ms(bench, db, port, _graph("state-reads", n)) / n)
    for n in sizes:
        bench.spent.append(ports[n][0])
        out[f"reads_{n}_ms_per_node"] = statistics.median(got[n])
        log(f"graph reading chain of {n}: {out[f'reads_{n}_ms_per_node']:.3f} ms a node "
            f"(median of {', '.join(f'{x:.3f}' for x in got[n])})")
    lo, hi = min(sizes), max(sizes)
    out["ratio"] = out[f"reads_{hi}_ms_per_node"] / out[f"reads_{lo}_ms_per_node"]
    out["sizes"] = [lo, hi]
    log(f"ratio reading-chain {hi}/{lo} per node: {out['ratio']:.2f} (target <= 1.3)")
    return out


def _fan_doc(n: int) -> str:
    return json.dumps({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "each", "type": "state", "fan_out": {"items": {"$expr": "input.xs"}},
         "config": {"op": "incr", "key": "n", "by": 1}}]})


def big_fan_out(bench: Bench, items: int = 20000) -> dict[str, Any]:
    """One-node graphs timed alone, then beside a fan_out of `items` (its limit raised to
    `items` for this server, so it runs rather than being refused)."""
    one = _graph("state", 1)
    saved = os.environ.get("CRYOPG_GRAPH_FAN_OUT_MAX")
    os.environ["CRYOPG_GRAPH_FAN_OUT_MAX"] = str(items)
    db = bench.fresh_db()
    _user_token(bench, db)
    try:
        with cryopg_server(bench, db) as port:
            alone = [_span_ms(bench, db, port, one) for _ in range(5)]
            t0 = time.monotonic()
            fan = _one_graph(port, _fan_doc(items), {"xs": list(range(items))})
            time.sleep(0.5)  # its first turns are under way
            beside = [_span_ms(bench, db, port, one) for _ in range(5)]
            deadline = time.monotonic() + 1800
            while not _run_ended(bench, db, fan) and time.monotonic() < deadline:
                time.sleep(0.2)
            fan_s = time.monotonic() - t0
            with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
                status = conn.execute("SELECT status FROM cryo.runs WHERE id = %s",
                                      (fan,)).fetchone()[0]
    finally:
        if saved is None:
            os.environ.pop("CRYOPG_GRAPH_FAN_OUT_MAX", None)
        else:
            os.environ["CRYOPG_GRAPH_FAN_OUT_MAX"] = saved
    bench.spent.append(db)
    out = {"items": items, "alone_ms": statistics.median(alone),
           "beside_ms": statistics.median(beside), "fan_s": fan_s, "fan_status": status}
    out["ratio"] = out["beside_ms"] / out["alone_ms"]
    log(f"graph fan_out of {items}: {status} in {fan_s:.1f} s; a one-node graph beside it "
        f"{out['beside_ms']:.1f} ms, alone {out['alone_ms']:.1f} ms (medians of 5)")
    log(f"ratio one-node-graph beside-{items}-fan-out/alone: {out['ratio']:.2f} (target <= 2)")
    return out


PROFILE: list[tuple[str, int, float]] = []  # the last graph drain's top statements


def _drain(bench: Bench, kind: str, doc: str, filename: str, runs: int,
           submitters: int = 16) -> float:
    """Runs/s of `runs` submits of doc by `submitters` clients, four claimers finishing
    every job at once, timed from the first submit to the last run's end. For graphs,
    where the database's time went (pg_stat_statements, top statements) in PROFILE."""
    db = bench.fresh_db()
    _user_token(bench, db)
    bench.sql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    bench.sql(db, "SELECT pg_stat_statements_reset()")
    ctx = mp.get_context("fork")
    with cryopg_server(bench, db) as port:
        stop = ctx.Event()
        claimers = _claimers(port, 4, stop)
        ready, results = ctx.Barrier(submitters + 1), ctx.Queue()
        count = runs // submitters
        procs = [ctx.Process(target=_submitter, args=(port, doc, count, ready, results, filename))
                 for _ in range(submitters)]
        for p in procs:
            p.start()
        ready.wait(timeout=60)
        t0 = time.monotonic()
        total = sum(results.get(timeout=600) for _ in procs)
        deadline = time.monotonic() + 600
        with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
            while time.monotonic() < deadline:
                done = conn.execute("SELECT count(*) FROM cryo.runs WHERE kind = %s "
                                    "AND parent_run_id IS NULL AND finished_at IS NOT NULL",
                                    (kind,)).fetchone()[0]
                if done >= total:
                    break
                time.sleep(0.02)
        secs = time.monotonic() - t0
        if kind == "graph":
            PROFILE[:] = [(q, int(c), float(ms)) for q, c, ms in bench.sql(
                db, "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70), calls,"
                    " total_exec_time FROM pg_stat_statements s JOIN pg_database d"
                    " ON d.oid = s.dbid WHERE d.datname = current_database()"
                    " ORDER BY total_exec_time DESC LIMIT 12")]
        stop.set()
        for p in procs + claimers:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    bench.spent.append(db)
    return total / secs


def node_throughput(bench: Bench, graphs: int = 96) -> dict[str, Any]:
    """Node jobs/s of 10-node shell graphs against plain jobs/s (as many jobs), the same
    four claimers and 16 submitters; each the median of ROUNDS."""
    g, p = [], []
    for _ in range(ROUNDS):
        g.append(10 * _drain(bench, "graph", _graph("shell", 10), "g.json", graphs))
        p.append(_drain(bench, "script", "#!/bin/sh\ntrue\n", "noop.sh", graphs * 10))
    out = {"graph_node_jobs_s": statistics.median(g), "plain_jobs_s": statistics.median(p),
           "rounds_graph": g, "rounds_plain": p}
    out["ratio"] = out["graph_node_jobs_s"] / out["plain_jobs_s"]
    out["profile"] = list(PROFILE)
    for q, calls, ms in PROFILE:  # where a graph node's database time went
        log(f"  {ms:9.0f} ms {calls:7d} calls  {q}")
    log(f"graph node jobs {out['graph_node_jobs_s']:.0f}/s (10-node shell graphs), plain jobs "
        f"{out['plain_jobs_s']:.0f}/s, 4 claimers, 16 submitters (medians of {ROUNDS})")
    log(f"ratio graph-node-jobs/plain-jobs: {out['ratio']:.2f} (target >= 0.5)")
    return out


def scale(bench: Bench) -> dict[str, Any]:
    load = os.getloadavg()
    # CRYOPG_BENCH_SCALE: a comma list of parts (reads, fan, nodes), for development.
    parts = set(filter(None, os.environ.get("CRYOPG_BENCH_SCALE", "reads,fan,nodes").split(",")))
    out: dict[str, Any] = {}
    for part, fn in (("reads", reading_chain), ("fan", big_fan_out), ("nodes", node_throughput)):
        if part in parts:
            out[part] = fn(bench)
    out["load_before"] = load
    out["load_after"] = os.getloadavg()
    return out


def report_lines(sc: dict[str, Any]) -> list[str]:
    out = ["Graphs at any size (load average "
           f"{sc['load_before'][0]:.1f} before, {sc['load_after'][0]:.1f} after):", ""]
    rd, fan, nd = sc.get("reads"), sc.get("fan"), sc.get("nodes")
    if rd:
        lo, hi = rd["sizes"]
        out += [f"Reading chains of state nodes: {lo}: {rd[f'reads_{lo}_ms_per_node']:.2f}, "
                f"{hi}: {rd[f'reads_{hi}_ms_per_node']:.2f} ms a node (medians of {ROUNDS}).",
                "", f"ratio reading-chain {hi}/{lo} per node: {rd['ratio']:.2f} (target <= 1.3)",
                ""]
    if fan:
        out += [f"A fan_out of {fan['items']:,} items {fan['fan_status']} in "
                f"{fan['fan_s']:.1f} s; a one-node graph beside it {fan['beside_ms']:.1f} ms, "
                f"alone {fan['alone_ms']:.1f} ms (medians of 5).", "",
                f"ratio one-node-graph beside-fan-out/alone: {fan['ratio']:.2f} (target <= 2)", ""]
    if nd:
        out += [f"Node jobs of 10-node shell graphs: {nd['graph_node_jobs_s']:.0f}/s; plain "
                f"jobs: {nd['plain_jobs_s']:.0f}/s (four claimers, 16 submitters, medians of "
                f"{ROUNDS}).", "",
                f"ratio graph-node-jobs/plain-jobs: {nd['ratio']:.2f} (target >= 0.5)", ""]
    return out
