"""Graph figures, beside the script ones: state chains and fan-outs at 10 and 1,000+ nodes
(a turn's cost must not grow with the graph), a 10-node state-only graph and a 10-node shell
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
import statistics
import subprocess
import time
import urllib.error
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
BIG = int(os.environ.get("CRYOPG_BENCH_BIG", "10000"))  # the graph run before the 2nd chain
LONG = 2000  # the longer shell chain of a full run, beside the 400-node one


def _graph(kind: str, n: int, *, edges: bool = True) -> str:
    if kind == "fan":  # one state node over n items
        return json.dumps({"version": "cryosleep-graph/v1", "nodes": [
            {"id": "each", "type": "state", "fan_out": {"items": {"$expr": "input.xs"}},
             "config": {"op": "incr", "key": "n", "by": 1}}]})
    if kind == "state":
        nodes = [{"id": f"n{i}", "type": "state",
                  "config": {"op": "set", "key": f"k{i}", "value": i}} for i in range(n)]
    elif kind == "state-reads":  # each state node writes the status of the node before
        first = {"op": "set", "key": "k0", "value": 0}
        nodes = [{"id": "n0", "type": "state", "config": first}] + [
            {"id": f"n{i}", "type": "state", "config": {
                "op": "set", "key": f"k{i}",
                "value": {"$template": f"{{{{ nodes.n{i - 1}.status }}}}"}}}
            for i in range(1, n)]
    elif kind == "shell-reads":  # each node's command reads the node before it
        nodes = [{"id": "n0", "type": "shell", "config": {"run": "true"}}] + [
            {"id": f"n{i}", "type": "shell", "config": {"run": {
                "$template": f"test '{{{{ nodes.n{i - 1}.status }}}}' = succeeded"}}}
            for i in range(1, n)]
    else:
        nodes = [{"id": f"n{i}", "type": "shell", "config": {"run": "true"}} for i in range(n)]
    links = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(n - 1)] if edges else []
    return json.dumps({"version": "cryosleep-graph/v1", "nodes": nodes, "edges": links})


def _user_token(bench: Bench, db: str) -> None:
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        conn.execute("SELECT cryo.ensure_member('dev', 'bench', 'owner')")
        conn.execute("SELECT cryo.create_token('user', 'dev', 'bench', %s, '{}', NULL, 'bench')",
                     (hashlib.sha256(USER_SECRET.encode()).digest(),))


def _submitter(port: int, doc: str, count: int, ready: Any, results: Any,
               filename: str = "g.json") -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {USER_SECRET}", "Content-Type": "application/json"}
    body = json.dumps({"source": doc, "filename": filename})
    conn.connect()  # before the clock starts
    ready.wait(timeout=60)
    for _ in range(count):
        conn.request("POST", "/api/v1/orgs/dev/projects/default/runs", body, headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 201:
            raise RuntimeError(f"submit answered {resp.status}")
    results.put(count)


def graphs_ended(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM cryo.runs WHERE kind = 'graph' "
                        "AND finished_at IS NOT NULL").fetchone()[0]


def _finished(bench: Bench, db: str) -> int:
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        return graphs_ended(conn)


def _run_ended(bench: Bench, db: str, run_id: str) -> bool:
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        return conn.execute("SELECT finished_at IS NOT NULL FROM cryo.runs WHERE id = %s",
                            (run_id,)).fetchone()[0]


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


def chain(bench: Bench, after: int = 0, nodes: int = 0, kind: str = "shell") -> dict[str, float]:
    """A chain of trivial shell nodes on one real agent: per-node overhead from the end of
    one node to the start of the next, beside the cost of starting the process. With
    `after`, a graph of that many state nodes runs to its end first on the same database
    (its rows stay), so the figure shows whether a node's cost grows with what ran. With
    `nodes`, a chain of that many instead of CRYOPG_BENCH_CHAIN (400); with kind
    "shell-reads", each node's command reads the status of the node before it."""
    nodes = nodes or CHAIN
    db = bench.fresh_db()
    _user_token(bench, db)
    with cryopg_server(bench, db) as port:
        if after:
            big_ms = _span_ms(bench, db, port, _graph("state", after, edges=False))
            log(f"graph of {after} state nodes (no edges): {big_ms / after:.3f} ms a node")
        env = dict(os.environ, CRYOPG_AGENT_TOKEN=AGENT_SECRET)
        agent = subprocess.Popen([str(CLI), "agent", "--url", f"http://127.0.0.1:{port}",
                                  "--cap", "shell"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/orgs/dev/projects/default/runs",
                json.dumps({"source": _graph(kind, nodes), "filename": "chain.json"}).encode(),
                {"Authorization": f"Bearer {USER_SECRET}", "Content-Type": "application/json"})
            with urllib.request.urlopen(req) as resp:
                run_id = json.loads(resp.read())["run_id"]
            deadline = time.monotonic() + 900
            while not _run_ended(bench, db, run_id) and time.monotonic() < deadline:
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
    out = {"after": after, "nodes": jobs, "span_s": span, "per_node_ms": span / jobs * 1000,
           "job_ms": busy / jobs * 1000, "between_ms": (span - busy) / max(jobs - 1, 1) * 1000,
           "spawn_ms": spawn_ms, "driver_ms": float(driver_s) * 1000,
           "claim_ms": float(claim_s) * 1000}
    where = (f" after a {after}-node graph" if after else "") + (
        ", each node reading the one before" if kind == "shell-reads" else "")
    log(f"graph chain of {jobs}{where}: {out['per_node_ms']:.1f} ms a node "
        f"({out['between_ms']:.1f} ms between nodes: driver {out['driver_ms']:.1f} ms, "
        f"agent claim {out['claim_ms']:.1f} ms); process start {spawn_ms:.1f} ms")
    log(f"ratio graph-node/spawn{where}: {out['per_node_ms'] / spawn_ms:.2f} (target <= 1.5; "
        f"per node <= process start + 10 ms: {out['per_node_ms']:.1f} <= {spawn_ms + 10:.1f})")
    bench.spent.append(db)
    return out


def _one_graph(port: int, doc: str, run_input: Any = None) -> str:
    body: dict[str, Any] = {"source": doc, "filename": "g.json"}
    if run_input is not None:
        body["input"] = run_input
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/orgs/dev/projects/default/runs", json.dumps(body).encode(),
        {"Authorization": f"Bearer {USER_SECRET}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as resp:
            return json.loads(resp.read())["run_id"]
    except urllib.error.HTTPError as exc:  # say why
        raise RuntimeError(f"submit answered {exc.code}: {exc.read()[:300]!r}") from None


def _span_ms(bench: Bench, db: str, port: int, doc: str, run_input: Any = None) -> float:
    """Wall time from a graph's submit to its end, polled every 2 ms. (The database's
    finished_at is its last turn's transaction start, too early to time a turn by.)"""
    t0 = time.monotonic()
    run_id = _one_graph(port, doc, run_input)
    deadline = t0 + 900
    with psycopg.connect(bench.dsn(db), autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT status, finished_at FROM cryo.runs WHERE id = %s",
                               (run_id,)).fetchone()
            if row[1] is not None:
                if row[0] != "succeeded":
                    raise RuntimeError(f"graph run {run_id} ended {row[0]}")
                return (time.monotonic() - t0) * 1000
            time.sleep(0.002)
    raise RuntimeError(f"graph run {run_id} did not finish")


def _burst(port: int, doc: str, count: int, ready: Any, results: Any) -> None:
    """A _submitter that reports its failure on `results` (the parent waits there)."""
    try:
        _submitter(port, doc, count, ready, results)
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        results.put(repr(exc))


def submit_burst(port: int, doc: str, runs: int, clients: int = 16) -> float:
    """`runs` submits of `doc` from `clients` processes on keep-alive connections, let go at
    once; returns when they were let go (time.monotonic()), once every submit answered."""
    ctx = mp.get_context("fork")
    ready, results = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [ctx.Process(target=_burst, args=(port, doc, runs // clients + (i < runs % clients),
                                                ready, results)) for i in range(clients)]
    for proc in procs:
        proc.start()
    ready.wait(timeout=60)
    t0 = time.monotonic()
    for _ in procs:
        got = results.get(timeout=600)
        if not isinstance(got, int):
            raise RuntimeError(f"a graph submitter failed: {got}")
    for proc in procs:
        proc.join(timeout=30)
    return t0


def concurrent_state(bench: Bench, runs: int = 100, nodes: int = 10, rounds: int = 5,
                     clients: int = 16) -> dict[str, Any]:
    """Bursts of `runs` state graphs of `nodes` chained nodes, submitted at once by
    `clients` processes on keep-alive connections, each timed from the first submit to
    the last run's end (polled on one open connection): graph runs a second, the median
    of `rounds` bursts after one that warms the server (its pool, its plans)."""
    db = bench.fresh_db()
    _user_token(bench, db)
    doc = _graph("state", nodes)
    rates: list[float] = []
    with cryopg_server(bench, db) as port, psycopg.connect(bench.dsn(db),
                                                           autocommit=True) as conn:
        for burst in range(rounds + 1):
            t0 = submit_burst(port, doc, runs, clients)
            deadline = t0 + 600
            while graphs_ended(conn) < (burst + 1) * runs:
                if time.monotonic() > deadline:
                    raise RuntimeError("concurrent graphs: runs did not end within 600 s")
                time.sleep(0.002)
            secs = time.monotonic() - t0
            if burst:
                rates.append(runs / secs)
    bench.spent.append(db)
    rate = statistics.median(rates)
    log(f"graphs {runs} concurrent {nodes}-node state graphs: {rate:.1f} runs/s, the median "
        f"of {', '.join(f'{x:.0f}' for x in rates)} (target >= 500 runs/s)")
    return {"runs_s": rate, "rounds": rates}


def flat_turns(bench: Bench, quick: bool) -> dict[str, float]:
    """State chains (one node a turn: the turn's cost) and fan-outs (one turn over every
    item) at 10 items and at 1,000 and more, each on a fresh server and database: the
    cost a node must not grow with the graph. Prints the issue's target lines."""
    out: dict[str, float] = {}
    sizes = (10, 400, 1000, 5000)
    for n in sizes:
        db = bench.fresh_db()
        _user_token(bench, db)
        with cryopg_server(bench, db) as port:
            out[f"state_chain_{n}_ms_per_node"] = _span_ms(bench, db, port,
                                                           _graph("state", n)) / n
        bench.spent.append(db)
        log(f"graph state chain of {n}: {out[f'state_chain_{n}_ms_per_node']:.3f} ms a node"
            " (target < 1 ms)")
    conc = concurrent_state(bench)
    out["concurrent_runs_s"] = conc["runs_s"]
    out["concurrent_rounds"] = conc["rounds"]
    for n in (10, 1000):
        db = bench.fresh_db()
        _user_token(bench, db)
        with cryopg_server(bench, db) as port:
            out[f"fan_{n}_ms_per_item"] = _span_ms(bench, db, port, _graph("fan", n),
                                                   {"xs": list(range(n))}) / n
        bench.spent.append(db)
        log(f"graph fan-out of {n}: {out[f'fan_{n}_ms_per_item']:.3f} ms an item")
    out["ratio_chain_1000_10"] = (out["state_chain_1000_ms_per_node"]
                                  / out["state_chain_10_ms_per_node"])
    out["ratio_fan_1000_10"] = out["fan_1000_ms_per_item"] / out["fan_10_ms_per_item"]
    log(f"ratio graph-turn 1000-node/10-node: {out['ratio_chain_1000_10']:.2f} (target <= 2)")
    log(f"ratio graph-turn fan-out 1000/10: {out['ratio_fan_1000_10']:.2f} (target <= 2)")
    out["ratio_chain_1000_400"] = (out["state_chain_1000_ms_per_node"]
                                   / out["state_chain_400_ms_per_node"])
    log(f"ratio graph-node 1000-chain/400-chain: {out['ratio_chain_1000_400']:.2f} "
        "(a node's cost flat in the graph's size: about 1)")
    out["ratio_chain_5000_400"] = (out["state_chain_5000_ms_per_node"]
                                   / out["state_chain_400_ms_per_node"])
    log(f"ratio graph-node 5000-chain/400-chain: {out['ratio_chain_5000_400']:.2f} (about 1)")
    return out


def graphs(bench: Bench, quick: bool) -> dict[str, Any]:
    per_level = 40 if quick else 200
    if os.environ.get("CRYOPG_BENCH_GRAPHS") == "chain":  # while working on the chain
        return {"state": {}, "shell": {}, "chain": chain(bench),
                "chain_after": chain(bench, BIG),
                "chain_reads": chain(bench, kind="shell-reads")}
    if os.environ.get("CRYOPG_BENCH_GRAPHS") == "flat":  # the flat-turn figures alone
        return {"state": {}, "shell": {}, "flat": flat_turns(bench, quick)}
    import graph_scale  # bench/graph_scale.py: issue 39's size figures

    if os.environ.get("CRYOPG_BENCH_GRAPHS") == "scale":  # those alone
        return {"state": {}, "shell": {}, "scale": graph_scale.scale(bench)}
    out = {"state": graph_throughput(bench, "state", per_level),
           "flat": flat_turns(bench, quick),
           "shell": graph_throughput(bench, "shell", per_level // 2),
           "chain": chain(bench),
           "chain_after": chain(bench, BIG)}
    out["chain_reads"] = chain(bench, kind="shell-reads")
    if not quick:  # an agent's node must not cost more in a longer graph either
        out["chain_long"] = chain(bench, nodes=LONG)
    out["scale"] = graph_scale.scale(bench)
    return out


def _rounds(fl: dict[str, Any]) -> str:
    """How the concurrent figure was taken, for the report line."""
    got = fl.get("concurrent_rounds")
    if not got:
        return ""
    return (f"; the median of {len(got)} bursts ({', '.join(f'{x:.0f}' for x in got)}), "
            "each 100 submits from 16 keep-alive clients at once, timed to the last run's end")


def report_lines(gr: dict[str, Any]) -> list[str]:
    """bench/report.py's lines for the flat-turn figures and the chain's ratio."""
    out: list[str] = []
    ch = gr.get("chain")
    if ch:
        out += [f"ratio graph-node/spawn: {ch['per_node_ms'] / ch['spawn_ms']:.2f} "
                f"(target <= 1.5; driver {ch['driver_ms']:.1f} ms, agent claim "
                f"{ch['claim_ms']:.1f} ms a node)", ""]
    ca = gr.get("chain_after")
    if ca:
        out += [f"ratio graph-node/spawn after a {ca['after']}-node graph: "
                f"{ca['per_node_ms'] / ca['spawn_ms']:.2f} (target <= 1.5)", ""]
    cr = gr.get("chain_reads")
    if cr:
        out += [f"ratio graph-node/spawn, each node reading the one before: "
                f"{cr['per_node_ms'] / cr['spawn_ms']:.2f} ({cr['per_node_ms']:.1f} ms a node; "
                f"driver {cr['driver_ms']:.1f} ms, agent claim {cr['claim_ms']:.1f} ms)", ""]
    cl = gr.get("chain_long")
    if ch and cl:
        out += [f"A chain of {cl['nodes']} shell nodes: {cl['per_node_ms']:.1f} ms a node (driver "
                f"{cl['driver_ms']:.1f} ms, agent claim {cl['claim_ms']:.1f} ms); process start "
                f"{cl['spawn_ms']:.1f} ms.", "",
                f"ratio graph-node {cl['nodes']}-shell-chain/{ch['nodes']}-shell-chain: "
                f"{cl['per_node_ms'] / ch['per_node_ms']:.2f} (a node's cost must not grow with "
                "the graph)", ""]
    fl = gr.get("flat")
    if fl:
        chains = sorted(int(k.split("_")[2]) for k in fl if k.startswith("state_chain_"))
        out += ["State chains, ms a node (wall time from submit to end, so the 10-node figure "
                "carries the submit): " + ", ".join(
                    f"{n}: {fl[f'state_chain_{n}_ms_per_node']:.2f}" for n in chains) + ". "
                f"Fan-outs, ms an item: 10: {fl['fan_10_ms_per_item']:.2f}, 1000: "
                f"{fl['fan_1000_ms_per_item']:.2f}.", "",
                f"ratio graph-node 1000-chain/400-chain: {fl['ratio_chain_1000_400']:.2f}",
                f"ratio graph-node 5000-chain/400-chain: {fl['ratio_chain_5000_400']:.2f}",
                f"ratio graph-turn fan-out 1000/10: {fl['ratio_fan_1000_10']:.2f}",
                f"100 concurrent 10-node state graphs: {fl['concurrent_runs_s']:.1f} runs/s "
                "(target >= 500)" + _rounds(fl), ""]
    if gr.get("scale"):
        out += __import__("graph_scale").report_lines(gr["scale"])  # bench/graph_scale.py
    return out
