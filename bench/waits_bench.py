#!/usr/bin/env python3
"""Benchmark of waking parked runs and of concurrency admission, at the SQL level.

Measures, on a private cluster (or a scratch database given with --database-url):
  * signal -> resume latency (p50/p99): a claimer waits on LISTEN cryo_work; the time
    from a committed cryo.send_signal to claim_job handing back the woken run. It
    excludes an interpreter's start-up, which is the agent's, not the engine's;
  * the wake rate: signals per second to distinct parked runs from 4 senders;
  * one event waking 1,000 waiters: the time of the one publish_event call;
  * all of it with --parked (10,000) other runs parked on events, so a wake that grew
    with the backlog would show;
  * admission: jobs/s through one hot concurrency group (each finish hands the group
    to the next waiter) and through 1,000 distinct groups, at 4 claimers; and the grant
    latency from a holder's finish_run to the claim of the waiter it promoted.

Standalone: `python bench/waits_bench.py [--database-url DSN] [--parked N] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.scratch import scratch_database  # noqa: E402
from cryopg.migrate import migrate  # noqa: E402

CAPS = ["shell", "polyglot"]


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def submit(db: psycopg.Connection, group: str | None = None) -> str:
    return db.execute(
        "SELECT run_id FROM cryo.submit_script('dev','default','b.sh',NULL,'\\x00',NULL,NULL,"
        "%s,NULL,NULL,%s,NULL)", (CAPS[:1], group)).fetchone()[0]


def claim(db: psycopg.Connection) -> tuple[str, Any] | None:
    row = db.execute("SELECT run_id, claim_token FROM cryo.claim_job('dev','bench',%s,60)",
                     (CAPS,)).fetchone()
    return (row[0], row[1]) if row else None


def park_backlog(db: psycopg.Connection, n: int) -> None:
    """n runs parked on events nobody sends, made by the engine's own functions."""
    # A DO block takes no parameters; n is an int, so formatting it in is safe.
    db.execute(f"""
        DO $$
        DECLARE c record;
        BEGIN
          FOR i IN 1..{int(n)} LOOP
            PERFORM cryo.submit_script('dev','default','idle.sh',NULL,'\\x00');
            SELECT * INTO c FROM cryo.claim_job('dev','backlog','{{shell}}',60);
            PERFORM cryo.wait_event(c.run_id, c.claim_token, NULL,
                                    'never-' || i, 0, NULL);
          END LOOP;
        END $$""")


def park_on_signal(db: psycopg.Connection, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        submit(db)
        run_id, token = claim(db)
        db.execute("SELECT * FROM cryo.wait_signal(%s,%s,NULL,'go',0,NULL)",
                   (run_id, token))
        ids.append(run_id)
    return ids


def drain(db: psycopg.Connection) -> None:
    while (got := claim(db)) is not None:
        db.execute("SELECT cryo.finish_run(%s,%s,'succeeded',0)", got)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def signal_latency(dsn: str, samples: int) -> dict[str, float]:
    setup, listener, claimer = connect(dsn), connect(dsn), connect(dsn)
    listener.execute("LISTEN cryo_work")
    lat = []
    for run_id in park_on_signal(setup, samples):
        for _ in listener.notifies(timeout=0):
            pass
        t0 = time.perf_counter()
        setup.execute("SELECT cryo.send_signal(%s,'go',p_sealed => '\\x01')", (run_id,))
        got = None
        while got is None:
            got = claim(claimer)
            if got is None:
                for _ in listener.notifies(timeout=1, stop_after=1):
                    pass
        lat.append((time.perf_counter() - t0) * 1000)
        claimer.execute("SELECT cryo.finish_run(%s,%s,'succeeded',0)", got)
    return {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "samples": len(lat)}


def parallel(dsn: str, workers: int, work: Callable[[psycopg.Connection, int], int]) -> int:
    done = [0] * workers

    def run(i: int) -> None:
        with connect(dsn) as db:
            done[i] = work(db, i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


def wake_rate(dsn: str, n: int, workers: int = 4) -> float:
    with connect(dsn) as db:
        ids = park_on_signal(db, n)
    t0 = time.perf_counter()
    parallel(dsn, workers, lambda db, i: sum(
        1 for r in ids[i::workers] if db.execute("SELECT cryo.send_signal(%s,'go')", (r,))))
    rate = n / (time.perf_counter() - t0)
    with connect(dsn) as db:
        drain(db)
    return rate


def event_fan_in(dsn: str, waiters: int) -> dict[str, float]:
    with connect(dsn) as db:
        for _ in range(waiters):
            submit(db)
            run_id, token = claim(db)
            db.execute("SELECT * FROM cryo.wait_event(%s,%s,NULL,'fan',0,NULL)",
                       (run_id, token))
        t0 = time.perf_counter()
        db.execute("SELECT cryo.publish_event('dev','default','fan')")
        took = time.perf_counter() - t0
        woken = db.execute("SELECT count(*) FROM cryo.queue WHERE state='pending'").fetchone()[0]
        drain(db)
    return {"waiters": waiters, "woken": woken, "publish_ms": took * 1000,
            "wakes_per_s": woken / took}


def admission_rate(dsn: str, runs: int, groups: int, workers: int = 4) -> float:
    with connect(dsn) as db:
        db.execute("SELECT cryo.set_admission_queue_limit('dev','default',%s)", (runs + 1,))
        for i in range(runs):
            submit(db, f"g-{i % groups}")
    t0 = time.perf_counter()

    def work(db: psycopg.Connection, _: int) -> int:
        n, idle = 0, 0
        while idle < 20:
            got = claim(db)
            if got is None:
                idle += 1
                time.sleep(0.001)
                continue
            idle = 0
            db.execute("SELECT cryo.finish_run(%s,%s,'succeeded',0)", got)
            n += 1
        return n

    finished = parallel(dsn, workers, work)
    return finished / (time.perf_counter() - t0)


def grant_latency(dsn: str, samples: int) -> dict[str, float]:
    db, listener = connect(dsn), connect(dsn)
    listener.execute("LISTEN cryo_work")
    lat = []
    submit(db, "relay")
    holder = claim(db)
    for _ in range(samples):
        waiter = submit(db, "relay")
        for _ in listener.notifies(timeout=0):
            pass
        t0 = time.perf_counter()
        db.execute("SELECT cryo.finish_run(%s,%s,'succeeded',0)", holder)
        holder = None
        while holder is None:
            holder = claim(db)
            if holder is None:
                for _ in listener.notifies(timeout=1, stop_after=1):
                    pass
        assert holder[0] == waiter
        lat.append((time.perf_counter() - t0) * 1000)
    db.execute("SELECT cryo.finish_run(%s,%s,'succeeded',0)", holder)
    return {"p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "samples": len(lat)}


def run(dsn: str, parked: int, samples: int) -> dict[str, Any]:
    with connect(dsn) as db:
        t0 = time.perf_counter()
        park_backlog(db, parked)
        backlog_s = time.perf_counter() - t0
        count = db.execute("SELECT count(*) FROM cryo.parked_runs").fetchone()[0]
    return {
        "parked_backlog": count, "backlog_setup_s": round(backlog_s, 1),
        "signal_to_resume": signal_latency(dsn, samples),
        "wake_rate_per_s": wake_rate(dsn, 2000),
        "event_fan_in": event_fan_in(dsn, 1000),
        "admission_hot_group_jobs_per_s": admission_rate(dsn, 1000, 1),
        "admission_1000_groups_jobs_per_s": admission_rate(dsn, 2000, 1000),
        "admission_no_group_jobs_per_s": admission_rate(dsn, 2000, 2000),
        "grant_latency": grant_latency(dsn, samples),
    }


def report(r: dict[str, Any]) -> str:
    s, g, f = r["signal_to_resume"], r["grant_latency"], r["event_fan_in"]
    rows = [
        ("parked runs present", f"{r['parked_backlog']}"),
        ("signal -> resume p50 / p99", f"{s['p50_ms']:.2f} / {s['p99_ms']:.2f} ms"),
        ("signal wakes per second (4 senders)", f"{r['wake_rate_per_s']:.0f}"),
        ("one event waking 1,000 waiters", f"{f['publish_ms']:.0f} ms ({f['wakes_per_s']:.0f}/s)"),
        ("admission, one hot group (jobs/s)", f"{r['admission_hot_group_jobs_per_s']:.0f}"),
        ("admission, 1,000 groups (jobs/s)", f"{r['admission_1000_groups_jobs_per_s']:.0f}"),
        ("distinct groups per run (jobs/s)", f"{r['admission_no_group_jobs_per_s']:.0f}"),
        ("grant latency p50 / p99", f"{g['p50_ms']:.2f} / {g['p99_ms']:.2f} ms"),
    ]
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"{a.ljust(width)}  {b}" for a, b in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", help="a scratch database (default: a private cluster)")
    ap.add_argument("--parked", type=int, default=10000, help="runs parked in the backlog")
    ap.add_argument("--samples", type=int, default=300, help="latency samples")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    with scratch_database(args.database_url, "waitsbench") as (dsn, _):
        migrate(dsn)
        results = run(dsn, args.parked, args.samples)
    print(json.dumps(results, indent=2) if args.json else report(results))


if __name__ == "__main__":
    main()
