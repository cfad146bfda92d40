"""Agent build ids and drains (issue 25), and the replica id a server writes: an agent's
claim reports its build, `GET …/agents` lists it, a drain by build lets the agent end the
run it holds and refuses its next claim, a restarted agent is not held by an old drain."""

from __future__ import annotations

import asyncio
import time

import psycopg

from cryopg.server.agent_api.batching import CLAIMS
from tests.server.conftest import AGENT_CAPS, Server


async def _claim(srv: Server, agent_id: str, build: str, instance: str = "i1") -> object:
    return await srv.agent("/claim", {"agent_id": agent_id, "capabilities": AGENT_CAPS,
                                      "wait": 0, "build": build, "instance": instance})


async def test_health_and_history_name_the_replica(srv: Server) -> None:
    got = (await srv.request("GET", "/api/v1/health", token=None)).ok()
    replica = got["replica"]
    assert got["ok"] is True and replica
    run_id = await srv.run_to_end()
    with psycopg.connect(srv.dsn, autocommit=True) as db:
        rows = db.execute("SELECT kind, replica FROM cryo.history WHERE run_id = %s",
                          (run_id,)).fetchall()
        assert len(rows) >= 2 and all(r == replica for _, r in rows), rows
        # A row written outside a server (psql, an application's session) names none.
        db.execute("SELECT cryo.cancel_run(%s)", (await srv.submit(),))
        assert db.execute("SELECT replica FROM cryo.history WHERE kind = 'cancelled'"
                          ).fetchall() == [(None,)]


async def test_drain_by_build_ends_the_held_run_then_refuses(srv: Server) -> None:
    first = await srv.submit()
    grant = (await _claim(srv, "old-1", "1.0+aaa")).ok()  # type: ignore[attr-defined]
    assert grant["run_id"] == first
    (await _claim(srv, "new-1", "1.1+bbb")).ok(204)  # type: ignore[attr-defined]
    listed = (await srv.org("GET", "/agents")).ok()["agents"]
    by_id = {a["id"]: a for a in listed}
    assert by_id["old-1"]["build"] == "1.0+aaa" and by_id["old-1"]["state"] == "busy"
    assert by_id["old-1"]["claimed_run"] == first and by_id["old-1"]["last_claim_at"]
    assert by_id["new-1"]["state"] == "idle" and by_id["new-1"]["capabilities"] == AGENT_CAPS

    (await srv.org("POST", "/agents/drain", {}, role="admin")).refused(400, "invalid_argument")
    (await srv.org("POST", "/agents/drain", {"build": "1.0+aaa"}, role="member")
     ).refused(403, "forbidden")
    assert (await srv.org("POST", "/agents/drain", {"build": "1.0+aaa"}, role="admin")
            ).ok() == {"draining": 1}
    # Never mid-claim: the held run still logs and finishes, and gets no next run.
    await srv.log(grant, b"still going\n")
    done = (await srv.in_run(grant, "finish", outcome="succeeded", exit_code=0,
                             claim={"agent_id": "old-1", "capabilities": AGENT_CAPS,
                                    "wait": 0, "build": "1.0+aaa", "instance": "i1"})).ok()
    assert done == {"next": None, "drain": True}
    assert await srv.status(first) == "succeeded"
    second = await srv.submit()
    (await _claim(srv, "old-1", "1.0+aaa")).refused(409, "draining")  # type: ignore[attr-defined]
    listed = {a["id"]: a for a in (await srv.org("GET", "/agents")).ok()["agents"]}
    assert listed["old-1"]["state"] == "draining"
    # The other build still claims; a restarted old-1 (a new instance) is not held back.
    assert (await _claim(srv, "new-1", "1.1+bbb")).ok()["run_id"] == second  # type: ignore
    (await _claim(srv, "old-1", "1.0+aaa", instance="i2")).ok(204)  # type: ignore[attr-defined]


async def test_an_agent_token_drains_its_own_id(srv: Server) -> None:
    (await _claim(srv, "box-1", "b")).ok(204)  # type: ignore[attr-defined]
    (await _claim(srv, "box-2", "b")).ok(204)  # type: ignore[attr-defined]
    (await _claim(srv, "boxer", "b")).ok(204)  # type: ignore[attr-defined]
    assert (await srv.agent("/drain", {"agent_id": "box"})).ok() == {"draining": 2}
    (await _claim(srv, "box-2", "b")).refused(409, "draining")  # type: ignore[attr-defined]
    (await _claim(srv, "boxer", "b")).ok(204)  # type: ignore[attr-defined]
    (await srv.agent("/drain", {"agent_id": "bad id"})).refused(400, "invalid_argument")


async def test_a_drain_asked_on_another_replica_refuses_a_held_claim_at_once(
        srv: Server) -> None:
    """The drain comes from another connection (another replica, or psql): this server's
    tick waits an hour, so only the cryo_drain notification can tell it in time."""
    (await _claim(srv, "far-1", "b")).ok(204)  # type: ignore[attr-defined]
    held = asyncio.create_task(srv.agent("/claim", {
        "agent_id": "far-1", "capabilities": AGENT_CAPS, "wait": 2, "build": "b",
        "instance": "i1"}))
    dispatcher = srv.app[CLAIMS]
    deadline = time.monotonic() + 10
    while not any(dispatcher._waiting.values()):  # the claim is held open, waiting
        assert time.monotonic() < deadline and not held.done()
        await asyncio.sleep(0.01)
    with psycopg.connect(srv.dsn, autocommit=True) as db:
        assert db.execute("SELECT cryo.drain_agents('dev', NULL, 'far-1')").fetchone() == (1,)
    run_id = await srv.submit()  # its cryo_work notify comes after the drain's
    (await held).ok(204)  # not granted one last run
    assert await srv.status(run_id) == "pending"
    (await _claim(srv, "far-1", "b")).refused(409, "draining")  # type: ignore[attr-defined]
