"""Statements PostgreSQL plans again on most calls, on the two hot paths:
`.venv/bin/python bench/replans.py` runs 1,000 trivial runs through 4 real agents, then a
chain of 200 shell nodes, on a fresh bench cluster with pg_stat_statements tracking nested
statements and planning, and lists the statements planned on at least 30% of their calls
(calls, plans, planning ms a call). A statement planned on every call in steady state is
a function whose plan is not kept (a SQL function that is not inlined, or custom plans
chosen over and over); each pool connection's first five calls of a statement are
planned too, so short runs show some of those."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import driver  # bench/driver.py, beside this file
import graph_bench
import psycopg

REPORT = """SELECT calls, plans, round((total_plan_time / greatest(calls, 1))::numeric, 4),
       left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
  FROM pg_stat_statements
 WHERE calls >= %s AND plans::float / calls >= 0.3 AND query NOT LIKE '%%pg_stat%%'
 ORDER BY total_plan_time DESC LIMIT 25"""


def _report(conn: psycopg.Connection, title: str, at_least: int) -> None:
    print(f"== {title}: statements planned on 30% of their calls or more "
          "(calls, plans, planning ms a call)")
    for row in conn.execute(REPORT, (at_least,)):
        print(row)
    conn.execute("SELECT pg_stat_statements_reset()")


def main() -> int:
    driver.SETTINGS = [s.replace("track=top", "track=all") for s in driver.SETTINGS] + [
        "pg_stat_statements.track_planning=on"]
    bench = driver.Bench(driver.QUICK, 1)
    work = Path(tempfile.mkdtemp(prefix="cryopg-replans-"))
    (work / "noop.sh").write_text(driver.NOOP_SH)
    try:
        bench.start()
        bench.sql("cryo_tpl", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        db = bench.fresh_db()
        graph_bench._user_token(bench, db)
        with driver.cryopg_server(bench, db) as port:
            agents = driver._agents(bench, port, 4, work)
            try:
                with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
                    driver.agents_up(conn, 4)
                    bench.enqueue(db, 300, vacuum=False)  # every connection past its first plans
                    while driver._queued(conn):
                        time.sleep(0.01)
                    conn.execute("SELECT pg_stat_statements_reset()")
                    bench.enqueue(db, 1000, vacuum=False)
                    while driver._queued(conn):
                        time.sleep(0.01)
                    _report(conn, "1,000 runs through 4 agents", 500)
                    req = urllib.request.Request(
                        f"http://127.0.0.1:{port}/api/v1/orgs/dev/projects/default/runs",
                        json.dumps({"source": graph_bench._graph("shell", 200),
                                    "filename": "chain.json"}).encode(),
                        {"Authorization": f"Bearer {graph_bench.USER_SECRET}",
                         "Content-Type": "application/json"})
                    with urllib.request.urlopen(req) as resp:
                        run_id = json.loads(resp.read())["run_id"]
                    while not graph_bench._run_ended(bench, db, run_id):
                        time.sleep(0.1)
                    _report(conn, "a chain of 200 shell nodes", 150)
            finally:
                for a in agents:
                    a.terminate()
                for a in agents:
                    a.wait(timeout=20)
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
