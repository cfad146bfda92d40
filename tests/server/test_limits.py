"""Every bad input is a 4xx with the JSON error body, checked before any handler runs
(cryopg/server/limits.py), and nothing is stored. Each test is the attack as sent."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from cryopg.graphs.document import MAX_NODES
from cryopg.server import limits
from cryopg.triggers.webhook import sign
from tests.server.conftest import AGENT_PATH, PROJECT_PATH, Reply, Server
from tests.server.test_graphs import graph, nodes_of, submit_graph, until

SCRIPT = {"source": "echo hi\n", "filename": "a.sh"}


async def raw(srv: Server, method: str, path: str, data: bytes | None = None,
              token: str | None = None) -> Reply:
    """A request whose bytes (body and path, percent-escapes kept) go out as given."""
    headers = {"Authorization": f"Bearer {token or srv.tokens['owner']}",
               "Content-Type": "application/json"}
    from yarl import URL

    url = URL(srv.url + path, encoded=True)
    async with srv.client.session.request(method, url, data=data, headers=headers) as resp:
        body = await resp.read()
        is_json = resp.content_type == "application/json"
    return Reply(resp.status, json.loads(body) if is_json and body else None,
                 body.decode(errors="replace"))


async def nothing_submitted(srv: Server) -> None:
    assert (await srv.user("GET", "/runs")).ok()["runs"] == []


def nested(depth: int) -> bytes:
    return b'{"source": "x", "filename": "a.sh", "input": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("body", [
    b'{"source": "x", "filename": "a\\u0000.sh"}',  # NUL, escaped
    b'{"source": "x", "filename": "a.sh", "input": {"k\\u0000": 1}}',  # NUL in a key
    b'{"source": "x", "filename": "a.sh", "input": "\\ud800"}',  # lone surrogate
    b'{"source": "x", "filename": "a.sh", "input": "\\udc00x\\ud83d"}',
    b'{"source": "x\xff", "filename": "a.sh"}',  # invalid UTF-8
    b'{"source": "x\xed\xa0\x80", "filename": "a.sh"}',  # a surrogate encoded in UTF-8
    nested(100), nested(1_000), nested(200_000),
    b'{"source": "x", "filename": "a.sh", "input": 1180591620717411303424}',  # 2**70
    b'{"source": "x", "filename": "a.sh", "input": ' + b"9" * 5000 + b"}",
    b'{"source": "x", "filename": "a.sh", "input": 1e999}',
    b'{"source": "x", "filename": "a.sh", "input": NaN}',
], ids=["nul", "nul-key", "surrogate", "surrogates", "utf8", "utf8-surrogate", "deep100",
        "deep1000", "deep200k", "int2**70", "int5000digits", "1e999", "nan"])
async def test_a_bad_body_is_400_and_stores_nothing(srv: Server, body: bytes) -> None:
    reply = await srv.user("POST", "/runs", data=body)
    reply.refused(400, "invalid_argument")
    assert "Traceback" not in reply.text
    await nothing_submitted(srv)


async def test_the_same_limits_hold_on_agent_routes(srv: Server) -> None:
    grant = await srv.claim_run(await srv.submit())
    token = grant["claim_token"]
    for extra in (b'"name": "a\\u0000b"', b'"name": "\\udfff"', b'"payload": ' + b"[" * 70
                  + b"]" * 70, b'"ordinal": 36893488147419103232'):
        body = b'{"claim_token": "' + token.encode() + b'", "ordinal": 0, "path": "e", ' \
            + b'"name": "e", ' + extra + b"}"
        (await srv.agent(f"/runs/{grant['run_id']}/emit", data=body)).refused(
            400, "invalid_argument")
    assert (await srv.user("GET", "/events")).ok()["events"] == []
    assert await srv.status(grant["run_id"]) == "running"


@pytest.mark.parametrize("path", [
    "/runs/dev:default:run-a%00b", "/runs/dev:default:run-%FF", "/runs/dev:default:run-%ED%A0%80",
    "/runs?status=%00", "/runs?status=%FF", "/events?name=%C3", "/events?limit=%00",
    "/runs/dev:default:run-" + "a" * 600,
], ids=["nul", "utf8", "surrogate", "q-nul", "q-utf8", "q-cut", "q-limit", "long"])
async def test_a_bad_path_or_query_is_400(srv: Server, path: str) -> None:
    (await raw(srv, "GET", PROJECT_PATH + path)).refused(400, "invalid_argument")


async def test_a_nul_in_an_agent_path_is_400(srv: Server) -> None:
    reply = await raw(srv, "POST", AGENT_PATH + "/runs/x%00y/logs", b"{}",
                      token=srv.tokens["agent"])
    reply.refused(400, "invalid_argument")


async def test_query_integers_must_fit_their_column(srv: Server) -> None:
    run_id = await srv.submit()
    for path in (f"/runs/{run_id}/logs?after=1e23", f"/runs/{run_id}/logs?after=" + "9" * 30,
                 "/events?limit=-1", "/events?limit=2147483648",
                 f"/runs/{run_id}/stream?tail=99999999999"):
        (await srv.user("GET", path)).refused(400, "invalid_argument")


async def test_a_body_over_the_limit_is_413(srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_BODY", 1024)
    body = json.dumps({**SCRIPT, "input": "x" * 2000}).encode()
    (await srv.user("POST", "/runs", data=body)).refused(413, "payload_too_large")
    await nothing_submitted(srv)


async def test_a_signed_webhook_body_is_checked_after_its_signature(srv: Server) -> None:
    made = (await srv.user("POST", "/webhooks", {"name": "gh"})).ok(201)

    async def deliver(body: bytes, secret: str | None) -> Reply:
        headers = {"X-GitHub-Event": "push", "Content-Type": "application/json"}
        if secret:
            headers["X-Hub-Signature-256"] = sign(secret, body)
        async with srv.client.post(made["path"], data=body, headers=headers) as resp:
            return Reply(resp.status, await resp.json(), "")

    for body in (b"[" * 5000 + b"]" * 5000, b'{"a": "\\u0000"}', b'{"a": "\xff"}',
                 b'{"n": ' + b"1" * 5000 + b"}", b'{"a": "\\ud800"}'):
        (await deliver(body, None)).refused(401, "unauthorized")  # unsigned: nothing read
        (await deliver(body, made["secret"])).refused(400, "invalid_argument")
    listed = (await srv.user("GET", "/webhooks")).ok()["webhooks"]
    assert listed[0]["deliveries"] == 0
    assert (await srv.user("GET", "/events")).ok()["events"] == []


async def test_a_status_url_that_does_not_parse_is_400(srv: Server) -> None:
    for url in ("https://[::1", "https://[", "http://[::1]x"):
        (await srv.user("POST", "/webhooks", {"name": "gh", "status_url": url})).refused(
            400, "invalid_argument")
    assert (await srv.user("GET", "/webhooks")).ok()["webhooks"] == []


@pytest.mark.parametrize("expr", [
    "(" * 5000 + "true" + ")" * 5000, " or ".join(["true"] * 20000), "not " * 20000 + "true",
    "1" * 5000, "(" * 40 + "true" + ")" * 40, " and ".join(["true"] * 100), "1e999",
], ids=["parens", "or", "not", "literal", "nesting", "chain", "inf"])
async def test_a_graph_expression_beyond_the_bounds_is_400(srv: Server, expr: str) -> None:
    doc = graph([{"id": "a", "type": "state", "if": expr,
                  "config": {"op": "set", "key": "k", "value": 1}}])
    started = time.monotonic()
    message = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).refused(
        400, "invalid_argument")
    assert "node a: if:" in message and len(message) < 300
    assert time.monotonic() - started < 5
    await nothing_submitted(srv)


async def test_a_graph_document_beyond_the_bounds_is_400(srv: Server) -> None:
    deep: Any = "x"
    for _ in range(100):
        deep = {"k": deep}
    chain = [{"id": f"n{i}", "type": "state", "config": {"op": "get", "key": "k"}}
             for i in range(MAX_NODES + 1)]
    for doc in (graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "k",
                                                                 "value": deep}}]),
                '{"version": "cryosleep-graph/v1", "nodes": ' + "[" * 5000 + "]" * 5000 + "}",
                graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "k\u0000",
                                                                 "value": 2**70}}]),
                graph([{"id": "a", "type": "shell",
                        "config": {"run": {"$template": "{{" * 50_000}}}]),
                graph(chain)):
        (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).refused(
            400, "invalid_argument")
    long_chain = graph(chain[:900], [(f"n{i}", f"n{i + 1}") for i in range(899)])
    # Within the bound, a long chain is taken (and shutting the server down mid-drive is
    # prompt: the fixture's teardown stops it while its turns run).
    (await srv.user("POST", "/runs", {"source": long_chain, "filename": "g.json"})).ok(201)


@pytest.mark.parametrize("yaml", [
    "version: cryosleep/pipeline/v1\njobs: " + "[" * 5000 + "]" * 5000 + "\n",
    "version: cryosleep/pipeline/v1\njobs:\n  a:\n    run: echo\n    retries: "
    + "9" * 5000 + "\n",
    "version: cryosleep/pipeline/v1\njobs:\n  a:\n    run: echo\n    x: 1180591620717411303424\n",
    "version: cryosleep/pipeline/v1\n" + "".join(" " * i + f"k{i}:\n" for i in range(1500)),
], ids=["flow", "digits", "int2**70", "block"])
async def test_a_yaml_pipeline_beyond_the_bounds_is_400(srv: Server, yaml: str) -> None:
    message = (await srv.user("POST", "/runs", {"source": yaml, "filename": "p.yaml"})).refused(
        400, "invalid_argument")
    assert "Traceback" not in message and len(message) < 300
    await nothing_submitted(srv)


async def test_an_approval_pattern_cannot_backtrack(srv: Server) -> None:
    doc = graph([{"id": "ok", "type": "approval", "config": {"fields": {
        "type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}}}])
    run_id = await submit_graph(srv, doc)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    path = f"/runs/{run_id}/approvals/ok"
    started = time.monotonic()
    answer = asyncio.create_task(srv.user("POST", path, {"name": "a" * 27 + "!"}))
    health = await srv.request("GET", "/api/v1/health", token=None)
    assert health.ok()["ok"] is True
    assert "does not match" in (await answer).refused(400, "invalid_argument")
    assert time.monotonic() - started < 5  # Python's re takes about 35 s here
    assert nodes_of(await srv.show(run_id))["ok"]["status"] != "succeeded"
    assert (await srv.user("POST", path, {"name": "aaa"})).ok()["approved"]


@pytest.mark.parametrize("fields", [
    {"type": "string", "pattern": "(a)\\1"},
    {"type": "object", "properties": {"x": {"pattern": "(?=a)b"}}},
    {"type": "object", "patternProperties": {"^(a+)+$": {}}},
], ids=["backreference", "lookahead", "patternProperties"])
async def test_a_pattern_re2_cannot_run_is_refused_at_submit(srv: Server,
                                                             fields: dict[str, Any]) -> None:
    doc = graph([{"id": "ok", "type": "approval", "config": {"fields": fields}}])
    message = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).refused(
        400, "invalid_argument")
    assert message.startswith("g.json: node ok: config.fields:"), message
    await nothing_submitted(srv)


async def test_the_cli_encodes_path_parts(srv: Server) -> None:
    run_id = await srv.submit()
    done = await srv.cli("signal", run_id, "a/b?c#d%2F")
    assert done.returncode == 0, done.stderr
    async with await srv.connect() as conn:
        got = await (await conn.execute(
            "SELECT name FROM cryo.signals WHERE run_id = %s", (run_id,))).fetchall()
    assert got == [("a/b?c#d%2F",)]
