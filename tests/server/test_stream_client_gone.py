"""A client that leaves mid-stream ends the server's stream quietly: a browser tab closed
on a live stream (issue 24 item 11) and a log follower that leaves (`cryopg logs RUN
--follow | head -2`, or killed; issue 42 item 2) log no ClientConnectionResetError
traceback in the server's output.

The app runs as `cryopg dev` and `cryopg server` run it, under a plain AppRunner (aiohttp's
TestServer cancels a handler when its client leaves, which hides the case): a stream
whose client went away finds out on its next write, and must end quietly."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from tests.server.conftest import AGENT_CAPS, AGENT_PATH, PROJECT_PATH, _bootstrap

Post = Callable[[str, Any, dict[str, str]], Awaitable[Any]]


@pytest.fixture
async def live_server(dsn: str, caplog: pytest.LogCaptureFixture
                      ) -> AsyncIterator[tuple[str, dict[str, str]]]:
    tokens = await _bootstrap(dsn)
    # Before the first connection: aiohttp decides per connection whether to log access.
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    config = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                          claim_seconds=30.0, tick_interval=3600.0, claim_wait_max=2.0,
                          pool_size=4)
    runner = web.AppRunner(build_app(config), handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", tokens
    finally:
        await runner.cleanup()


def _poster(http: aiohttp.ClientSession, url: str) -> Post:
    async def post(path: str, body: Any, headers: dict[str, str]) -> Any:
        async with http.post(url + path, json=body, headers=headers) as r:
            assert r.status < 300, await r.text()
            return await r.json()
    return post


async def _claimed_run(post: Post, owner: dict[str, str],
                       agent: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """A run submitted and claimed: (its id, its grant)."""
    run_id = (await post(PROJECT_PATH + "/runs", {"source": "echo hi\n", "filename": "a.sh"},
                         owner))["run_id"]
    grant = await post(AGENT_PATH + "/claim", {"agent_id": "a1", "capabilities": AGENT_CAPS,
                                               "wait": 0}, agent)
    return run_id, grant


async def _assert_ended_quietly(caplog: pytest.LogCaptureFixture, streams: list[str],
                                matches: Callable[[str, str], bool]) -> None:
    """Waits until each stream's handler ended (its access line, or an error), then holds
    that none logged a warning or a traceback."""
    def ended() -> tuple[int, list[logging.LogRecord]]:
        done = sum(1 for r in caplog.records if r.name == "aiohttp.access"
                   and any(matches(p, r.getMessage()) for p in streams))
        errors = [r for r in caplog.records
                  if r.name.startswith("aiohttp") and r.levelno >= logging.WARNING]
        return done, errors

    for _ in range(300):
        done, errors = ended()
        if done + len(errors) >= len(streams):
            break
        await asyncio.sleep(0.1)
    done, errors = ended()
    assert errors == [], [r.getMessage() + str(r.exc_info) for r in errors]
    assert done == len(streams)


async def _first_event(resp: aiohttp.ClientResponse) -> bytes:
    buf = b""
    while b"\n\n" not in buf:
        buf += await asyncio.wait_for(resp.content.readany(), 10)
    return buf


async def test_streams_whose_tab_closed_end_without_a_traceback(
        live_server: tuple[str, dict[str, str]], caplog: pytest.LogCaptureFixture) -> None:
    url, tokens = live_server
    owner = {"Authorization": f"Bearer {tokens['owner']}"}
    agent = {"Authorization": f"Bearer {tokens['agent']}"}
    async with aiohttp.ClientSession() as http:
        post = _poster(http, url)
        run_id, grant = await _claimed_run(post, owner, agent)
        streams = [f"{PROJECT_PATH}/runs/{run_id}/stream", f"{PROJECT_PATH}/stream"]
        for path in streams:  # open each stream, read its first event, close the tab
            resp = await http.get(url + path, headers=owner)
            assert resp.status == 200
            assert (await _first_event(resp)).startswith(b"event: hello")
            resp.close()
        # Something for each stream to send: a log chunk (the run's), a new run (the
        # project's). Their writes find the connections gone.
        await post(f"{AGENT_PATH}/runs/{run_id}/logs",
                   {"claim_token": grant["claim_token"],
                    "data": base64.b64encode(b"more\n").decode()}, agent)
        await post(PROJECT_PATH + "/runs", {"source": "echo 2\n", "filename": "b.sh"}, owner)
    await _assert_ended_quietly(caplog, streams, lambda p, msg: p + " " in msg)


async def test_a_log_follower_that_leaves_ends_without_a_traceback(
        live_server: tuple[str, dict[str, str]], caplog: pytest.LogCaptureFixture) -> None:
    url, tokens = live_server
    owner = {"Authorization": f"Bearer {tokens['owner']}"}
    agent = {"Authorization": f"Bearer {tokens['agent']}"}
    async with aiohttp.ClientSession() as http:
        post = _poster(http, url)
        run_id, grant = await _claimed_run(post, owner, agent)

        async def log(data: bytes) -> None:
            await post(f"{AGENT_PATH}/runs/{run_id}/logs",
                       {"claim_token": grant["claim_token"],
                        "data": base64.b64encode(data).decode()}, agent)

        await log(b"first\n")
        streams = [f"{PROJECT_PATH}/runs/{run_id}/logs?follow=1",
                   f"{PROJECT_PATH}/runs/{run_id}/logs?follow=1&times=1"]
        for path in streams:  # follow, read the first chunk, leave (as `| head -1` does)
            resp = await http.get(url + path, headers=owner)
            assert resp.status == 200
            assert b"first" in await asyncio.wait_for(resp.content.readany(), 10)
            resp.close()
        for i in range(3):  # more for each follower to write: the writes find it gone
            await log(f"more {i}\n".encode())
    await _assert_ended_quietly(caplog, streams, lambda p, msg: p.split("?")[0] in msg)
