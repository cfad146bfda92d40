"""Several `cryopg server` replicas on one database (issue 25): agents on different
replicas, a browser's tail on one replica seeing what an agent streamed to another within
250 ms, a replica killed mid-graph and mid-tail with nothing lost or driven twice, and two
replicas behind HAProxy (Debian's package) serving as one address."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.conftest import CLI, Split
from tests.e2e.helpers import http, lines, wait_for

P = "/api/v1/orgs/dev/projects/default"


class Replicas(Split):
    """Split's server is replica r1; r2 and r3 join it on the same database."""

    def __init__(self, dsn: str, dir: Path) -> None:
        super().__init__(dsn, dir)  # with CRYOPG_REPLICA_ID=r1 (the fixture sets it)
        self.urls = {"r1": self.url}
        self.servers = {"r1": self.server}
        for name in ("r2", "r3"):
            self.add_replica(name)

    def add_replica(self, name: str) -> None:
        port = _free_tcp_port()
        self.env["CRYOPG_REPLICA_ID"] = name
        self.servers[name] = self.spawn("server", "--database-url", self.dsn, "--port",
                                        str(port), "--claim-seconds", "2",
                                        "--tick-interval", "0.2")
        self.urls[name] = f"http://127.0.0.1:{port}"
        wait_for(f"replica {name}", lambda: _healthy(self.urls[name]), timeout=30)

    def agent_on(self, replica: str, name: str) -> subprocess.Popen[bytes]:
        return self.spawn("agent", "--url", self.urls[replica], "--token", self.agent_token,
                          "--id", name)

    def kill(self, replica: str) -> None:
        proc = self.servers[replica]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def cli_on(self, replica: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], env=dict(self.env, CRYOPG_URL=self.urls[replica]),
                              cwd=self.dir, capture_output=True, text=True, timeout=60)


@pytest.fixture
def replicas(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replicas]:
    monkeypatch.setenv("CRYOPG_REPLICA_ID", "r1")
    deployment = Replicas(dsn, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


class Follower(threading.Thread):
    """Reads a streaming response line by line, noting when each line arrived."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        self.got: list[tuple[float, str]] = []
        self.ended = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with urllib.request.urlopen(self.req, timeout=120) as resp:
                for raw in resp:
                    self.got.append((time.monotonic(), raw.decode(errors="replace")))
        except BaseException as exc:  # noqa: BLE001 - a killed replica cuts the stream
            self.error = exc
        finally:
            self.ended.set()

    def text(self) -> str:
        return "".join(t for _, t in self.got)

    def seen(self, needle: str) -> float | None:
        return next((at for at, t in self.got if needle in t), None)


def test_a_tail_on_one_replica_sees_bytes_streamed_to_another_within_250ms(
        replicas: Replicas) -> None:
    code, got = http(f"{replicas.urls['r1']}{P}/runs", replicas.user_token, "POST",
                     {"source": "sleep 60\n", "filename": "job.sh"})
    assert code == 201, got
    run_id = got["run_id"]
    # The agent's side by hand on r1, so the moment its bytes are committed is known.
    code, grant = http(f"{replicas.urls['r1']}/api/v1/agent/claim", replicas.agent_token,
                       "POST", {"agent_id": "hand-1", "capabilities": ["shell"], "wait": 5})
    assert code == 200 and grant["run_id"] == run_id, grant
    tail = Follower(f"{replicas.urls['r2']}{P}/runs/{run_id}/stream", replicas.user_token)
    tail.start()
    wait_for("the tail to open", lambda: tail.seen("event: tail"), timeout=10)
    lags = []
    for i in range(8):
        marker = f"chunk-{i}-on-r1"
        code, _ = http(f"{replicas.urls['r1']}/api/v1/agent/runs/{run_id}/logs",
                       replicas.agent_token, "POST",
                       {"claim_token": grant["claim_token"],
                        "data": base64.b64encode(f"{marker}\n".encode()).decode()})
        sent = time.monotonic()
        assert code == 200
        arrived = wait_for(f"{marker} on r2", lambda m=marker: tail.seen(m), timeout=5,
                           every=0.005)
        lags.append(arrived - sent)
    assert max(lags) < 0.25, lags
    # The run's status moves across replicas too: a cancel on r3 reaches r1's agent call
    # and r2's tail.
    assert http(f"{replicas.urls['r3']}{P}/runs/{run_id}/cancel", replicas.user_token,
                "POST", {})[0] == 200
    code, answer = http(f"{replicas.urls['r1']}/api/v1/agent/runs/{run_id}/logs",
                        replicas.agent_token, "POST",
                        {"claim_token": grant["claim_token"], "data": ""})
    assert code == 200 and answer["cancel"] is True
    wait_for("r2's tail to see the change", lambda: tail.seen("event: changed"), timeout=5)


def _graph(dir: Path) -> Path:
    def node(name: str, after: str = "") -> dict[str, Any]:
        wait = (f"echo a-started; while [ ! -f {dir}/go ]; do sleep 0.05; done; "
                if name == "a" else "")
        return {"id": name, "type": "shell", "config": {
            "run": f"echo {name} >> {dir}/{name}.count; {wait}echo {name}-line-1; "
                   f"sleep 0.3; echo {name}-done"}}
    doc = {"version": "cryosleep-graph/v1",
           "nodes": [node("a"), node("b"), node("c"), node("d")],
           "edges": [{"from": "a", "to": "b"}, {"from": "a", "to": "c"},
                     {"from": "b", "to": "d"}, {"from": "c", "to": "d"}]}
    path = dir / "diamond.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_replica_killed_mid_graph_and_mid_tail_loses_nothing(replicas: Replicas) -> None:
    replicas.agent_on("r2", "on-r2")
    replicas.agent_on("r3", "on-r3")
    done = replicas.cli_on("r1", "submit", str(_graph(replicas.dir)))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    tails = {r: Follower(f"{replicas.urls[r]}{P}/runs/{run_id}/logs?follow=1",
                         replicas.user_token) for r in ("r1", "r2")}
    for t in tails.values():
        t.start()
    wait_for("node a to start", lambda: lines(replicas.dir / "a.count") == ["a"], timeout=30)
    wait_for("both tails to show it",
             lambda: all(t.seen("[a] a-started") for t in tails.values()), timeout=10)
    replicas.kill("r1")  # mid-graph (a runs, b, c and d to come) and mid-tail
    tails["r1"].ended.wait(10)
    assert tails["r1"].ended.is_set()  # that tail was cut with its replica
    (replicas.dir / "go").touch()
    assert tails["r2"].ended.wait(90), tails["r2"].text()
    assert tails["r2"].error is None, tails["r2"].error
    run = json.loads(replicas.cli_on("r3", "runs", "show", run_id, "--json").stdout)
    assert run["status"] == "succeeded", run
    for name in "abcd":  # every node's job ran once: nothing driven twice
        assert lines(replicas.dir / f"{name}.count") == [name], name
    text = tails["r2"].text()
    for name in "abcd":
        assert text.count(f"[{name}] {name}-done") == 1, text
    # A follower that lost r1 starts again on a survivor and reads the whole log.
    again = replicas.cli_on("r2", "logs", run_id)
    assert again.returncode == 0 and all(f"[{n}] {n}-done" in again.stdout for n in "abcd")
    with psycopg.connect(replicas.dsn) as db:
        wrote = {r for (r,) in db.execute(
            "SELECT DISTINCT replica FROM cryo.history WHERE replica IS NOT NULL")}
    assert "r1" in wrote and wrote & {"r2", "r3"}, wrote


def _haproxy() -> str | None:
    return shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                       if Path("/usr/sbin/haproxy").exists() else None)


def test_two_replicas_behind_haproxy_serve_as_one_address(replicas: Replicas) -> None:
    exe = _haproxy()
    if exe is None:
        pytest.skip("haproxy is not installed (scripts/setup installs it with apt as root)")
    port = _free_tcp_port()
    backends = "\n".join(f"    server {r} {u.removeprefix('http://')} check inter 500ms"
                         for r, u in replicas.urls.items() if r != "r3")
    cfg = replicas.dir / "haproxy.cfg"
    cfg.write_text(f"""\
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    option redispatch
    retries 3
frontend cryopg
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /api/v1/health
{backends}
""")
    lb = subprocess.Popen([exe, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for("haproxy", lambda: _healthy(url), timeout=20)
        seen = {http(f"{url}/api/v1/health", "")[1]["replica"] for _ in range(8)}
        assert seen == {"r1", "r2"}, seen
        replicas.spawn("agent", "--url", url, "--token", replicas.agent_token, "--id", "via-lb")
        env = dict(replicas.env, CRYOPG_URL=url)
        wf = replicas.dir / "hello.sh"
        wf.write_text("cryopg step s -- echo stepped\necho hello through the balancer\n")
        sub = subprocess.run([*CLI, "submit", str(wf)], env=env, cwd=replicas.dir,
                             capture_output=True, text=True, timeout=60)
        assert sub.returncode == 0, sub.stderr
        out = subprocess.run([*CLI, "logs", sub.stdout.strip(), "--follow"], env=env,
                             cwd=replicas.dir, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "hello through the balancer" in out.stdout, out
        replicas.kill("r1")  # the balancer's health check takes it out; r2 serves all
        wait_for("r2 alone behind the balancer",
                 lambda: all(http(f"{url}/api/v1/health", "")[1].get("replica") == "r2"
                             for _ in range(4)), timeout=20)
        sub = subprocess.run([*CLI, "submit", str(wf)], env=env, cwd=replicas.dir,
                             capture_output=True, text=True, timeout=60)
        out = subprocess.run([*CLI, "logs", sub.stdout.strip(), "--follow"], env=env,
                             cwd=replicas.dir, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "hello through the balancer" in out.stdout, out
    finally:
        os.killpg(lb.pid, signal.SIGKILL)
        lb.wait()
