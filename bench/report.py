"""Turn one run's results into the terminal table, results/latest.md and the chart."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import canvas_bench  # bench/canvas_bench.py, beside this file
import ui_bench  # bench/ui_bench.py, beside this file


def _f(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _row(name: str, values: list[str]) -> str:
    return "| " + " | ".join([name, *values]) + " |"


def cryopg_series(r: dict[str, Any]) -> tuple[str, dict[int, float]]:
    """The cryopg figure the ratios use: batched SQL claimers when measured, else plain."""
    if r.get("sql_batched"):
        return f"cryopg SQL, batch {r['batch']}", r["sql_batched"]
    return "cryopg SQL", r.get("sql", {})


def _at(series: dict[Any, float] | None, n: int) -> float | None:
    if not series:
        return None
    return series.get(n, series.get(str(n)))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def render(r: dict[str, Any]) -> str:
    levels = r["levels"]
    m = r["machine"]
    out: list[str] = []
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out += [f"# cryopg benchmarks ({r['mode']} run, {stamp})", ""]
    out += ["One throwaway PostgreSQL cluster; every figure below was measured in this run, "
            "side by side, on that one server.", ""]
    out += ["## Machine", ""]
    out += [f"- {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB memory, "
            f"Linux {m['kernel']}, Python {m['python']}",
            f"- {m['postgres']}",
            "- settings: " + ", ".join(f"{k}={v}" for k, v in m["settings"].items()),
            "- peers: " + ", ".join(f"{k} {v}" for k, v in r.get("peer_versions", {}).items()),
            ""]

    out += ["## Throughput by concurrency", "",
            "Jobs per second through claim -> complete of no-op jobs (pgbench: transactions "
            "per second of a one-row UPDATE). SQL claimers and the peers' workers are "
            "separate processes with their own connections (pgqueuer fast: queue managers "
            "in one process); the HTTP agents, one keep-alive connection each, share one "
            "load process, as an agent fleet on other machines costs this one nothing. "
            "pgbench runs just before and just after the SQL claimers of each level and "
            "the mean of the two is given; the HTTP agents and the peers alternate level by "
            "level, so each ratio compares figures taken minutes apart at most.", ""]
    out += [_row("", [f"{n}" for n in levels]), _row("---", ["---:"] * len(levels))]
    series: list[tuple[str, dict[Any, float] | None]] = [
        ("pgbench one-row write (tps)", r.get("pgbench")),
        ("cryopg SQL (claim_job + finish_run)", r.get("sql")),
        (f"cryopg SQL batch {r['batch']} (claim_jobs + finish_runs)", r.get("sql_batched")),
        ("cryopg HTTP agent API (claim + finish)", r.get("http")),
        ("procrastinate", (r.get("peers") or {}).get("procrastinate")),
        ("pgqueuer (psycopg, one process per worker)", (r.get("peers") or {}).get("pgqueuer")),
        ("pgqueuer fast (asyncpg, queue managers in one process, batch 10)",
         (r.get("peers") or {}).get("pgqueuer-fast")),
    ]
    for name, s in series:
        if s:
            out.append(_row(name, [_f(_at(s, n)) for n in levels]))
    label, cryo = cryopg_series(r)
    pgb = r.get("pgbench") or {}
    peers = r.get("peers") or {}
    best_peer = ({n: max((_at(p, n) or 0.0) for p in peers.values()) or None for n in levels}
                 if peers else {})
    if pgb and cryo:
        out.append(_row(f"ratio {label} / pgbench",
                        [_f(_ratio(_at(cryo, n), _at(pgb, n)), 2) for n in levels]))
    if best_peer and cryo:
        out.append(_row(f"ratio {label} / best peer",
                        [_f(_ratio(_at(cryo, n), best_peer[n]), 2) for n in levels]))
    http = r.get("http")
    if best_peer and http:
        out.append(_row("ratio cryopg HTTP agent API / best peer",
                        [_f(_ratio(_at(http, n), best_peer[n]), 2) for n in levels]))
    out.append("")
    if peers:
        out += ["The best peer at each level is the fastest configuration of any peer.", ""]

    e2e = r.get("e2e")
    if e2e:
        agents = sorted(int(n) for n in e2e["e2e"])
        out += ["## End to end: real agents, a trivial bash script", "",
                f"{e2e['runs']:,} runs of a one-line bash script (`true`) enqueued in one commit "
                "while real `cryopg agent` processes (one job at a time each) wait on their "
                "long-polls, through a real `cryopg server`; the clock stops when the last "
                "success has committed. The spawn limit is measured the same way just before and "
                "just after, and the mean of the two is used: as many `script -qec 'bash "
                "noop.sh'` (a PTY, then bash on the script) under `xargs -P` as there are "
                "agents.", "",
                _row("agents", ["runs/s", "spawn limit /s", "ratio"]),
                _row("---", ["---:"] * 3)]
        for n in agents:
            got, lim = _at(e2e["e2e"], n), _at(e2e["spawn"], n)
            out.append(_row(str(n), [_f(got), _f(lim), _f(got / lim, 2)]))
        out.append("")

    lat = r.get("latency")
    if lat:
        out += ["## Enqueue -> start latency", "",
                "One idle claimer; an enqueue (cryo.submit_script, which sends NOTIFY "
                "cryo_work) every ~10 ms; the clock stops when the claimer holds the claim. "
                "The enqueue's own round trip (its commit waits for the WAL flush) is the "
                "floor: no claimer can start the run before it has committed.", "",
                _row("claimer", ["p50 ms", "p99 ms", "samples", "enqueue p50 ms"]),
                _row("---", ["---:"] * 4)]
        for key, name in (("sql", "SQL: LISTEN cryo_work, then cryo.claim_job"),
                          ("http", "HTTP: long-poll POST /api/v1/agent/claim")):
            got = lat[key]
            out.append(_row(name, [_f(got["p50_ms"], 2), _f(got["p99_ms"], 2),
                                   str(got["samples"]), _f(got.get("submit_p50_ms"), 2)]))
        for peer, got in (lat.get("peers") or {}).items():
            out.append(_row(f"{peer}: its worker woken by LISTEN/NOTIFY, its own enqueue",
                            [_f(got["p50_ms"], 2), _f(got["p99_ms"], 2), str(got["samples"]),
                             _f(got.get("submit_p50_ms"), 2)]))
        if lat.get("ratio_http_best_peer") is not None:
            out += ["", f"ratio p50 http/best-peer ({lat['best_peer']}): "
                        f"{lat['ratio_http_best_peer']:.2f} (target <= 1.0)"]
        out.append("")

    bl = r.get("backlog")
    if bl:
        out += ["## Backlog insensitivity", "",
                f"The same claimers with {bl['finished']:,} finished runs (and two history "
                f"events each) and {bl['parked']:,} parked sleeping runs present, loaded as "
                f"fixture data. One cryo.tick() over that backlog took {bl['tick_ms']:.1f} ms.",
                "", _row("", [str(n) for n in levels]), _row("---", ["---:"] * len(levels))]
        if bl.get("http_empty"):
            out += [_row("cryopg HTTP agent API, empty, measured beside it (jobs/s)",
                         [_f(_at(bl["http_empty"], n)) for n in levels])]
        for key, name in (("http", "cryopg HTTP agent API"), ("sql", "cryopg SQL"),
                          ("sql_batched", f"cryopg SQL batch {r['batch']}")):
            # The HTTP path has its empty figure taken beside the backlog's; the others
            # compare with the throughput section's.
            empty = bl.get("http_empty") if key == "http" else None
            empty = empty or r.get(key)
            if bl.get(key) and empty:
                out.append(_row(f"{name}, backlog (jobs/s)",
                                [_f(_at(bl[key], n)) for n in levels]))
                out.append(_row(f"{name}, backlog / empty",
                                [_f(_ratio(_at(bl[key], n), _at(empty, n)), 2) for n in levels]))
        out.append("")
        for name, plan in bl["plans"].items():
            out += [f"EXPLAIN ANALYZE of the {name} query over the backlog:", "", "```",
                    plan, "```", ""]

    st = r.get("steps")
    if st:
        out += ["## Durable-call overhead in a real script", "",
                f"A bash script of {st['calls']:,} `cryopg step noop -- true` calls, then "
                "`cryopg sleep 1s`, and a Python script of as many `script.step_fn` calls "
                "then `script.sleep(1)`, each run by a real `cryopg dev --database-url ...` "
                "stack (one agent). The sleep parks the run, so the second pass replays "
                "every call.", "",
                _row("", ["first pass", "replay pass"]), _row("---", ["---:", "---:"]),
                _row(f"bash: {st['calls']:,} x cryopg step, total s",
                     [_f(st["first_s"], 2), _f(st["replay_s"], 2)]),
                _row("bash: per call, ms", [_f(st["first_ms"], 1), _f(st["replay_ms"], 1)]),
                _row("Python SDK: per step_fn call, ms",
                     [_f(st["step_fn_first_ms"], 2), _f(st["step_fn_replay_ms"], 2)]), "",
                f"For scale: starting a bare `python -c pass` takes {st['python_start_ms']:.1f} ms "
                "here.", ""]

    gr = r.get("graphs")
    if gr:
        out += ["## Graphs", "",
                "Runs/s of a 10-node graph submitted over HTTP to a real `cryopg server`, "
                "whose driver advances it, at 1 / 4 / 16 submitters. Shell nodes go to four "
                "HTTP claimers that finish each job at once, so that row is the engine's "
                "cost, not a process's.", "",
                _row("", [str(n) for n in levels]), _row("---", ["---:"] * len(levels)),
                _row("10 state nodes (runs/s)", [_f(_at(gr["state"], n), 1) for n in levels]),
                _row("10 shell nodes (runs/s)", [_f(_at(gr["shell"], n), 1) for n in levels]),
                ""]
        ch = gr.get("chain")  # absent with CRYOPG_BENCH_GRAPHS=flat
        out += [] if not ch else [
                f"A chain of {ch['nodes']} sequential `true` shell nodes on one real "
                f"`cryopg agent`: {ch['span_s']:.1f} s, {ch['per_node_ms']:.1f} ms a node, of "
                f"which {ch['job_ms']:.1f} ms inside the job (claim to finish) and "
                f"{ch['between_ms']:.1f} ms from one node's end to the next one's start. "
                f"Starting the process (`script -qec 'bash -c true'`) costs "
                f"{ch['spawn_ms']:.1f} ms here. Published for 400 sequential ~10 ms tasks on one "
                "worker: Windmill 19.7 s, Hatchet 35.8 s, Temporal 39.0 s.", ""]
        out += __import__("graph_bench").report_lines(gr)  # bench/graph_bench.py

    if r.get("artifacts"):
        import artifact_bench  # bench/artifact_bench.py, beside this file

        out += artifact_bench.render(r["artifacts"])
    out += __import__("artifacts").render(r)  # bench/artifacts.py: put/get latency

    if r.get("replicas"):
        import replica_bench  # bench/replica_bench.py, beside this file

        out += replica_bench.render(r)

    if r.get("log_mover"):
        import log_mover  # bench/log_mover.py, beside this file

        out += log_mover.render(r)

    if r.get("metrics"):
        import metrics_bench  # bench/metrics_bench.py, beside this file

        out += metrics_bench.render(r)

    out += ui_bench.section()
    out += canvas_bench.section()
    out.append(f"Run time: {r.get('elapsed_s', 0):.0f} s.")
    out.append("")
    r4 = None if not (cryo and pgb) else _at(cryo, 4) / _at(pgb, 4)
    p4 = None if not (cryo and best_peer) else _at(cryo, 4) / best_peer[4]
    out.append(f"ratio cryopg/pgbench at 4: {'n/a' if r4 is None else f'{r4:.2f}'}")
    out.append(f"ratio cryopg/best-peer at 4: {'n/a' if p4 is None else f'{p4:.2f}'}")
    # The product path. These lines end the file (TARGETS); check() reads them back.
    h64 = None if not (http and best_peer) else _ratio(_at(http, 64), best_peer.get(64))
    out.append(f"ratio cryopg-http/best-peer at 64: {_fmt(h64)}")
    for n in E2E_LEVELS:
        e = None if not e2e else _at(e2e["e2e"], n) / _at(e2e["spawn"], n)
        out.append(f"ratio e2e/spawn-limit at {n}: {_fmt(e)}")
    p50 = None if not lat else lat["http"]["p50_ms"]
    out.append(f"p50 enqueue-to-start http ms: {_fmt(p50)}")
    out.append(f"ratio p50 http/best-peer: {_fmt((lat or {}).get('ratio_http_best_peer'))}")
    return "\n".join(out) + "\n"


E2E_LEVELS = (4, 8)
# (regex of the line, the target it states, whether a figure meets it)
TARGETS = [
    (r"ratio cryopg-http/best-peer at 64: (\S+)", "HTTP agent path >= 1.0x the best peer at 64",
     lambda v: v >= 1.0),
    (r"ratio e2e/spawn-limit at 4: (\S+)", "end to end >= 0.8x the spawn limit at 4",
     lambda v: v >= 0.8),
    (r"ratio e2e/spawn-limit at 8: (\S+)", "end to end >= 0.8x the spawn limit at 8",
     lambda v: v >= 0.8),
    (r"p50 enqueue-to-start http ms: (\S+)", "p50 enqueue -> start over HTTP < 2 ms",
     lambda v: v < 2.0),
    (r"ratio p50 http/best-peer: (\S+)",
     "p50 enqueue -> start over HTTP <= 1.0x the best peer's (LISTEN/NOTIFY)",
     lambda v: v <= 1.0),
]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def check(path: Path) -> int:
    """Reads back the last lines of latest.md (one per TARGETS row): each must be the line the issue
    names, with a figure (N.NN) or n/a for a section not run. Prints whether each
    target is met; returns 1 if the lines are not there as named, else 0."""
    lines = path.read_text().rstrip("\n").splitlines()[-len(TARGETS):]
    status = 0
    for line, (pattern, target, met) in zip(lines, TARGETS, strict=True):
        m = re.fullmatch(pattern, line)
        if m is None or not re.fullmatch(r"\d+\.\d\d|n/a", m.group(1)):
            print(f"bench: check: expected a line like {pattern!r}, found {line!r}",
                  file=sys.stderr)
            status = 1
            continue
        value = m.group(1)
        verdict = "not measured" if value == "n/a" else ("met" if met(float(value)) else "NOT met")
        print(f"bench: target {target}: {value} ({verdict})", file=sys.stderr)
    return status


def chart(r: dict[str, Any], path: Path, python: Path) -> None:
    """Drawn by matplotlib in the peers venv, so the project venv stays lean."""
    data = {"levels": r["levels"], "series": {}}
    for name, s in (("pgbench (tps)", r.get("pgbench")), ("cryopg SQL", r.get("sql")),
                    (f"cryopg SQL batch {r['batch']}", r.get("sql_batched")),
                    ("cryopg HTTP", r.get("http")),
                    ("procrastinate", (r.get("peers") or {}).get("procrastinate")),
                    ("pgqueuer", (r.get("peers") or {}).get("pgqueuer")),
                    ("pgqueuer fast", (r.get("peers") or {}).get("pgqueuer-fast"))):
        if s:
            data["series"][name] = [_at(s, n) for n in r["levels"]]
    code = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = json.load(sys.stdin)
fig, ax = plt.subplots(figsize=(8, 5))
for name, ys in d["series"].items():
    ax.plot(d["levels"], ys, marker="o", linestyle="--" if "pgbench" in name else "-", label=name)
ax.set_xscale("log", base=2)
ax.set_xticks(d["levels"]); ax.set_xticklabels([str(n) for n in d["levels"]])
ax.set_xlabel("concurrent claimers / workers / clients")
ax.set_ylabel("jobs per second (pgbench: transactions per second)")
ax.set_title(d["title"])
ax.grid(True, alpha=0.3); ax.legend()
fig.tight_layout(); fig.savefig(sys.argv[1], dpi=120)
"""
    m = r["machine"]
    data["title"] = (f"no-op claim -> complete, {m['cores']} cores, "
                     f"{m['postgres'].split(' on ')[0]}")
    subprocess.run([str(python), "-c", code, str(path)], input=json.dumps(data), text=True,
                   check=True)


def write_all(r: dict[str, Any], out_dir: Path, python: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = render(r)
    print(text)
    (out_dir / "latest.md").write_text(text)
    (out_dir / "latest.json").write_text(json.dumps(r, indent=2, default=str) + "\n")
    try:
        chart(r, out_dir / "throughput.png", python)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"bench: chart not drawn ({exc})", file=sys.stderr)
