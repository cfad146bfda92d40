"""The agent path in one round trip each way, and the server's group commit: waiting
long-polls claimed together in one call, finishes that arrive together ended in one
call, each answered only after its own fate is committed."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import pytest

from cryopg import engine
from cryopg.errors import StaleClaim
from cryopg.server.agent_api import batching
from cryopg.server.agent_api.batching import CLAIMS, FINISHES
from cryopg.server.app_state import KEYS, NOTIFIER
from cryopg.server.auth import bind_claim, secret_hash
from tests.server.conftest import AGENT_CAPS, Server


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """Records what the batchers pass to the engine (the calls still reach the database)."""
    seen: dict[str, list[Any]] = {"claim_grants": [], "finish_runs": []}
    real_claim_grants, real_finish_runs = engine.claim_grants, engine.finish_runs

    async def claim_grants(conn: Any, org: str, agent_ids: list[str], *rest: Any) -> Any:
        got = await real_claim_grants(conn, org, agent_ids, *rest)
        seen["claim_grants"].append((list(agent_ids), len(got)))
        return got

    async def finish_runs(conn: Any, runs: list[Any]) -> Any:
        done = await real_finish_runs(conn, runs)
        seen["finish_runs"].append(done)
        return done

    monkeypatch.setattr(batching.engine, "claim_grants", claim_grants)
    monkeypatch.setattr(batching.engine, "finish_runs", finish_runs)
    return seen


async def _held(srv: Server, grant: dict[str, Any]) -> uuid.UUID:
    """The claim token as the queue row holds it (bound to the agent token, V0013): what
    the server passes the batcher for an agent's finish."""
    info = await _agent_info(srv)
    return bind_claim(info.token_id, uuid.UUID(grant["claim_token"]))


async def _agent_info(srv: Server) -> engine.TokenInfo:
    async with await srv.connect() as conn:
        return await engine.authenticate_token(conn, secret_hash(srv.tokens["agent"]))


def _waiting(srv: Server) -> int:
    return sum(1 for ws in srv.app[CLAIMS]._waiting.values() for w in ws if not w.future.done())


async def _long_poll(srv: Server, agent_id: str, wait: float = 20) -> dict[str, Any] | None:
    reply = await srv.agent("/claim", {"agent_id": agent_id, "capabilities": AGENT_CAPS,
                                       "wait": wait})
    return None if reply.status == 204 else reply.ok()


async def test_waiting_long_polls_are_claimed_together_each_its_own_run(
        srv: Server, calls: dict[str, list[Any]]) -> None:
    agents = [f"agent-{i}" for i in range(6)]
    polls = [asyncio.create_task(_long_poll(srv, a)) for a in agents]
    for _ in range(200):
        if _waiting(srv) == len(agents):
            break
        await asyncio.sleep(0.02)
    assert _waiting(srv) == len(agents)
    source = (await srv.app[KEYS].sealer("dev")).seal_text("echo hi\n")
    async with await srv.connect() as conn:  # six runs, one commit, one notify
        async with conn.transaction():
            runs = [(await (await conn.execute(
                "SELECT run_id FROM cryo.submit_script('dev', 'default', 'job.sh', NULL, %s)",
                (source,))).fetchone())[0] for _ in agents]
    grants = await asyncio.wait_for(asyncio.gather(*polls), 20)
    assert all(g is not None for g in grants)
    assert sorted(g["run_id"] for g in grants) == sorted(runs)
    assert len({g["claim_token"] for g in grants}) == len(agents)
    for g, agent in zip(grants, agents, strict=True):
        assert (await srv.show(g["run_id"]))["agent_id"] == agent
    # The six were claimed by one call for all six agents.
    assert (sorted(agents), len(agents)) in [(sorted(a), n) for a, n in calls["claim_grants"]]


async def test_a_stale_finish_in_a_batch_fails_alone(srv: Server,
                                                     calls: dict[str, list[Any]]) -> None:
    runs = [await srv.submit() for _ in range(4)]
    grants = [await srv.claim_run(r) for r in runs]
    stale = {**grants[1], "claim_token": str(uuid.uuid4())}
    bad_outcome = grants[3]
    replies = await asyncio.gather(
        srv.in_run(grants[0], "finish", outcome="succeeded", exit_code=0),
        srv.in_run(stale, "finish", outcome="succeeded", exit_code=0),
        srv.in_run(grants[2], "finish", outcome="failed", exit_code=3),
        srv.in_run(bad_outcome, "finish", outcome="exploded"))
    replies[0].ok()
    replies[1].refused(409, "stale_claim")
    replies[2].ok()
    assert "outcome" in replies[3].refused(400, "invalid_argument")
    assert [await srv.status(r) for r in runs] == ["succeeded", "running", "failed", "running"]
    # The live claims are still live: they can finish now.
    await srv.finish(grants[1])
    await srv.finish(bad_outcome)
    assert calls["finish_runs"]


async def test_finishes_that_arrive_together_commit_in_one_call(
        srv: Server, calls: dict[str, list[Any]]) -> None:
    runs = [await srv.submit() for _ in range(5)]
    grants = [await srv.claim_run(r) for r in runs]
    gone = uuid.uuid4()
    held = [await _held(srv, g) for g in grants]
    # Queued before the batcher's task runs, so they share one transaction.
    results = await asyncio.gather(
        *(srv.app[FINISHES].finish(g["run_id"], h, "succeeded", 0,
                                   None, None) for g, h in zip(grants, held, strict=True)),
        srv.app[FINISHES].finish(runs[0], gone, "succeeded", 0, None, None),
        return_exceptions=True)
    assert results[:5] == [None] * 5
    assert isinstance(results[5], StaleClaim)  # a second finish of a run: the next batch
    assert [await srv.status(r) for r in runs] == ["succeeded"] * 5
    # Two batches (they may commit at once, on two connections, in either order).
    assert sorted((set(done) for done in calls["finish_runs"]), key=len) == [{runs[0]},
                                                                             set(runs)]


async def test_a_finish_carries_the_last_output_and_can_bring_the_next_run(srv: Server) -> None:
    first, second = await srv.submit(), await srv.submit()
    grant = await srv.claim_run(first)
    await srv.log(grant, b"early\n")
    got = (await srv.in_run(grant, "finish", outcome="succeeded", exit_code=0,
                            data=base64.b64encode(b"last\n").decode(),
                            claim={"agent_id": "agent-1", "capabilities": AGENT_CAPS,
                                   "wait": 0})).ok()
    assert await srv.status(first) == "succeeded"
    reply = await srv.user("GET", f"/runs/{first}/logs")
    assert reply.text == "early\nlast\n"
    nxt = got["next"]
    assert nxt["run_id"] == second and nxt["source"] == "echo hi\n"
    assert (await srv.show(second))["agent_id"] == "agent-1"
    # Nothing left: the next is null, and a finish without a claim answers {} as before.
    done = (await srv.in_run(nxt, "finish", outcome="succeeded", exit_code=0,
                             claim={"agent_id": "agent-1", "wait": 0})).ok()
    assert done == {"next": None}
    third = await srv.submit()
    assert (await srv.in_run(await srv.claim_run(third), "finish", outcome="succeeded")).ok() == {}


async def test_a_finish_refuses_bad_input_before_it_ends_anything(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    for fields in ({"data": "%%%"}, {"claim": 5}, {"claim": {"agent_id": ""}},
                   {"claim": {"agent_id": "a", "wait": "soon"}}, {"exit_code": 2**40}):
        (await srv.in_run(grant, "finish", outcome="succeeded", **fields)).refused(
            400, "invalid_argument")
    assert await srv.status(run_id) == "running"


async def test_a_grant_brings_the_memos_and_secrets_in_the_claim(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/API_KEY", {"value": "s3cret"})).ok(201)
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "steps", path="step/a/0", family="step", name="a", ordinal=0,
                      label=None, stdout="out", exit_code=0)).ok()
    (await srv.in_run(grant, "release")).ok()
    again = await srv.claim_run(run_id)
    assert again["secrets"] == {"API_KEY": "s3cret"} and again["withheld"] == []
    [memo] = again["journal"]
    assert (memo["path"], memo["stdout"], memo["status"]) == ("step/a/0", "out", "done")
    # The old claim is refused everywhere, the new one works.
    (await srv.in_run(grant, "finish", outcome="succeeded")).refused(409, "stale_claim")
    await srv.finish(again)


async def test_a_stale_finish_claims_nothing_for_its_agent(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    waiting = await srv.submit()
    stale = {**grant, "claim_token": str(uuid.uuid4())}
    (await srv.in_run(stale, "finish", outcome="succeeded",
                      claim={"agent_id": "agent-1", "wait": 0})).refused(409, "stale_claim")
    assert await srv.status(run_id) == "running"
    assert await srv.status(waiting) == "pending"  # not claimed for an agent that got a 409


async def test_steps_reported_together_commit_together_and_fail_alone(srv: Server) -> None:
    runs = [await srv.submit() for _ in range(3)]
    grants = [await srv.claim_run(r) for r in runs]
    stale = {**grants[1], "claim_token": str(uuid.uuid4())}

    def step(name: str) -> dict[str, Any]:
        return {"path": f"step/{name}/0", "family": "step", "name": name, "ordinal": 0,
                "label": None, "stdout": name, "exit_code": 0}

    replies = await asyncio.gather(srv.in_run(grants[0], "steps", **step("a")),
                                   srv.in_run(stale, "steps", **step("b")),
                                   srv.in_run(grants[2], "steps", **{**step("c"),
                                                                     "path": "step/other/0"}),
                                   srv.in_run(grants[1], "steps", **step("d")))
    assert replies[0].ok() == {"seq": 0}
    replies[1].refused(409, "stale_claim")
    replies[2].refused(400, "identity_mismatch")
    assert replies[3].ok() == {"seq": 0}
    (await srv.in_run(grants[0], "steps", **{**step("e"), "ordinal": 2**40})).refused(
        400, "invalid_argument")
    (await srv.in_run(grants[0], "release")).ok()
    again = await srv.claim_run(runs[0])
    assert [(m["path"], m["stdout"]) for m in again["journal"]] == [("step/a/0", "a")]


async def test_finishes_that_ask_for_their_next_run_are_one_statement(
        srv: Server, calls: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = engine.finish_and_claim_grants

    async def counted(conn: Any, runs: list[Any], *rest: Any) -> Any:
        seen.append(len(runs))
        return await real(conn, runs, *rest)

    monkeypatch.setattr(batching.engine, "finish_and_claim_grants", counted)
    runs = [await srv.submit() for _ in range(6)]
    grants = [await srv.claim_run(r) for r in runs[:3]]
    ask = {"capabilities": AGENT_CAPS, "wait": 0}
    before = {k: len(v) for k, v in calls.items()}
    replies = await asyncio.gather(*(
        srv.in_run(g, "finish", outcome="succeeded", exit_code=0,
                   claim={**ask, "agent_id": f"agent-{i}"}) for i, g in enumerate(grants)))
    nexts = [r.ok()["next"] for r in replies]
    assert sorted(n["run_id"] for n in nexts) == sorted(runs[3:])
    assert [await srv.status(r) for r in runs[:3]] == ["succeeded"] * 3
    # Each batch of finishes and the claims they ask for: one statement, not a
    # finish_runs and a claim_grants in a transaction.
    assert sum(seen) == 3
    assert {k: len(v) for k, v in calls.items()} == before
    for i, n in enumerate(nexts):  # each claimed for the agent that asked
        assert (await srv.show(n["run_id"]))["agent_id"] in {f"agent-{j}" for j in range(3)}
        assert n["claim_token"] not in {g["claim_token"] for g in grants[:i]}


async def test_an_arriving_long_poll_is_not_a_claim_for_every_agent_waiting(
        srv: Server, calls: dict[str, list[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    # Agents already waiting found nothing, and nothing was added since: a new arrival
    # asks for itself alone, so thousands of held long-polls cost no more per arrival.
    # (Asked of the dispatcher directly, with no poll backstop: a long-poll over HTTP is
    # capped at 2 s here, and a deadline or backstop pass asks for everyone.)
    monkeypatch.setattr(batching, "POLL_SECONDS", 3600.0)
    dispatcher = srv.app[CLAIMS]

    def poll(agent_id: str) -> asyncio.Task[Any]:
        return asyncio.create_task(dispatcher.claim("dev", agent_id, AGENT_CAPS, 60,
                                                    lambda: True))

    first = [poll(f"agent-{i}") for i in range(40)]
    for _ in range(750):
        if _waiting(srv) == len(first) and all(w.tried for ws in dispatcher._waiting.values()
                                               for w in ws):
            break
        await asyncio.sleep(0.02)
    assert _waiting(srv) == len(first)
    before = len(calls["claim_grants"])
    late = poll("late-agent")

    def asked_for_late() -> list[list[str]]:
        return [ids for ids, _ in calls["claim_grants"][before:] if "late-agent" in ids]

    for _ in range(750):
        if _waiting(srv) == len(first) + 1 and asked_for_late():
            break
        await asyncio.sleep(0.02)
    assert asked_for_late() == [["late-agent"]]
    # A run submitted now (a notify) is still offered to everyone waiting.
    run_id = await srv.submit()
    done, _ = await asyncio.wait([*first, late], timeout=20,
                                 return_when=asyncio.FIRST_COMPLETED)
    assert [t.result().claim.run_id for t in done] == [run_id]
    for t in [*first, late]:
        t.cancel()


async def test_the_claim_connection_hears_work_itself(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # The dispatcher LISTENs on its own claim connection: a submit wakes a held claim
    # with the notifier's wake-ups gone and no poll backstop to fall back on. (Asked of
    # the dispatcher directly: the HTTP long-poll is capped at 2 s in these tests, and
    # its last try at the deadline would find the run anyway.)
    monkeypatch.setattr(batching, "POLL_SECONDS", 3600.0)
    monkeypatch.setattr(srv.app[NOTIFIER], "_wake_work", lambda: None)
    dispatcher = srv.app[CLAIMS]
    for agent_id in ("agent-1", "agent-2"):  # the second: it listens again after a claim
        poll = asyncio.create_task(dispatcher.claim("dev", agent_id, AGENT_CAPS, 60,
                                                    lambda: True))
        for _ in range(750):  # its first try found nothing
            if _waiting(srv) == 1 and all(w.tried for ws in dispatcher._waiting.values()
                                          for w in ws):
                break
            await asyncio.sleep(0.02)
        assert _waiting(srv) == 1
        run_id = await srv.submit()
        got = await asyncio.wait_for(poll, 20)
        assert got is not None and got.claim.run_id == run_id
        assert got.agent_id == agent_id
