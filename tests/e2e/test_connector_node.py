"""A connector node on a real `cryopg dev` (server, driver, its connector agent) against a
loopback HTTP server: the stored connection's base URL, default header and bearer
credential reach the server; the credential is masked in what users read; an address
the egress policy refuses gets no request; an untrusted run's node fails with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import show, submit, wait_for
from tests.test_http_node_job import Server

TOKEN = "loopback-bearer-token-4b1d9e"


def _echo(h: Any) -> tuple[int, dict[str, str], bytes]:
    """Answers with what it was sent, the Authorization header among it."""
    body = json.dumps({"path": h.path, "auth": h.headers.get("Authorization"),
                       "accept": h.headers.get("Accept")}).encode()
    return 200, {"Content-Type": "application/json"}, body


def _graph(d: Path, name: str, connection: str, path: str = "/items") -> Path:
    doc = {"version": "cryosleep-graph/v1", "nodes": [{"id": "call", "type": "connector",
           "config": {"connection": connection, "path": path, "query": {"q": "a b"}}}]}
    (d / name).write_text(json.dumps(doc))
    return d / name


def _ended(stack: Any, run_id: str) -> dict[str, Any]:
    return wait_for("the run's end", lambda: (r := show(stack, run_id))["status"] in (
        "succeeded", "failed") and r, timeout=90)


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def server() -> Any:
    srv = Server("127.0.0.1", _echo)
    yield srv
    srv.close()


@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")  # the loopback server, nothing else
def test_a_connector_node_calls_its_connection(stack: Any, server: Server) -> None:
    d: Path = stack.dir
    _ok(stack.cli("secret", "set", "API_TOKEN", input=TOKEN + "\n"))
    _ok(stack.cli("connection", "create", "svc", "--base-url", server.url + "/api",
                  "--auth", "bearer", "--secret", "API_TOKEN",
                  "--default-header", "Accept: application/json"))
    run = _ended(stack, submit(stack, _graph(d, "call.json", "svc")))
    node = {n["id"]: n for n in run["graph"]["nodes"]}["call"]
    assert run["status"] == "succeeded", node
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert server.requests[0]["path"] == "/api/items?q=a+b"
    out = node["output"]
    assert out["status"] == 200 and out["body"]["accept"] == "application/json"
    # The credential came back in the body: the job's log, and so its output, mask it.
    assert out["body"]["auth"] == "Bearer [secret]" and TOKEN not in json.dumps(run)
    logs = _ok(stack.cli("logs", node["runs"][-1]))
    assert "Bearer [secret]" in logs and TOKEN not in logs


@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")
def test_egress_refusal_and_an_untrusted_run(stack: Any, server: Server) -> None:
    d: Path = stack.dir
    _ok(stack.cli("secret", "set", "API_TOKEN", input=TOKEN + "\n"))
    _ok(stack.cli("connection", "create", "internal", "--base-url", "http://10.0.0.7",
                  "--auth", "bearer", "--secret", "API_TOKEN"))
    _ok(stack.cli("connection", "create", "svc", "--base-url", server.url,
                  "--auth", "bearer", "--secret", "API_TOKEN"))
    refused = _ended(stack, submit(stack, _graph(d, "in.json", "internal")))
    node = {n["id"]: n for n in refused["graph"]["nodes"]}["call"]
    assert refused["status"] == "failed"
    assert "connector node: refused http://10.0.0.7/items" in json.dumps(node), node
    untrusted = _ended(stack, submit(stack, _graph(d, "u.json", "svc"), "--untrusted"))
    node = {n["id"]: n for n in untrusted["graph"]["nodes"]}["call"]
    assert untrusted["status"] == "failed"
    assert "withheld from an untrusted run" in json.dumps(node), node
    assert server.requests == []  # neither reached a server
