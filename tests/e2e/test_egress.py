"""The egress attack through a real `cryopg dev`: a graph's http nodes aimed at the dev
stack's own secrets file and at loopback servers. Without an allowlist each node fails
with one line and nothing of the file or the servers reaches the run's output or logs;
with CRYOPG_EGRESS_ALLOW=127.0.0.1 the loopback request goes through, and a redirect to
another loopback address is still refused."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import show, wait_for

SECRET = "loopback-secret-7f3a"


class _Answer(http.server.BaseHTTPRequestHandler):
    """200 with a secret on /data, 302 to LOCATION elsewhere; records every path."""

    location = ""
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.path)
        if self.path == "/data":
            body = json.dumps({"secret": SECRET}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = f"moved {SECRET}".encode()
            self.send_response(302)
            self.send_header("Location", self.location)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


def _serve(host: str, location: str = "") -> tuple[http.server.HTTPServer, list[str]]:
    seen: list[str] = []
    handler = type("Handler", (_Answer,), {"location": location, "seen": seen})
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def loopback() -> Iterator[dict[str, Any]]:
    """A server on 127.0.0.1 and one on 127.0.0.2; the first redirects to the second."""
    inner, inner_seen = _serve("127.0.0.2")
    inner_url = f"http://127.0.0.2:{inner.server_address[1]}"
    outer, outer_seen = _serve("127.0.0.1", inner_url + "/data")
    yield {"url": f"http://127.0.0.1:{outer.server_address[1]}", "seen": outer_seen,
           "inner_url": inner_url, "inner_seen": inner_seen}
    for s in (outer, inner):
        s.shutdown()
        s.server_close()


def _graphs(stack: Any, urls: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One graph run per URL (a failed node ends its graph), each with one http node
    named by the key; all submitted, then each awaited. Returns the ended runs."""
    ids = {}
    for node, url in urls.items():
        doc = stack.dir / f"{node}.json"
        doc.write_text(json.dumps({"version": "cryosleep-graph/v1", "nodes": [
            {"id": node, "type": "http", "config": {"url": url}}]}))
        done = stack.cli("submit", str(doc))
        assert done.returncode == 0, done.stderr
        ids[node] = done.stdout.strip()
    return {node: wait_for(f"the {node} graph to end",
                           lambda i=run_id: (r := show(stack, i))["finished_at"] and r,
                           timeout=90)
            for node, run_id in ids.items()}


def _node(run: dict[str, Any]) -> dict[str, Any]:
    [node] = run["graph"]["nodes"]
    return node


def _logs(stack: Any, run: dict[str, Any]) -> str:
    """Every log the run has: its own and its nodes' job runs'."""
    ids = [run["id"]] + [j for n in run["graph"]["nodes"] for j in n.get("runs") or []]
    out = []
    for run_id in ids:
        done = stack.cli("logs", run_id)
        assert done.returncode == 0, done.stderr
        out.append(done.stdout)
    return "\n".join(out)


@pytest.mark.agents(2)
def test_http_nodes_cannot_read_files_or_reach_loopback(stack: Any,
                                                        loopback: dict[str, Any]) -> None:
    dev_json = stack.dir / ".cryopg" / "dev.json"
    assert dev_json.exists()
    secrets = [v for k, v in json.loads(dev_json.read_text()).items() if "token" in k]
    secrets.append((stack.dir / ".cryopg" / "master.key").read_text().strip())
    assert len(secrets) >= 3 and all(len(s) >= 20 for s in secrets), secrets
    runs = _graphs(stack, {
        "file": dev_json.as_uri(), "key": (stack.dir / ".cryopg" / "master.key").as_uri(),
        "loop": loopback["url"] + "/data",
        "server": stack.url + "/api/v1/health",
        "decimal": "http://2130706433:" + stack.url.rsplit(":", 1)[1] + "/",
        "metadata": "http://169.254.169.254/latest/meta-data/"})
    got = {name: _node(run) for name, run in runs.items()}
    assert got["file"]["error"] == (f"http node: refused {dev_json.as_uri()}: the file: "
                                    "scheme is not allowed (only http and https)")
    assert got["loop"]["error"] == (f"http node: refused {loopback['url']}/data: 127.0.0.1 is "
                                    "a loopback address (set CRYOPG_EGRESS_ALLOW to allow it)")
    assert "file: scheme is not allowed" in got["key"]["error"]
    assert "127.0.0.1 is a loopback address" in got["server"]["error"]
    assert "resolves to 127.0.0.1, which is a loopback" in got["decimal"]["error"]
    assert "169.254.169.254 is a cloud metadata address" in got["metadata"]["error"]
    for name, run in runs.items():
        assert run["status"] == "failed" and run["error"], run
        assert got[name]["status"] == "failed" and got[name]["output"] is None, got[name]
    assert loopback["seen"] == [] and loopback["inner_seen"] == []
    everything = json.dumps(runs) + "".join(_logs(stack, run) for run in runs.values())
    for leaked in (*secrets, SECRET, '"ok": true', "Traceback"):
        assert leaked not in everything


@pytest.mark.agents(1)
@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")
def test_the_allowlist_opens_one_loopback_address_and_no_redirect_beyond(
        stack: Any, loopback: dict[str, Any]) -> None:
    run = _graphs(stack, {"data": loopback["url"] + "/data"})["data"]
    assert run["status"] == "succeeded", json.dumps(run["graph"])[:2000]
    node = _node(run)
    assert node["output"]["status"] == 200 and node["output"]["body"] == {"secret": SECRET}
    # A 302 from the allowed server to another loopback address: refused, never asked.
    run = _graphs(stack, {"hop": loopback["url"] + "/go"})["hop"]
    assert run["status"] == "failed"
    node = _node(run)
    assert node["error"] == (f"http node: refused {loopback['inner_url']}/data: 127.0.0.2 is "
                             "a loopback address (set CRYOPG_EGRESS_ALLOW to allow it)")
    assert node["output"] is None
    assert loopback["seen"] == ["/data", "/go"] and loopback["inner_seen"] == []
    assert SECRET not in json.dumps(run) + _logs(stack, run)
