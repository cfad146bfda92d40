"""agent/http1.py, the agent's keep-alive HTTP/1.1 client, against a real aiohttp server:
JSON in and out over one kept connection, the answers aiohttp gives (204, chunked, an
error body, Connection: close), an idle connection the server closed meanwhile, and a
server that is gone."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agent.api import AgentAPI, AgentAPIError, ServerUnavailable, StaleClaim, server_urls
from agent.http1 import Http1Client


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []  # (path, peer port) per request

    async def echo(request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen.append((request.path, str(peer[1]) if peer else None))
        body = await request.json()
        assert request.headers["Authorization"] == "Bearer secret"
        kind = body.get("kind")
        if kind == "empty":
            return web.Response(status=204)
        if kind == "chunked":
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            resp.content_type = "application/json"
            await resp.prepare(request)
            for part in ('{"a":', ' [1, 2', ', 3]}'):
                await resp.write(part.encode())
            await resp.write_eof()
            return resp
        if kind == "stale":
            return web.json_response({"error": {"code": "stale_claim", "message": "gone"}},
                                     status=409)
        if kind == "html":
            return web.Response(status=502, text="<html>bad gateway</html>")
        if kind == "close":
            return web.json_response({"closing": True}, headers={"Connection": "close"})
        return web.json_response({"got": body, "path": request.path})

    app = web.Application()
    app.router.add_post("/base/api/v1/agent/{tail:.*}", echo)
    runner = web.AppRunner(app, keepalive_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/base", seen
    finally:
        await runner.cleanup()


async def test_json_calls_reuse_one_connection(
        server: tuple[str, list[tuple[str, str | None]]]) -> None:
    url, seen = server
    client = Http1Client(url + "/api/v1/agent", {"Authorization": "Bearer secret"})
    try:
        for i in range(3):
            status, payload = await client.post_json("/runs/a:b/logs", {"n": i, "s": "é"}, 5)
            assert status == 200
            assert payload == {"got": {"n": i, "s": "é"},
                               "path": "/base/api/v1/agent/runs/a:b/logs"}
        assert len({peer for _, peer in seen}) == 1  # one kept connection
        assert await client.post_json("/x", {"kind": "empty"}, 5) == (204, None)
        assert await client.post_json("/x", {"kind": "chunked"}, 5) == (200, {"a": [1, 2, 3]})
        assert await client.post_json("/x", {"kind": "close"}, 5) == (200, {"closing": True})
        status, payload = await client.post_json("/x", {}, 5)  # after a close: a new one
        assert (status, payload["path"]) == (200, "/base/api/v1/agent/x")
    finally:
        client.close()


async def test_an_idle_connection_the_server_closed_is_replaced(
        server: tuple[str, list[tuple[str, str | None]]]) -> None:
    url, seen = server
    client = Http1Client(url + "/api/v1/agent", {"Authorization": "Bearer secret"})
    try:
        await client.post_json("/one", {}, 5)
        await asyncio.sleep(0.6)  # past the server's keep-alive: it closes the connection
        status, payload = await client.post_json("/two", {}, 5)
        assert status == 200 and payload["path"].endswith("/two")
        assert [p for p, _ in seen] == ["/base/api/v1/agent/one", "/base/api/v1/agent/two"]
    finally:
        client.close()


async def test_errors_read_as_the_agent_api_expects(
        server: tuple[str, list[tuple[str, str | None]]]) -> None:
    url, _ = server
    async with AgentAPI(url, "secret") as api:
        with pytest.raises(StaleClaim):
            await api._post("/x", {"kind": "stale"})
        with pytest.raises(ServerUnavailable) as exc:
            await api._post("/x", {"kind": "html"})
        assert exc.value.status == 502
        assert await api._post("/x", {"kind": "empty"}) == (204, None)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    async with AgentAPI(f"http://127.0.0.1:{dead}", "secret") as api:
        with pytest.raises(ServerUnavailable):
            await api._post("/x", {})
        with pytest.raises(AgentAPIError):
            await api.claim("agent-1", ["shell"], wait=0)


async def test_a_server_that_never_answers_times_out() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(5)
        writer.close()

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    client = Http1Client(f"http://127.0.0.1:{port}", {})
    try:
        with pytest.raises(TimeoutError):
            await client.post_json("/x", {}, 0.3)
        assert json.dumps(client._idle) == "[]"  # a timed-out connection is not kept
    finally:
        client.close()
        srv.close()


def _dead_port() -> int:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_agent_given_several_urls_moves_on_when_one_stops_answering(
        server: tuple[str, list[tuple[str, str | None]]]) -> None:
    url, seen = server
    dead = f"http://127.0.0.1:{_dead_port()}"
    assert server_urls(f" {dead}/, {url} ") == [dead, url]
    with pytest.raises(ValueError):
        server_urls(" , ")
    async with AgentAPI(f"{dead},{url}", "secret") as api:
        with pytest.raises(ServerUnavailable):  # one try: the dead one
            await api._post("/x", {})
        status, payload = await api._post("/x", {"n": 1})  # the next call: the live one
        assert (status, payload["path"]) == (200, "/base/api/v1/agent/x")
        assert api.http()[1] == f"{url}/api/v1/agent"  # artifact transfers follow
        with pytest.raises(ServerUnavailable):  # a gateway's 502 moves on too
            await api._post("/x", {"kind": "html"})
        assert api.http()[1] == f"{dead}/api/v1/agent"
    async with AgentAPI(f"{dead},{url}", "secret") as api:
        status, _ = await api._post("/x", {}, retry_for=10)  # a recording call rides through
        assert status == 200
    async with AgentAPI(url, "secret") as api:  # one URL: it stays
        api.fail_over(api.http()[1])
        assert api.http()[1] == f"{url}/api/v1/agent"
