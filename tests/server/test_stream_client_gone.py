"""A follower that leaves mid-stream (`cryopg logs RUN --follow | head -2`, or killed)
ends the server's stream quietly (issue 42, item 2): no ClientConnectionResetError
traceback in the server's output, for the log routes as for the live streams
(tests/server/test_live_closed_tab.py)."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import aiohttp
import pytest

from tests.server.conftest import AGENT_CAPS, AGENT_PATH, PROJECT_PATH
from tests.server.test_live_closed_tab import live_server  # noqa: F401 - the fixture


async def test_a_log_follower_that_leaves_ends_without_a_traceback(
        live_server: tuple[str, dict[str, str]],  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    url, tokens = live_server
    owner = {"Authorization": f"Bearer {tokens['owner']}"}
    agent = {"Authorization": f"Bearer {tokens['agent']}"}
    async with aiohttp.ClientSession() as http:
        async def post(path: str, body: Any, headers: dict[str, str]) -> Any:
            async with http.post(url + path, json=body, headers=headers) as r:
                assert r.status < 300, await r.text()
                return await r.json()

        run_id = (await post(PROJECT_PATH + "/runs", {"source": "echo hi\n",
                                                      "filename": "a.sh"}, owner))["run_id"]
        grant = await post(AGENT_PATH + "/claim", {"agent_id": "a1", "capabilities": AGENT_CAPS,
                                                   "wait": 0}, agent)

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

    def ended() -> tuple[int, list[logging.LogRecord]]:
        done = sum(1 for r in caplog.records if r.name == "aiohttp.access"
                   and any(p.split("?")[0] in r.getMessage() for p in streams))
        errors = [r for r in caplog.records
                  if r.name.startswith("aiohttp") and r.levelno >= logging.WARNING]
        return done, errors

    for _ in range(300):  # each follower's handler ends: an access line, or an error
        done, errors = ended()
        if done + len(errors) >= len(streams):
            break
        await asyncio.sleep(0.1)
    done, errors = ended()
    assert errors == [], [r.getMessage() + str(r.exc_info) for r in errors]
    assert done == len(streams)
