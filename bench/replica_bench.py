"""Replicas (issue 25): claim->finish jobs/s through two `cryopg server` replicas on one
database beside one, with the same HTTP claimers (bench/driver.py's, what an agent does
per job), half of them on each replica. The database serialises both; the figure says
what a second server process adds (or costs) on the agent path."""

from __future__ import annotations

import contextlib
from typing import Any

from driver import (  # bench/driver.py, beside this file
    Bench,
    _drive,
    _http_claimer,
    cryopg_server,
    log,
)

REPLICA_LEVELS = (4, 16)


def replicas(bench: Bench) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {"one": {}, "two": {}}
    for n in REPLICA_LEVELS:
        for label, count in (("one", 1), ("two", 2)):
            db = bench.fresh_db()
            jobs = bench.sizes.jobs[n]
            bench.enqueue(db, jobs)
            with contextlib.ExitStack() as stack:
                ports = [stack.enter_context(cryopg_server(bench, db)) for _ in range(count)]
                done, secs = _drive(_http_claimer,
                                    lambda i, ports=ports: (ports[i % len(ports)], i), n)
            if done != jobs:
                raise RuntimeError(f"replicas {label}: {done} of {jobs} jobs finished")
            out[label][n] = done / secs
            log(f"cryopg HTTP, {count} replica(s), {n} claimers: {out[label][n]:.0f} jobs/s")
            bench.spent.append(db)
    return out


def render(r: dict[str, Any]) -> list[str]:
    """The report's section (bench/report.py), or nothing when it was not run."""
    rep = r.get("replicas")
    if not rep:
        return []

    def at(series: dict[Any, float], n: int) -> str:
        v = series.get(n, series.get(str(n)))
        return "-" if v is None else f"{v:.0f}"

    head = "| | " + " | ".join(f"{n} claimers" for n in REPLICA_LEVELS) + " |"
    return ["## Replicas", "",
            "Claim->finish jobs/s over HTTP with one `cryopg server` and with two replicas on "
            "the same database (claimers split between them).", "",
            head, "|---|" + "---:|" * len(REPLICA_LEVELS),
            "| 1 replica | " + " | ".join(at(rep["one"], n) for n in REPLICA_LEVELS) + " |",
            "| 2 replicas | " + " | ".join(at(rep["two"], n) for n in REPLICA_LEVELS) + " |",
            ""]
