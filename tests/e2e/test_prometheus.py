"""Metrics against the real thing (issue 40, item 6): Debian's Prometheus, started on
loopback, scrapes a server replica's metrics listener (CRYOPG_METRICS_ADDR) every second
while an agent runs jobs through that replica; PromQL over Prometheus's HTTP API sees
the runs finish, the agent live, and the replica's request latency."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for


def _prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no prometheus: scripts/setup installs Debian's prometheus package")
        pytest.skip("no prometheus here: run scripts/setup (it installs Debian's package)")
    return found


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        got = json.load(resp)
    assert got["status"] == "success", got
    return got["data"]["result"]  # type: ignore[no-any-return]


def _scalar(prom: str, expr: str) -> float | None:
    result = _query(prom, expr)
    return float(result[0]["value"][1]) if result else None


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def test_prometheus_scrapes_a_real_stack(split: Split, tmp_path: Path) -> None:
    binary = _prometheus()
    # a second replica of the same database, serving /metrics on a listener of its own
    api_port, metrics_port, prom_port = _free_tcp_port(), _free_tcp_port(), _free_tcp_port()
    split.env["CRYOPG_METRICS_ADDR"] = f"127.0.0.1:{metrics_port}"
    split.env["CRYOPG_REPLICA_ID"] = "scraped"
    replica = f"http://127.0.0.1:{api_port}"
    split.spawn("server", "--database-url", split.dsn, "--port", str(api_port),
                "--claim-seconds", "2", "--tick-interval", "0.2")
    wait_for("the scraped replica", lambda: _healthy(replica), timeout=30)
    split.spawn("agent", "--url", replica, "--token", split.agent_token, "--id", "scraped")

    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: cryopg\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=log, stderr=log, start_new_session=True)
    prom = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for("prometheus", lambda: _ready(prom), timeout=60)
        job = script(tmp_path, "ok.sh", "echo ok\n")
        runs = [submit(split, job) for _ in range(3)]
        wait_for("the runs to succeed",
                 lambda: all(show(split, r)["status"] == "succeeded" for r in runs), timeout=60)
        wait_for("prometheus to scrape the replica",
                 lambda: _scalar(prom, 'up{job="cryopg"}') == 1.0, timeout=60)
        wait_for("three finished runs in PromQL", lambda: _scalar(
            prom, 'max(cryopg_runs_finished_total{org="dev",project="default",kind="script",'
                  'outcome="succeeded"})') == 3.0, timeout=60)
        assert _scalar(prom, 'max(cryopg_runs_submitted_total{kind="script"})') == 3.0
        wait_for("the agent live in PromQL", lambda: (_scalar(
            prom, 'sum(cryopg_agents{state=~"idle|busy"})') or 0) >= 1, timeout=60)
        assert (_scalar(prom, 'sum(cryopg_queue_wait_seconds_count{kind="job"})') or 0) >= 3
        # this replica's own series: the agent's claims went through it, by route template
        routes = {r["metric"]["route"] for r in _query(
            prom, "cryopg_http_request_duration_seconds_count")}
        assert "/api/v1/agent/claim" in routes, routes
        assert not any("run-" in r for r in routes), routes
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
