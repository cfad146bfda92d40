"""Direct hand-off: a long-poll that found nothing is registered (cryo.wait_for_runs), and
a submit claims its new run for it in the submit's own transaction (cryo._hand_off),
telling the server on its own channel; the server answers the long-poll without a claim
of its own. Never one run to two agents; a run handed to a waiter that is gone goes back
to the queue and is claimed again."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from cryopg import engine
from cryopg.server.agent_api import batching
from cryopg.server.agent_api.batching import CLAIMS
from cryopg.server.auth import secret_hash
from tests.server.conftest import AGENT_CAPS, Server


@pytest.fixture
def claims_found(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many runs each of the server's own claim calls found (the database is real)."""
    found: list[int] = []
    real = engine.claim_grants

    async def claim_grants(conn: Any, *args: Any) -> Any:
        got = await real(conn, *args)
        found.append(len(got))
        return got

    monkeypatch.setattr(batching.engine, "claim_grants", claim_grants)
    return found


def _registered(srv: Server) -> int:
    return sum(1 for w in srv.app[CLAIMS]._known.values() if w.registered)


async def _until(cond: Any, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _long_poll(srv: Server, agent_id: str, wait: float = 20) -> dict[str, Any] | None:
    reply = await srv.agent("/claim", {"agent_id": agent_id, "capabilities": AGENT_CAPS,
                                       "wait": wait})
    return None if reply.status == 204 else reply.ok()


async def _submit_sql(srv: Server, source: str = "echo hi\n") -> str:
    """A submit from SQL in its own transaction, as an application makes one."""
    from cryopg.server.state import KEYS

    sealed = (await srv.app[KEYS].sealer("dev")).seal_text(source)
    async with await srv.connect() as conn:
        row = await (await conn.execute(
            "SELECT run_id FROM cryo.submit_script('dev', 'default', 'job.sh', NULL, %s)",
            (sealed,))).fetchone()
    assert row is not None
    return str(row[0])


async def test_a_waiting_agent_gets_a_new_run_from_the_submit_itself(
        srv: Server, claims_found: list[int]) -> None:
    poll = asyncio.create_task(_long_poll(srv, "agent-1"))
    await _until(lambda: _registered(srv) == 1, "the long-poll's registration")
    run_id = await srv.submit("echo handed\n")
    grant = await asyncio.wait_for(poll, 20)
    assert grant is not None and grant["run_id"] == run_id
    assert grant["source"] == "echo handed\n" and grant["journal"] == []
    assert not any(claims_found), "the server's own claim found the run"
    assert (await srv.show(run_id))["agent_id"] == "agent-1"
    await srv.finish(grant)  # the handed token is the live claim
    assert await srv.status(run_id) == "succeeded"


async def test_a_grant_too_big_for_a_notify_is_read_by_the_server(
        srv: Server, claims_found: list[int]) -> None:
    poll = asyncio.create_task(_long_poll(srv, "agent-1"))
    await _until(lambda: _registered(srv) == 1, "the long-poll's registration")
    source = "echo " + "x" * 20_000 + "\n"
    run_id = await srv.submit(source)
    grant = await asyncio.wait_for(poll, 20)
    assert grant is not None and grant["run_id"] == run_id and grant["source"] == source
    assert not any(claims_found)
    await srv.finish(grant)
    assert await srv.status(run_id) == "succeeded"


async def test_a_hand_off_never_gives_one_run_to_two_agents(srv: Server) -> None:
    agents = [f"agent-{i}" for i in range(5)]
    polls = [asyncio.create_task(_long_poll(srv, a)) for a in agents]
    await _until(lambda: _registered(srv) == len(agents), "five registrations")
    # Eight submits at once, each in its own transaction: five go to the five waiters
    # (by hand-off or by the server's claim), three stay pending.
    runs = await asyncio.gather(*(_submit_sql(srv) for _ in range(8)))
    grants = await asyncio.wait_for(asyncio.gather(*polls), 20)
    assert all(g is not None for g in grants)
    got = [g["run_id"] for g in grants if g]
    assert len(set(got)) == len(agents) and set(got) <= set(runs)
    async with await srv.connect() as conn:
        rows = await (await conn.execute(
            "SELECT run_id, state, agent_id FROM cryo.queue WHERE run_id = ANY(%s)",
            (runs,))).fetchall()
    claimed = {r[0]: r[2] for r in rows if r[1] == "claimed"}
    assert set(claimed) == set(got)
    assert {claimed[g["run_id"]] for g in grants if g} == set(agents)
    assert sum(1 for r in rows if r[1] == "pending") == len(runs) - len(agents)
    for g in grants:
        assert g is not None
        await srv.finish(g)


async def test_a_run_handed_to_a_waiter_that_vanished_is_claimed_again(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[str] = []
    real_release = engine.release_claim

    async def release_claim(conn: Any, run_id: str, token: uuid.UUID) -> None:
        released.append(run_id)
        await real_release(conn, run_id, token)

    monkeypatch.setattr(batching.engine, "release_claim", release_claim)
    dispatcher = srv.app[CLAIMS]
    async with await srv.connect() as conn:
        info = await engine.authenticate_token(conn, secret_hash(srv.tokens["agent"]))
    here = [True]
    # A waiter whose agent hangs up after its registration, before anything tells the
    # server (its `alive` turns false, as a closed transport does).
    gone = asyncio.create_task(dispatcher.claim("dev", "agent-gone", AGENT_CAPS, 20,
                                                lambda: here[0], agent_token=info.token_id))
    await _until(lambda: _registered(srv) == 1, "the registration")
    here[0] = False
    run_id = await srv.submit()
    # The server hands the run back; it is pending again and the next agent claims it.
    async def pending() -> bool:
        async with await srv.connect() as conn:
            row = await (await conn.execute(
                "SELECT state FROM cryo.queue WHERE run_id = %s", (run_id,))).fetchone()
        return row is not None and row[0] == "pending"

    for _ in range(500):
        if await pending():
            break
        await asyncio.sleep(0.01)
    assert await pending()
    assert released == [run_id]  # handed to the waiter, then handed back by the server
    grant = await srv.claim_run(run_id, agent_id="agent-next")
    await srv.finish(grant)
    assert await srv.status(run_id) == "succeeded"
    gone.cancel()


async def test_a_registration_of_a_server_that_is_gone_is_skipped(srv: Server) -> None:
    """Its advisory lock is free: the submit drops it and notifies cryo_work instead."""
    async with await srv.connect() as conn:
        await conn.execute(
            "SELECT cryo.wait_for_runs('dev', %s, %s, %s, NULL, %s, 30, 'cryo_hand_gone', 7, 20)",
            (AGENT_CAPS, [uuid.uuid4()], ["agent-x"], [uuid.uuid4()]))
        await conn.execute("LISTEN cryo_work")
        run_id = await _submit_sql(srv)
        heard = [n.channel async for n in conn.notifies(timeout=5, stop_after=1)]
        assert heard == ["cryo_work"]
        state = await (await conn.execute(
            "SELECT state FROM cryo.queue WHERE run_id = %s", (run_id,))).fetchone()
        left = await (await conn.execute("SELECT count(*) FROM cryo.claim_waiters")).fetchone()
    assert state == ("pending",) and left == (0,)


async def test_wait_for_runs_refuses_lists_of_other_lengths(srv: Server) -> None:
    async with await srv.connect() as conn:
        with pytest.raises(psycopg.Error) as exc:
            await conn.execute(
                "SELECT cryo.wait_for_runs('dev', %s, %s, %s, NULL, %s, 30, 'c', 7, 20)",
                (AGENT_CAPS, [uuid.uuid4(), uuid.uuid4()], ["a"], [uuid.uuid4()]))
    assert exc.value.sqlstate == "CR004"
