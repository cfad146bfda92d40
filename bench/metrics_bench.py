#!/usr/bin/env python3
"""Metrics (issue 40): what a scrape costs.

1. `ratio http-with-scrape/http`: the HTTP agent path (bench/driver.py's _http_agents, 16
   agents) through a `cryopg server` while GET /metrics is scraped every second, against
   the same without the scrape; alternated, several rounds, each on a fresh database, and
   the ratio of the medians. Target >= 0.98.
2. The scrape's time with 1,000,000 finished runs (and the parked backlog) in the
   database, loaded by driver.py's BACKLOG_SQL and the metric deltas folded as every
   replica's tick does: GET /metrics through the server, and cryo.read_metrics alone.
   Target < 5 ms.

Standalone: `python bench/metrics_bench.py [--quick] [--json]`. From bench/run it is the
`metrics` section of bench/driver.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from driver import (  # noqa: E402
    BACKLOG_SQL,
    FULL,
    QUICK,
    Bench,
    _drive_one,
    _http_agents,
    cryopg_server,
    log,
)

TOKEN = "bench-metrics-token"
AGENTS = 16


class Scraper:
    """GET /metrics on one keep-alive connection, as Prometheus scrapes a target."""

    def __init__(self, port: int) -> None:
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def __call__(self) -> float:
        t = time.perf_counter()
        self.conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"/metrics answered {resp.status}: {body[:200]!r}")
        self.last = body.decode()
        return (time.perf_counter() - t) * 1000


def _server_mean_ms(text: str) -> float:
    """The server's own mean time answering /metrics, from its request histogram."""
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith("cryopg_http_request_duration_seconds_") and 'route="/metrics"' in line:
            value = float(line.rsplit(" ", 1)[1])
            if line.startswith("cryopg_http_request_duration_seconds_sum"):
                total += value
            elif line.startswith("cryopg_http_request_duration_seconds_count"):
                count += value
    return total / count * 1000 if count else float("nan")


def _one_round(bench: Bench, scrape: bool, jobs: int) -> float:
    db = bench.fresh_db()
    bench.enqueue(db, jobs)
    with cryopg_server(bench, db) as port:
        stop = threading.Event()
        scrapes: list[float] = []
        scrape = scrape and Scraper(port)

        def scraper() -> None:
            while not stop.wait(1.0):
                scrapes.append(scrape())

        t = threading.Thread(target=scraper, daemon=True)
        if scrape:
            t.start()
        try:
            done, secs = _drive_one(_http_agents, (port, AGENTS))
        finally:
            stop.set()
            if scrape:
                t.join()
    if done != jobs:
        raise RuntimeError(f"metrics: {done} of {jobs} jobs finished")
    rate = done / secs
    log(f"metrics: HTTP {AGENTS} agents {'with' if scrape else 'without'} a scrape every "
        f"second: {rate:.0f} jobs/s ({done} in {secs:.1f} s, {len(scrapes)} scrapes)")
    bench.spent.append(db)
    return rate


def scrape_ratio(bench: Bench, quick: bool, rounds: int | None = None) -> dict[str, Any]:
    jobs = 6000 if quick else 20000
    rounds = rounds or (2 if quick else 3)
    plain, scraped = [], []
    for _ in range(rounds):  # alternated: this machine drifts 10-20% within minutes
        plain.append(_one_round(bench, False, jobs))
        scraped.append(_one_round(bench, True, jobs))
    return {"agents": AGENTS, "jobs": jobs, "http": plain, "http_with_scrape": scraped,
            "ratio": statistics.median(scraped) / statistics.median(plain)}


def scrape_time(bench: Bench, finished: int, parked: int) -> dict[str, Any]:
    db = bench.fresh_db()
    t0 = time.monotonic()
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        with conn.transaction():
            for stmt in filter(str.strip, BACKLOG_SQL.split(";\n")):
                conn.execute(stmt, {"src": bench.sealed_source, "finished": finished,
                                    "parked": parked})
        folded = conn.execute("SELECT cryo.fold_metrics()").fetchone()[0]
        conn.execute("VACUUM ANALYZE")
        runs = conn.execute("SELECT count(*) FROM cryo.runs").fetchone()[0]
    log(f"metrics: {runs} runs loaded and {folded} deltas folded in "
        f"{time.monotonic() - t0:.1f} s")
    sql_ms: list[float] = []
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        for _ in range(60):
            t = time.perf_counter()
            rows = conn.execute("SELECT * FROM cryo.read_metrics()").fetchall()
            sql_ms.append((time.perf_counter() - t) * 1000)
    with cryopg_server(bench, db) as port:
        scrape = Scraper(port)
        for _ in range(5):
            scrape()  # warm: the pool's connections, the plans
        http_ms = []
        for _ in range(60):
            http_ms.append(scrape())
            time.sleep(0.05)
        server_ms = _server_mean_ms(scrape.last)
    bench.spent.append(db)
    out = {"runs": runs, "series": len(rows),
           "sql_p50_ms": statistics.median(sql_ms), "http_p50_ms": statistics.median(http_ms),
           "http_p95_ms": sorted(http_ms)[int(len(http_ms) * 0.95) - 1],
           "server_mean_ms": server_ms}
    log(f"metrics: scrape with {runs} runs: GET /metrics p50 {out['http_p50_ms']:.2f} ms, "
        f"p95 {out['http_p95_ms']:.2f} ms (the server's own mean {server_ms:.2f} ms); "
        f"cryo.read_metrics p50 {out['sql_p50_ms']:.2f} ms")
    return out


def metrics(bench: Bench, quick: bool, only: str | None = None,
            rounds: int | None = None) -> dict[str, Any]:
    os.environ["CRYOPG_METRICS_TOKEN"] = TOKEN  # both arms: only the scraping differs
    try:
        sizes = QUICK if quick else FULL
        out: dict[str, Any] = {}
        if only in (None, "ratio"):
            out["scrape_ratio"] = scrape_ratio(bench, quick, rounds)
        if only in (None, "time"):
            out["scrape_time"] = scrape_time(bench, FULL.finished_backlog, sizes.parked_backlog)
        return out
    finally:
        os.environ.pop("CRYOPG_METRICS_TOKEN", None)


def render(r: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py), or nothing when it was not run."""
    m = r.get("metrics")
    if not m:
        return []
    sr, st = m.get("scrape_ratio"), m.get("scrape_time")
    if not (sr and st):
        return ["## Metrics", "", "```", json.dumps(m, indent=1), "```", ""]
    return ["## Metrics", "",
            f"The HTTP agent path ({sr['agents']} agents, {sr['jobs']} no-op jobs a round, "
            "rounds alternated on fresh databases) with GET /metrics scraped every second, "
            "against the same without; and a scrape's time with "
            f"{st['runs']:,} runs in the database ({st['series']} series).", "",
            "| figure | value |", "| --- | ---: |",
            f"| HTTP jobs/s without a scrape (median) | {statistics.median(sr['http']):.0f} |",
            f"| HTTP jobs/s scraped every second (median) | "
            f"{statistics.median(sr['http_with_scrape']):.0f} |",
            f"| ratio http-with-scrape/http | {sr['ratio']:.2f} |",
            f"| GET /metrics p50 / p95 (keep-alive client) | {st['http_p50_ms']:.2f} ms / "
            f"{st['http_p95_ms']:.2f} ms |",
            f"| GET /metrics, the server's own mean | "
            f"{st.get('server_mean_ms', float('nan')):.2f} ms |",
            f"| cryo.read_metrics p50 | {st['sql_p50_ms']:.2f} ms |", ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer jobs and rounds")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--only", choices=("ratio", "time"), help="one of the two figures")
    ap.add_argument("--rounds", type=int, help="rounds of each arm of the ratio")
    args = ap.parse_args()
    bench = Bench(QUICK if args.quick else FULL, 1)
    try:
        bench.start()
        got = metrics(bench, args.quick, args.only, args.rounds)
    finally:
        bench.stop()
    if args.json:
        print(json.dumps(got, indent=2))
    else:
        print("\n".join(render({"metrics": got})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
