"""Connector credentials: an http node names the project secrets its headers use as
${NAME}; only the claim grant of the connector agent doing that request carries them
(and only them), nothing sealed in the document or the input holds them, and an
untrusted run's grant withholds them."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from cryopg.graphs.http_request import Failed, with_secrets
from tests.server.conftest import Server
from tests.server.test_graphs import graph, nodes_of, submit_graph, until

TOKEN = "tok-3f9a-very-secret"


def _doc() -> str:
    return graph([{"id": "call", "type": "http", "config": {
        "url": "https://api.example.test/v1/things", "secrets": ["API_TOKEN"],
        "headers": {"Authorization": "Bearer ${API_TOKEN}"}}}])


async def _claim_connector(srv: Server, run_id: str) -> dict[str, Any]:
    # Claimed once the driver's turn that made the job has committed: claim_grants reads
    # a job committed during its own statement without its secrets (a race of its own,
    # outside the graph tier), which this test is not about.
    await until(srv, run_id, lambda r: bool(nodes_of(r)["call"].get("runs")))
    token = await srv.make_token(kind="agent", caps=["connector", "isolated"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = await srv.claim(caps=["connector", "isolated"], token=token)
        if got is not None:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("no connector job was handed out")


async def test_only_the_connector_job_gets_the_named_secret(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/API_TOKEN", {"value": TOKEN})).ok(201)
    (await srv.user("PUT", "/secrets/OTHER", {"value": "other-value"})).ok(201)
    job = await _claim_connector(srv, await submit_graph(srv, _doc()))
    assert job["secrets"] == {"API_TOKEN": TOKEN}  # not OTHER
    assert TOKEN not in json.dumps(job["input"]) and TOKEN not in job["source"]
    assert job["input"]["headers"] == {"Authorization": "Bearer ${API_TOKEN}"}
    # A plain script run still sees the project's secrets as before.
    await srv.submit("echo hi\n")
    plain = await srv.claim(caps=["shell"])
    assert plain is not None and set(plain["secrets"]) == {"API_TOKEN", "OTHER"}


async def test_an_untrusted_runs_connector_gets_no_value(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/API_TOKEN", {"value": TOKEN})).ok(201)
    job = await _claim_connector(srv, await submit_graph(srv, _doc(), untrusted=True))
    assert job["secrets"] == {} and job["withheld"] == ["API_TOKEN"]


def test_the_job_fills_named_secrets_from_its_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_TOKEN", TOKEN)
    assert with_secrets("Bearer ${API_TOKEN}", ["API_TOKEN"]) == f"Bearer {TOKEN}"
    assert with_secrets("Bearer ${OTHER}", ["API_TOKEN"]) == "Bearer ${OTHER}"  # not named
    monkeypatch.delenv("API_TOKEN")
    with pytest.raises(Failed, match="not available"):
        with_secrets("Bearer ${API_TOKEN}", ["API_TOKEN"])
