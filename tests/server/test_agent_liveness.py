"""Agents' liveness and drains (issue 36, item 6): an agent process that says it drains is
refused new runs at once (neither a claim nor its finish takes one) and listed draining;
one that says goodbye, or whose long-poll is closed from its end, is listed gone at once
and never granted a run; a grant that could not reach its agent is handed back with its
attempt uncounted; a claim that lapsed unrenewed lists its agent gone."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import psycopg

from cryopg.server.agent_api.batching import CLAIMS
from tests.server.conftest import AGENT_CAPS, Server


def _ask(agent_id: str, wait: float = 0, instance: str = "i1") -> dict[str, Any]:
    return {"agent_id": agent_id, "capabilities": AGENT_CAPS, "wait": wait, "build": "b",
            "instance": instance}


async def _states(srv: Server) -> dict[str, str]:
    return {a["id"]: a["state"] for a in (await srv.org("GET", "/agents")).ok()["agents"]}


async def _attempt(srv: Server, run_id: str) -> int:
    return int((await srv.show(run_id))["attempt"])


async def test_an_agent_that_says_it_drains_takes_no_new_run(srv: Server) -> None:
    first = await srv.submit()
    grant = (await srv.agent("/claim", _ask("term-1"))).ok()
    assert grant["run_id"] == first
    second = await srv.submit()
    assert (await _states(srv))["term-1"] == "busy"
    said = (await srv.agent("/state", {"agent_id": "term-1", "instance": "i1",
                                       "state": "draining"})).ok()
    assert said == {"noted": True}
    assert (await _states(srv))["term-1"] == "draining"
    # Its finish asks for its next run as usual; it gets none.
    done = (await srv.in_run(grant, "finish", outcome="succeeded", exit_code=0,
                             claim=_ask("term-1"))).ok()
    assert done == {"next": None, "drain": True}
    (await srv.agent("/claim", _ask("term-1"))).refused(409, "draining")
    assert await srv.status(second) == "pending" and await _attempt(srv, second) == 0
    # On its way out it says goodbye.
    assert (await srv.agent("/state", {"agent_id": "term-1", "instance": "i1",
                                       "state": "gone"})).ok() == {"noted": True}
    assert (await _states(srv))["term-1"] == "gone"
    (await srv.agent("/state", {"agent_id": "term-1", "state": "asleep"})
     ).refused(400, "invalid_argument")
    # A goodbye from an old process instance does not mark a new one gone.
    (await srv.agent("/claim", _ask("term-1", instance="i2"))).ok()  # restarted: not draining
    assert (await srv.agent("/state", {"agent_id": "term-1", "instance": "i1",
                                       "state": "gone"})).ok() == {"noted": False}
    assert (await _states(srv))["term-1"] == "busy"


async def test_a_long_poll_closed_by_its_agent_is_never_granted_a_run(srv: Server) -> None:
    (await srv.agent("/claim", _ask("gone-1"))).ok(204)
    assert (await _states(srv))["gone-1"] == "idle"
    dispatcher = srv.app[CLAIMS]
    async with aiohttp.ClientSession() as session:
        held = asyncio.create_task(session.post(
            f"{srv.url}/api/v1/agent/claim", json=_ask("gone-1", wait=20),
            headers={"Authorization": f"Bearer {srv.tokens['agent']}"}))
        deadline = time.monotonic() + 10
        while not any(dispatcher._waiting.values()):  # held open, waiting
            assert time.monotonic() < deadline and not held.done()
            await asyncio.sleep(0.01)
        held.cancel()  # the agent is killed: its connection closes
    deadline = time.monotonic() + 10
    while (await _states(srv))["gone-1"] != "gone":  # noticed without any new run
        assert time.monotonic() < deadline, await _states(srv)
        await asyncio.sleep(0.05)
    run_id = await srv.submit()
    assert await srv.status(run_id) == "pending" and await _attempt(srv, run_id) == 0
    # Back again (a blip, not a death): its next claim lists it alive and gets the run.
    assert (await srv.agent("/claim", _ask("gone-1"))).ok()["run_id"] == run_id
    assert (await _states(srv))["gone-1"] == "busy"


async def test_a_grant_that_cannot_reach_its_agent_is_handed_back_uncounted(
        srv: Server) -> None:
    run_id = await srv.submit()
    grant = (await srv.agent("/claim", _ask("lb-1"))).ok()
    assert grant["run_id"] == run_id and await _attempt(srv, run_id) == 1
    async with await srv.connect() as conn:
        token = (await (await conn.execute(
            "SELECT claim_token FROM cryo.queue WHERE run_id = %s", (run_id,))).fetchone())[0]
        await conn.execute("SELECT cryo.return_claim(%s, %s)", (run_id, token))
        try:
            await conn.execute("SELECT cryo.return_claim(%s, %s)", (run_id, token))
            raise AssertionError("a second return of the same claim must be refused")
        except psycopg.Error as exc:
            assert exc.sqlstate == "CR002"
    assert await srv.status(run_id) == "pending" and await _attempt(srv, run_id) == 0
    again = (await srv.agent("/claim", _ask("lb-2"))).ok()
    assert again["run_id"] == run_id and again["attempt"] == 1
    (await srv.in_run(grant, "logs", data="")).refused(409, "stale_claim")


async def test_an_agent_whose_claim_lapsed_is_listed_gone(srv: Server) -> None:
    await srv.submit()
    (await srv.agent("/claim", _ask("frozen-1"))).ok()
    assert (await _states(srv))["frozen-1"] == "busy"
    async with await srv.connect() as conn:
        await conn.execute("UPDATE cryo.queue SET claim_expires_at = now() - interval '1s' "
                           "WHERE agent_id = 'frozen-1'")
    assert (await _states(srv))["frozen-1"] == "gone"
