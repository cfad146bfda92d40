"""`GET /metrics` in the Prometheus text format (docs/operations.md).

Two sources. What every replica must report alike (runs submitted and finished, queue
depth, queue latencies, claims lapsed, wakes, artifact bytes, agents, the log mover's
backlog) is counted in the database (sql/functions/97_metrics.sql) and read in one
statement per scrape, so every replica answers the same numbers: aggregate them in
PromQL with max(), not sum(). What happens in this process (its request latency, its
graph turns, schedule ticks it fired, webhook deliveries it took, its log mover's
failures) is counted here, one series set per replica: sum() those.

Served on the API's address behind a dedicated scrape token (CRYOPG_METRICS_TOKEN, as a
Bearer token: the metrics span every org, so no org's token fits), and/or without auth
on a second listener (CRYOPG_METRICS_ADDR) meant for a private network.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import math
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import NotFound, Unauthorized
from cryopg.server.app_state import CONFIG, POOL

CONTENT_TYPE = CONTENT_TYPE_LATEST
disable_created_metrics()  # the client's creation timestamps: noise to a scraper
# As cryo._metric_bucket: the bounds, in seconds, of the queue's two latency histograms.
BOUNDS = ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10",
          "30", "60", "300", "900", "3600")
REQUEST_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ProcessMetrics:
    """This process's own series, in a registry of its own (tests run several apps)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Histogram(
            "cryopg_http_request_duration_seconds",
            "Time to answer an HTTP request, by route template (long-polls included).",
            ["method", "route", "status"], buckets=REQUEST_BOUNDS, registry=r)
        self.graph_turns = Counter(
            "cryopg_graph_turns", "Graph turns this replica's driver took, by result.",
            ["result"], registry=r)
        self.graph_turn_seconds = Histogram(
            "cryopg_graph_turn_seconds", "Time this replica's driver spent on one graph turn.",
            buckets=REQUEST_BOUNDS, registry=r)
        self.schedule_ticks = Counter(
            "cryopg_schedule_ticks", "Schedule ticks this replica fired (a run started) or "
            "skipped (its policy or condition started none).", ["result"], registry=r)
        self.webhook_deliveries = Counter(
            "cryopg_webhook_deliveries", "Webhook deliveries this replica took, by result.",
            ["result"], registry=r)
        self.log_move_failures = Counter(
            "cryopg_log_move_failures", "Rounds of this replica's log mover that failed.",
            registry=r)
        for result in ("fired", "skipped"):
            self.schedule_ticks.labels(result)
        for result in ("ok", "failed"):
            self.graph_turns.labels(result)


PROCESS = web.AppKey("process_metrics", ProcessMetrics)


def of(app: web.Application) -> ProcessMetrics | None:
    return app.get(PROCESS)


@web.middleware
async def request_metrics(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """Request latency by route template (never the raw path: bounded label values)."""
    started = time.perf_counter()
    status = 500
    try:
        resp = await handler(request)
        status = resp.status
        return resp
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        pm = request.app.get(PROCESS)
        if pm is not None:
            pm.requests.labels(request.method, route, str(status)).observe(
                time.perf_counter() - started)


# Database series: (family name, help, kind, label names after org/project).
_COUNTERS = {
    "runs_submitted": ("cryopg_runs_submitted", "Runs created, by kind (script, graph, "
                       "pipeline).", ["org", "project", "kind"]),
    "runs_finished": ("cryopg_runs_finished", "Runs that ended, by kind and outcome.",
                      ["org", "project", "kind", "outcome"]),
    "claims_lapsed": ("cryopg_claims_lapsed", "Claims that expired unrenewed (their agent "
                      "died or stalled); the run went back to the queue.", ["org", "project"]),
    "wakes": ("cryopg_wakes", "Parked runs woken, by cause.", ["org", "project", "cause"]),
}
_GAUGES = {
    "queue": ("cryopg_queue_runs", "Live runs in the queue by state (pending, claimed, "
              "parked).", ["org", "project", "state"]),
    "artifact_bytes": ("cryopg_artifact_bytes", "Bytes of stored artifact blobs.",
                       ["org", "project"]),
    "queue_oldest_pending_seconds": ("cryopg_queue_oldest_pending_seconds",
                                     "Age of the org's oldest pending run.", ["org"]),
    "agents": ("cryopg_agents", "Agents by state (idle, busy, draining, gone) and build.",
               ["org", "state", "build"]),
    "agent_capabilities": ("cryopg_agents_live_capability", "Live (idle or busy) agents "
                           "advertising a capability.", ["org", "capability"]),
    "queue_pending_capability": ("cryopg_queue_pending_capability", "Pending runs needing a "
                                 "capability, among the org's 1000 oldest pending.",
                                 ["org", "capability"]),
    "log_move_backlog": ("cryopg_log_move_backlog_runs", "Finished runs whose log waits to "
                         "move to the object store (counted up to 10000).", []),
}
_HISTOGRAMS = {
    "queue_wait_seconds": ("cryopg_queue_wait_seconds", "Time from enqueue (or wake) to "
                           "claim, by kind (job: an agent's; graph: a driver's turn)."),
    "claim_seconds": ("cryopg_claim_duration_seconds", "Time from claim to the run's end, "
                      "for runs that ended while claimed."),
}
_ORG_ONLY = {"queue_oldest_pending_seconds", "agents", "agent_capabilities",
             "queue_pending_capability"}


def families(rows: list[engine.MetricRow]) -> list[Metric]:
    """The database's rows as metric families (each family present even when empty)."""
    fams: dict[str, Metric] = {}
    for key, (name, doc, labels) in _COUNTERS.items():
        fams[key] = CounterMetricFamily(name, doc, labels=labels)
    for key, (name, doc, labels) in _GAUGES.items():
        fams[key] = GaugeMetricFamily(name, doc, labels=labels)
    for key, (name, doc) in _HISTOGRAMS.items():
        fams[key] = HistogramMetricFamily(name, doc, labels=["org", "project", "kind"])
    hist: dict[tuple[str, str, str, str], dict[str, float]] = defaultdict(dict)
    sums: dict[tuple[str, str, str, str], float] = defaultdict(float)
    for r in rows:
        if r.metric in _HISTOGRAMS:
            key = (r.metric, r.org, r.project, r.label)
            hist[key][r.label2] = r.value
            sums[key] += r.total
            continue
        fam = fams.get(r.metric)
        if fam is None:
            continue  # a series this server does not know (a newer replica's)
        names = _label_names(r.metric)
        values = ([r.org, r.label, r.label2] if r.metric in _ORG_ONLY
                  else [r.org, r.project, r.label, r.label2])[:len(names)]
        fam.add_metric(values, r.value)
    for (metric, org, project, kind), counts in hist.items():
        running, buckets = 0.0, []
        for bound in BOUNDS:
            running += counts.get(bound, 0.0)
            buckets.append((bound, running))
        buckets.append(("+Inf", running + counts.get("+Inf", 0.0)))
        fams[metric].add_metric([org, project, kind], buckets,
                                sum_value=sums[(metric, org, project, kind)])
    return list(fams.values())


def _label_names(metric: str) -> list[str]:
    return (_COUNTERS.get(metric) or _GAUGES[metric])[2]


class _DatabasePart:
    """The database's series, encoded, kept for CRYOPG_METRICS_CACHE_SECONDS: scrapes
    that come together (several Prometheus servers, a dashboard) share one read, and the
    counters only move when a tick folds anyway. `reads` counts the reads of the
    database (tests and operators can see the cache work); `clock` is swappable so a
    test can step past the window without sleeping."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.body = b""
        self.at = -math.inf
        self.reads = 0
        self.clock = clock
        self.lock = asyncio.Lock()

    def fresh(self, ttl: float) -> bool:
        return self.clock() - self.at < ttl


DATABASE_PART = web.AppKey("metrics_database_part", _DatabasePart)


def database_part(app: web.Application) -> _DatabasePart:
    """The app's cached database part (its `reads` counter, its `clock`)."""
    return app[DATABASE_PART]


async def _database_part(app: web.Application) -> bytes:
    part, ttl = app[DATABASE_PART], app[CONFIG].metrics_cache_seconds
    if part.fresh(ttl):
        return part.body
    async with part.lock:  # one read for the scrapes waiting meanwhile
        if part.fresh(ttl):
            return part.body
        store = app[CONFIG].log_store
        after = None if store is None else dt.timedelta(seconds=store.move_after_seconds)
        async with connection(app[POOL]) as conn:
            rows = await engine.read_metrics(conn, after)
        part.reads += 1
        part.body, part.at = exposition(families(rows)), part.clock()
        return part.body


async def render(app: web.Application) -> bytes:
    """The whole exposition: the database's series, then this process's."""
    own = app.get(PROCESS)
    mine = exposition(own.registry.collect()) if own else b""
    return await _database_part(app) + mine


class _Families:
    """What generate_latest reads: the families of one scrape."""

    def __init__(self, fams: list[Metric]) -> None:
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def exposition(fams: Iterable[Metric]) -> bytes:
    """The Prometheus text format of these families, written by prometheus_client."""
    return generate_latest(_Families(list(fams)))  # type: ignore[arg-type]


def _scrape_response(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def metrics_behind_token(request: web.Request) -> web.Response:
    token = request.app[CONFIG].metrics_token
    if not token:
        raise NotFound("metrics are not served on this address: set CRYOPG_METRICS_TOKEN "
                       "(scrape with it as a Bearer token) or CRYOPG_METRICS_ADDR")
    header = request.headers.get("Authorization", "")
    sent = header[7:].strip() if header.startswith("Bearer ") else ""
    if not hmac.compare_digest(sent.encode(), token.encode()):
        raise Unauthorized("GET /metrics needs the metrics token (CRYOPG_METRICS_TOKEN) as "
                           "a Bearer token")
    return _scrape_response(await render(request.app))


def _host_port(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"CRYOPG_METRICS_ADDR must be host:port, not {addr!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


async def metrics_listener_ctx(app: web.Application) -> AsyncIterator[None]:
    """CRYOPG_METRICS_ADDR: a second listener that serves GET /metrics alone, no auth."""
    addr = app[CONFIG].metrics_addr
    if not addr:
        yield
        return
    host, port = _host_port(addr)

    async def scrape(_request: web.Request) -> web.Response:
        return _scrape_response(await render(app))

    side = web.Application()
    side.router.add_get("/metrics", scrape)
    runner = web.AppRunner(side, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    yield
    await runner.cleanup()


async def fold_round(app: web.Application) -> None:
    """A tick round: history since the last fold counted (one replica at a time)."""
    recount = dt.timedelta(seconds=app[CONFIG].metrics_queue_recount_seconds)
    async with connection(app[POOL]) as conn:
        await engine.fold_metrics(conn, recount)


def setup(app: web.Application) -> None:
    app[PROCESS] = ProcessMetrics()
    app[DATABASE_PART] = _DatabasePart()
    app.cleanup_ctx.append(metrics_listener_ctx)
    app.router.add_get("/metrics", metrics_behind_token)


def count(app: web.Application, what: str, *labels: Any) -> None:
    """Counts one event of a process counter, if this app keeps metrics."""
    pm = app.get(PROCESS)
    if pm is not None:
        metric = getattr(pm, what)
        (metric.labels(*labels) if labels else metric).inc()


def turn(app: web.Application, seconds: float, result: str) -> None:
    """One graph turn of this replica's driver, and how long it took."""
    pm = app.get(PROCESS)
    if pm is not None:
        pm.graph_turns.labels(result).inc()
        pm.graph_turn_seconds.observe(seconds)
