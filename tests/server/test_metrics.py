"""GET /metrics (issue 40, item 1): behind the deployment's scrape token or on a listener of
its own; the engine's counters come from the database (every replica reads the same),
request latency from the process, labelled by route template, never by a raw path."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from cryopg import engine
from cryopg.db import translated
from cryopg.errors import BadQueueRecount
from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from cryopg.server.metrics import database_part
from tests.server.conftest import CLAIM_SECONDS, Server, _bootstrap

TOKEN = "scrape-secret-1"


def _config(dsn: str, **kw: object) -> ServerConfig:
    base = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                        claim_seconds=CLAIM_SECONDS, tick_interval=3600.0,
                        claim_wait_max=2.0, pool_size=4,
                        metrics_cache_seconds=0.0)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def msrv(dsn: str, tmp_path: Path) -> AsyncIterator[Server]:
    tokens = await _bootstrap(dsn)
    async with TestClient(TestServer(build_app(_config(dsn, metrics_token=TOKEN)))) as client:
        yield Server(client, dsn, tokens, tmp_path)


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text)
            for s in fam.samples]


def _value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    got = [v for n, lab, v in samples if n == name and all(lab.get(k) == x
                                                            for k, x in labels.items())]
    return sum(got)


async def _fold(srv: Server) -> None:
    """What two ticks' folds do: the third fold finds every history row final."""
    async with await srv.connect() as conn:
        for _ in range(3):
            await engine.fold_metrics(conn, dt.timedelta(0))


async def _scrape(srv: Server) -> list[tuple[str, dict[str, str], float]]:
    await _fold(srv)
    reply = await srv.request("GET", "/metrics", token=TOKEN)
    assert reply.status == 200, reply.text
    return _samples(reply.text)


async def test_metrics_need_the_scrape_token(dsn: str, msrv: Server) -> None:
    assert (await msrv.request("GET", "/metrics", token=None)).refused(401, "unauthorized")
    # an org owner's token is not the scrape token: metrics span every org
    assert (await msrv.request("GET", "/metrics", token=msrv.tokens["owner"])).status == 401
    assert (await msrv.request("GET", "/metrics", token=TOKEN)).status == 200


async def test_without_a_token_configured_metrics_are_not_served(srv: Server) -> None:
    assert (await srv.request("GET", "/metrics", token="anything")).refused(404, "not_found")


async def test_runs_queue_and_latencies_come_from_the_database(msrv: Server) -> None:
    ok = await msrv.run_to_end("echo ok\n")
    await msrv.run_to_end("exit 3\n", outcome="failed")
    waiting = await msrv.submit("echo later\n")
    held = await msrv.submit("echo held\n")
    await msrv.claim_run(waiting)
    s = await _scrape(msrv)
    base = {"org": "dev", "project": "default"}
    assert _value(s, "cryopg_runs_submitted_total", kind="script", **base) == 4
    assert _value(s, "cryopg_runs_finished_total", outcome="succeeded", kind="script", **base) == 1
    assert _value(s, "cryopg_runs_finished_total", outcome="failed", **base) == 1
    assert _value(s, "cryopg_queue_runs", state="pending", **base) == 1  # held
    assert _value(s, "cryopg_queue_runs", state="claimed", **base) == 1  # waiting
    # observed when a run ends: the claimed one is not in yet
    assert _value(s, "cryopg_queue_wait_seconds_count", kind="job", **base) == 2
    assert _value(s, "cryopg_claim_duration_seconds_count", kind="job", **base) == 2
    inf = _value(s, "cryopg_claim_duration_seconds_bucket", le="+Inf", **base)
    assert inf == 2
    assert _value(s, "cryopg_queue_oldest_pending_seconds", org="dev") >= 0
    # the agent that claimed is busy, and its capabilities are live
    assert _value(s, "cryopg_agents", org="dev", state="busy") == 1
    assert _value(s, "cryopg_agents_live_capability", org="dev", capability="shell") == 1
    # everything is folded: another fold counts nothing twice
    async with await msrv.connect() as conn:
        assert await engine.fold_metrics(conn, dt.timedelta(0)) == 0
    again = await _scrape(msrv)
    for name, labels in (("cryopg_runs_submitted_total", {"kind": "script"}),
                         ("cryopg_queue_runs", {"state": "pending"}),
                         ("cryopg_queue_wait_seconds_count", {})):
        assert _value(again, name, **labels) == _value(s, name, **labels)
    # request latency by route template: never a run id in a label
    routes = {lab["route"] for n, lab, _ in s if n == "cryopg_http_request_duration_seconds_count"}
    assert "/api/v1/orgs/{org}/projects/{project}/runs" in routes
    assert not any(r in route for route in routes for r in (ok, waiting, held))


async def test_lapsed_claims_and_wakes_are_counted(msrv: Server) -> None:
    run_id = await msrv.submit("echo hi\n")
    await msrv.claim_run(run_id)
    expired, _ = await msrv.tick(later=CLAIM_SECONDS + 5)
    assert expired == 1
    s = await _scrape(msrv)
    assert _value(s, "cryopg_claims_lapsed_total", org="dev", project="default") == 1
    grant = await msrv.claim_run(run_id)
    (await msrv.in_run(grant, "park", path="sleep//0", ordinal=0, seconds=60)).ok()
    assert await msrv.status(run_id) == "parked"
    _, woken = await msrv.tick(later=3600)
    assert woken == 1
    s = await _scrape(msrv)
    assert _value(s, "cryopg_wakes_total", cause="timer_fired") == 1
    assert _value(s, "cryopg_queue_runs", state="pending") == 1
    assert _value(s, "cryopg_queue_runs", state="parked") == 0


async def test_a_lease_granted_at_once_is_no_wake_but_one_handed_over_is(
        msrv: Server) -> None:
    first, second = await msrv.submit(), await msrv.submit()
    holder, waiter = await msrv.claim_run(first), await msrv.claim_run(second)
    lock = {"path": "lock/deploy/0", "ordinal": 0, "group": "deploy"}
    assert (await msrv.in_run(holder, "locks/acquire", **lock)).ok() == {"granted": True}
    assert (await msrv.in_run(waiter, "locks/acquire", **lock)).ok() == {"granted": False}
    s = await _scrape(msrv)
    assert _value(s, "cryopg_wakes_total", cause="lease_granted") == 0
    assert (await msrv.in_run(holder, "locks/release", group="deploy")).ok() == {
        "released": True}
    assert await msrv.status(second) == "pending"
    s = await _scrape(msrv)
    assert _value(s, "cryopg_wakes_total", cause="lease_granted") == 1
    assert _value(s, "cryopg_wakes_total") == 1


async def test_the_queue_depth_is_recounted_when_its_count_is_old(msrv: Server) -> None:
    async with await msrv.connect() as conn:
        await engine.fold_metrics(conn, dt.timedelta(0))  # counted: empty
        await msrv.submit()
        await engine.fold_metrics(conn, dt.timedelta(hours=1))  # counted just now: kept
        s = _samples((await msrv.request("GET", "/metrics", token=TOKEN)).text)
        assert _value(s, "cryopg_queue_runs", state="pending") == 0
        await conn.execute("SELECT set_config('cryo.fake_now', "
                           "(now() + interval '2 hours')::text, false)")
        await engine.fold_metrics(conn, dt.timedelta(hours=1))  # an hour old: recounted
        s = _samples((await msrv.request("GET", "/metrics", token=TOKEN)).text)
        assert _value(s, "cryopg_queue_runs", state="pending") == 1
        with pytest.raises(BadQueueRecount), translated():
            await engine.fold_metrics(conn, dt.timedelta(seconds=-1))


class _Clock:
    """A monotonic clock the test moves by hand (no sleeping past a window)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _cached_server(dsn: str, tmp_path: Path, window: float,
                         ) -> tuple[TestClient, Server, _Clock]:
    tokens = await _bootstrap(dsn)
    app = build_app(_config(dsn, metrics_token=TOKEN, metrics_cache_seconds=window))
    clock = _Clock()
    client = TestClient(TestServer(app))
    await client.start_server()
    database_part(app).clock = clock
    return client, Server(client, dsn, tokens, tmp_path), clock


async def _submitted(srv: Server) -> float:
    reply = await srv.request("GET", "/metrics", token=TOKEN)
    assert reply.status == 200, reply.text
    return _value(_samples(reply.text), "cryopg_runs_submitted_total", kind="script")


async def test_scrapes_within_the_cache_window_share_one_database_read(
        dsn: str, tmp_path: Path) -> None:
    client, srv, clock = await _cached_server(dsn, tmp_path, window=60.0)
    try:
        part = database_part(client.app)
        # scrapes that arrive together wait for one read
        got = await asyncio.gather(*(_submitted(srv) for _ in range(4)))
        assert got == [0, 0, 0, 0]
        assert part.reads == 1
        # a run counted meanwhile is not seen inside the window: the part is reused
        await srv.submit("echo hi\n")
        await _fold(srv)
        clock.now += 59.0
        assert await _submitted(srv) == 0
        assert part.reads == 1
        # past the window, a new read sees it
        clock.now += 2.0
        assert await _submitted(srv) == 1
        assert part.reads == 2
        assert await _submitted(srv) == 1
        assert part.reads == 2
    finally:
        await client.close()


async def test_a_cache_window_of_zero_reads_on_every_scrape(dsn: str, tmp_path: Path) -> None:
    client, srv, _ = await _cached_server(dsn, tmp_path, window=0.0)
    try:
        part = database_part(client.app)
        assert await _submitted(srv) == 0
        await srv.submit("echo hi\n")
        await _fold(srv)
        assert await _submitted(srv) == 1
        assert part.reads == 2
    finally:
        await client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_metrics_listener_of_its_own_needs_no_token(dsn: str) -> None:
    await _bootstrap(dsn)
    port = _free_port()
    app = build_app(_config(dsn, metrics_addr=f"127.0.0.1:{port}"))
    async with TestClient(TestServer(app)) as client:
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
        assert "cryopg_runs_submitted_total" in text or "cryopg_runs_submitted" in text
        # and the API's address still refuses it (no token set there)
        async with client.get("/metrics") as resp:
            assert resp.status == 404
