"""Agent routes driven by hand, the way agent/api.py drives them: claim (and the token's
capability ceiling), logs as heartbeat, the journal of steps, sleeps, annotations,
outputs, children, activities and locks, finish and release, and the refusal of every
call that carries a claim token that is no longer the run's live claim."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tests.server.conftest import CLAIM_SECONDS, Server


def _step(call: str, stdout: str = "", exit_code: int = 0, ordinal: int = 0) -> dict[str, Any]:
    """A step report for "family/name"; its path is the one SQL derives from that."""
    family, name = call.split("/")[:2]
    return {"path": f"{family}/{name}/{ordinal}", "family": family, "name": name,
            "ordinal": ordinal, "label": None, "stdout": stdout, "exit_code": exit_code}


async def test_claim_hands_out_the_oldest_run_once(srv: Server) -> None:
    assert await srv.claim() is None
    first = await srv.submit("echo one\n", input=[1, "two"])
    second = await srv.submit("echo two\n", filename="two.sh", interpreter="/bin/bash -e")
    grant = await srv.claim(agent_id="worker-7")
    assert grant is not None
    assert {k: grant[k] for k in ("run_id", "attempt", "filename", "interpreter", "source",
                                  "input", "claim_seconds", "journal", "secrets", "withheld")} == {
        "run_id": first, "attempt": 1, "filename": "job.sh", "interpreter": None,
        "source": "echo one\n", "input": [1, "two"], "claim_seconds": CLAIM_SECONDS,
        "journal": [], "secrets": {}, "withheld": []}
    assert uuid.UUID(grant["claim_token"])
    run = await srv.show(first)
    assert (run["status"], run["attempt"], run["agent_id"]) == ("running", 1, "worker-7")
    other = await srv.claim()
    assert other is not None and other["run_id"] == second
    assert other["interpreter"] == "/bin/bash -e"
    assert other["claim_token"] != grant["claim_token"]
    assert await srv.claim() is None


async def test_work_beyond_an_agents_ceiling_never_reaches_it(srv: Server) -> None:
    shell_only = await srv.make_token(kind="agent", caps=["shell"])
    python = await srv.submit("print('hi')\n", filename="p.py")  # needs polyglot
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', "
                                 "'c.sh', NULL, 's', NULL, NULL, '{connector}')")
        row = await cur.fetchone()
    assert row is not None
    connector = row[0]
    greedy = ["shell", "polyglot", "connector"]
    assert await srv.claim(caps=greedy, token=shell_only) is None
    assert await srv.status(python) == "pending"
    grant = await srv.claim(caps=greedy)  # the default ceiling: shell and polyglot
    assert grant is not None and grant["run_id"] == python
    assert await srv.claim(caps=greedy) is None  # connector is in no default ceiling
    assert await srv.status(connector) == "pending"
    assert await srv.claim(caps=["shell"]) is None  # nor does an agent get more than it asks


async def test_agent_routes_need_an_agent_token_of_the_runs_org(srv: Server) -> None:
    run_id = await srv.submit()
    claim = {"agent_id": "x", "wait": 0}
    for token in (srv.tokens["owner"], "bogus"):
        (await srv.agent("/claim", claim, token=token)).refused(401, "unauthorized")
    (await srv.request("POST", "/api/v1/agent/claim", claim, token=None)).refused(
        401, "unauthorized")
    (await srv.user("GET", "/runs", token=srv.tokens["agent"])).refused(401, "unauthorized")
    await srv.add_org("acme")
    stranger = await srv.make_token(kind="agent", org="acme")
    assert await srv.claim(token=stranger) is None  # dev's work is not acme's
    grant = await srv.claim_run(run_id)
    for what in ("logs", "finish", "steps"):
        reply = await srv.in_run(grant, what, token=stranger, outcome="failed", data="",
                                 **_step("step/x"))
        reply.refused(404, "not_found")
    assert await srv.status(run_id) == "running"
    await srv.finish(grant)


async def test_stale_claim_token_is_refused(srv: Server) -> None:
    unknown = {"run_id": "dev:default:run-0000000000000000", "claim_token": str(uuid.uuid4())}
    message = (await srv.in_run(unknown, "finish", outcome="succeeded")).refused(
        409, "stale_claim")
    assert "claim token" in message

    run_id = await srv.submit()
    first = await srv.claim_run(run_id)
    assert (await srv.in_run(first, "steps", **_step("step/a", "A"))).ok() == {"seq": 0}
    assert await srv.tick() == (0, 0)  # within the lease nothing moves
    assert await srv.tick(later=CLAIM_SECONDS + 5) == (1, 0)  # the lease lapsed
    assert await srv.status(run_id) == "pending"
    for what, fields in (("logs", {"data": ""}), ("steps", _step("step/b")),
                         ("park", {"path": "sleep//0", "ordinal": 0, "seconds": 1}),
                         ("annotate", {"text": "late"}), ("release", {}),
                         ("finish", {"outcome": "succeeded"})):
        (await srv.in_run(first, what, **fields)).refused(409, "stale_claim")

    second = await srv.claim_run(run_id, agent_id="rescuer")
    assert second["attempt"] == 2
    assert [(m["path"], m["stdout"], m["exit_code"]) for m in second["journal"]] == [
        ("step/a/0", "A", 0)]
    # The first attempt recorded this path; a second pass must replay it, not record it.
    again = await srv.in_run(second, "steps", **_step("step/a", "A2"))
    assert "already recorded" in again.refused(409, "duplicate_call")
    (await srv.in_run(first, "finish", outcome="succeeded")).refused(409, "stale_claim")
    await srv.finish(second)
    run = await srv.show(run_id)
    assert (run["status"], run["attempt"]) == ("succeeded", 2)
    assert [e["kind"] for e in run["history"]].count("claim_expired") == 1


async def test_log_flushes_renew_the_lease(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)

    async def expires() -> Any:
        async with await srv.connect() as conn:  # the DBA's view of live claims
            cur = await conn.execute("SELECT claim_expires_at FROM cryo.live_claims "
                                     "WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
        assert row is not None
        return row[0]

    before = await expires()
    await asyncio.sleep(0.05)
    assert await srv.log(grant, b"still here\n") is False
    renewed = await expires()
    assert renewed > before
    await asyncio.sleep(0.05)
    assert await srv.log(grant, b"") is False  # an empty flush is the heartbeat
    assert await expires() > renewed


async def test_steps_and_a_sleep_replay_from_the_journal(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    assert (await srv.in_run(grant, "steps", **_step("step/count", "41\n"))).ok() == {"seq": 0}
    # A retried request (its answer was lost) gets the same position back.
    assert (await srv.in_run(grant, "steps", **_step("step/count", "41\n"))).ok() == {"seq": 0}
    assert (await srv.in_run(grant, "steps", **_step("step/flaky", "out\n", 3))).ok() == {
        "seq": 1}
    parked = (await srv.in_run(grant, "park", path="sleep//0", ordinal=0, seconds=2)).ok()
    run = await srv.show(run_id)
    assert (run["status"], run["substate"], run["wake_at"]) == (
        "parked", "sleeping", parked["wake_at"])
    (await srv.in_run(grant, "steps", **_step("step/late"))).refused(409, "stale_claim")
    assert await srv.claim() is None  # parked runs are not claimable
    assert await srv.tick(later=1) == (0, 0)
    assert await srv.tick(later=3) == (0, 1)
    again = await srv.claim_run(run_id)
    assert again["attempt"] == 2
    assert [(m["seq"], m["path"], m["status"], m["stdout"], m["exit_code"])
            for m in again["journal"]] == [(0, "step/count/0", "done", "41\n", 0),
                                           (1, "step/flaky/0", "done", "out\n", 3),
                                           (2, "sleep//0", "done", "", 0)]
    await srv.finish(again)
    kinds = [(e["kind"], e.get("name")) for e in (await srv.show(run_id))["history"]]
    assert kinds.count(("step_completed", "count")) == 1
    assert ("timer_scheduled", "") in kinds and ("timer_fired", "") in kinds


async def test_finish_records_the_outcome(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    assert "outcome" in (await srv.in_run(grant, "finish", outcome="done")).refused(
        400, "invalid_argument")
    (await srv.in_run(grant, "finish", outcome="failed", exit_code="7")).refused(
        400, "invalid_argument")
    assert await srv.status(run_id) == "running"
    await srv.finish(grant, "failed", 7, "exit status 7")
    run = await srv.show(run_id)
    assert (run["status"], run["exit_code"], run["error"]) == ("failed", 7, "exit status 7")
    assert run["finished_at"] is not None and run["history"][-1]["kind"] == "failed"
    (await srv.in_run(grant, "finish", outcome="succeeded")).refused(409, "stale_claim")


async def test_release_hands_the_run_back_at_once(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id, agent_id="leaving")
    (await srv.in_run(grant, "steps", **_step("step/first", "one\n"))).ok()
    assert (await srv.in_run(grant, "release")).ok() == {}
    run = await srv.show(run_id)
    assert (run["status"], run["agent_id"]) == ("pending", None)
    kinds = [e["kind"] for e in run["history"]]
    assert "released" in kinds and "claim_expired" not in kinds
    nxt = await srv.claim_run(run_id, agent_id="next")
    assert nxt["attempt"] == 2 and [m["path"] for m in nxt["journal"]] == ["step/first/0"]
    # A run asked to cancel that its agent hands back simply ends.
    (await srv.user("POST", f"/runs/{run_id}/cancel", {})).ok()
    (await srv.in_run(nxt, "release")).ok()
    assert await srv.status(run_id) == "cancelled"


async def test_annotations_and_outputs_show_in_the_run(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "annotate", text="deploying v2")).ok()
    (await srv.in_run(grant, "outputs", key="answer", value=42)).ok()
    (await srv.in_run(grant, "outputs", key="doc", value={"a": [1]})).ok()
    (await srv.in_run(grant, "outputs", key="", value=1)).refused(400, "invalid_argument")
    await srv.finish(grant)
    run = await srv.show(run_id)
    assert run["outputs"] == {"answer": 42, "doc": {"a": [1]}}
    assert [e["text"] for e in run["history"] if e["kind"] == "annotation"] == ["deploying v2"]


async def test_a_spawned_child_is_started_once(srv: Server) -> None:
    parent = await srv.submit()
    grant = await srv.claim_run(parent)
    spawn = {"path": "spawn//0", "ordinal": 0, "filename": "child.sh",
             "source": "echo child\n", "input": {"n": 3}}
    child = (await srv.in_run(grant, "spawn", **spawn)).ok()["run_id"]
    assert (await srv.in_run(grant, "spawn", **spawn)).ok()["run_id"] == child
    (await srv.in_run(grant, "spawn", **{**spawn, "source": None})).refused(
        400, "invalid_argument")
    await srv.tick(later=CLAIM_SECONDS + 5)  # the parent's agent vanished
    replay = await srv.claim_run(parent)
    assert (await srv.in_run(replay, "spawn", **spawn)).ok()["run_id"] == child
    assert len((await srv.user("GET", "/runs")).ok()["runs"]) == 2
    child_grant = await srv.claim_run(child)
    assert (child_grant["source"], child_grant["input"]) == ("echo child\n", {"n": 3})


async def test_activities_park_the_parent_until_collected(srv: Server) -> None:
    parent = await srv.submit()
    grant = await srv.claim_run(parent)
    act = {"path": "activity/job/0", "name": "job", "argv": ["sh", "-c", "echo 'out 1'"]}
    child = (await srv.in_run(grant, "activities", **act)).ok()["run_id"]
    assert (await srv.in_run(grant, "activities", **act)).ok()["run_id"] == child  # a retry
    reuse = await srv.in_run(grant, "activities", **{**act, "path": "activity/job/1"})
    assert "already submitted" in reuse.refused(409, "duplicate_call")
    (await srv.in_run(grant, "activities", **{**act, "path": "a/x", "name": "x",
                                              "argv": []})).refused(400, "invalid_argument")
    (await srv.in_run(grant, "activities/collect", path="activity.collect/nope/0", ordinal=0,
                      name="nope")).refused(404, "not_found")
    collect = {"path": "activity.collect/job/0", "ordinal": 0, "name": "job"}
    got = (await srv.in_run(grant, "activities/collect", **collect)).ok()
    assert got == {"parked": True, "run_id": child, "exit_code": None, "stdout": ""}
    assert (await srv.show(parent))["substate"] == "awaiting-children"

    job = await srv.claim_run(child)
    assert job["source"] == "exec sh -c 'echo '\"'\"'out 1'\"'\"''\n"  # the argv, exactly
    await srv.log(job, b"out 1\n")
    await srv.finish(job)
    assert await srv.status(parent) == "pending"  # the child's end woke it
    again = await srv.claim_run(parent)
    collected = next(m for m in again["journal"] if m["path"] == collect["path"])
    assert (collected["status"], collected["stdout"], collected["exit_code"]) == (
        "done", "out 1\n", 0)
    got = (await srv.in_run(again, "activities/collect", **collect)).ok()
    assert got == {"parked": False, "run_id": child, "exit_code": 0, "stdout": "out 1\n"}
    assert (await srv.in_run(again, "activities/wait-all", path="activity.wait-all//0",
                            ordinal=0)).ok() == {
        "parked": False, "failed": 0}


async def test_a_lock_is_held_by_one_run_at_a_time(srv: Server) -> None:
    first, second = await srv.submit(), await srv.submit()
    holder, waiter = await srv.claim_run(first), await srv.claim_run(second)
    lock = {"path": "lock/deploy/0", "ordinal": 0, "group": "deploy"}
    assert (await srv.in_run(holder, "locks/acquire", **lock)).ok() == {"granted": True}
    twice = await srv.in_run(holder, "locks/acquire",
                             **{**lock, "path": "lock/deploy/1", "ordinal": 1})
    assert "already holds" in twice.refused(409, "lease_held")
    wrong = await srv.in_run(holder, "locks/acquire", **{**lock, "path": "lock/other/0"})
    assert "is not the path" in wrong.refused(400, "identity_mismatch")
    assert (await srv.in_run(waiter, "locks/acquire", **lock)).ok() == {"granted": False}
    assert (await srv.show(second))["substate"] == "awaiting-lease"
    assert (await srv.in_run(holder, "locks/release", group="deploy")).ok() == {"released": True}
    assert (await srv.in_run(holder, "locks/release", group="deploy")).ok() == {
        "released": False}
    assert await srv.status(second) == "pending"
    again = await srv.claim_run(second)
    assert (await srv.in_run(again, "locks/acquire", **lock)).ok() == {"granted": True}


async def test_a_corrupt_memo_ends_the_run_unreadable(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "steps", **_step("step/charge", "charged\n"))).ok()
    (await srv.in_run(grant, "park", path="sleep//0", ordinal=0, seconds=1)).ok()
    async with await srv.connect() as conn:  # the test plays an attacker on disk
        await conn.execute(
            "UPDATE cryo.journal SET result = overlay(result placing '\\xff'::bytea "
            "from length(result) - 3) WHERE run_id = %s AND key_family = 'step'", (run_id,))
    assert await srv.tick(later=2) == (0, 1)
    assert await srv.claim() is None  # no grant: the memo would not open
    run = await srv.show(run_id)
    assert run["status"] == "unreadable" and "unreadable" in run["error"]
    kinds = [e["kind"] for e in run["history"]]
    assert kinds.count("step_completed") == 1  # and the step was not handed out again


async def test_malformed_agent_bodies_are_400(srv: Server) -> None:
    (await srv.agent("/claim", {"wait": 0})).refused(400, "invalid_argument")
    (await srv.agent("/claim", data=b"[")).refused(400, "invalid_argument")
    grant = await srv.claim_run(await srv.submit())
    for what, fields in (
            ("logs", {"data": "not base64!"}),
            ("steps", {"path": "step/a", "family": "step", "name": "a"}),
            ("steps", {**_step("step/a"), "ordinal": "first"}),
            ("steps", {**_step("step/a"), "position": -1}),
            ("steps", {**_step("step/a"), "path": ""}),
            ("park", {"path": "sleep//0", "ordinal": 0, "seconds": "soon"}),
            ("park", {"path": "sleep//0", "ordinal": 0, "seconds": -1}),
            ("park", {"ordinal": 0, "seconds": "nan"}),
            ("waits/signal", {"path": "signal/go/0", "name": "go", "ordinal": 0, "timeout": "x"}),
            ("waits/signal", {"name": "go", "ordinal": 0, "timeout": -1}),
            ("waits/nothing", {"path": "w", "name": "go", "ordinal": 0}),
            ("emit", {"path": "e", "ordinal": 0, "name": ""}),
            ("locks/acquire", {"path": "l", "ordinal": 0, "group": ""})):
        reply = await srv.in_run(grant, what, **fields)
        assert reply.status == 400, (what, fields, reply.text)
        reply.refused(400, "invalid_argument")
    for token in (None, "not-a-uuid"):
        body = {"claim_token": token, "outcome": "succeeded"}
        (await srv.agent(f"/runs/{grant['run_id']}/finish", body)).refused(
            400, "invalid_argument")
    (await srv.in_run(grant, "state/frobnicate", key="k", path="s/k/0", name="k",
                      ordinal=0)).refused(404, "not_found")
    assert await srv.status(grant["run_id"]) == "running"  # none of it touched the run


async def test_claim_refuses_a_malformed_wait_or_capabilities(srv: Server) -> None:
    for body in ({"agent_id": "a", "wait": "soon"}, {"agent_id": "a", "capabilities": 5}):
        (await srv.agent("/claim", body)).refused(400, "invalid_argument")


async def test_integers_out_of_range_are_400(srv: Server) -> None:
    grant = await srv.claim_run(await srv.submit())
    big = 2**40
    for what, fields in (("steps", {**_step("step/a"), "ordinal": big}),
                         ("steps", {**_step("step/b"), "exit_code": big}),
                         ("finish", {"outcome": "failed", "exit_code": big}),
                         ("activities", {"path": "a", "name": "a", "argv": ["x"],
                                         "retries": big})):
        (await srv.in_run(grant, what, **fields)).refused(400, "invalid_argument")


async def test_durations_out_of_range_are_400(srv: Server) -> None:
    grant = await srv.claim_run(await srv.submit())
    for what, fields in (("park", {"path": "s", "ordinal": 0, "seconds": 1e300}),
                         ("waits/signal", {"path": "w", "name": "go", "ordinal": 0,
                                           "timeout": 1e300})):
        (await srv.in_run(grant, what, **fields)).refused(400, "invalid_argument")


async def test_fields_of_the_wrong_type_are_400(srv: Server) -> None:
    grant = await srv.claim_run(await srv.submit())
    for what, fields in (("logs", {"data": 5}),
                         ("steps", {**_step("step/a"), "label": {"a": 1}})):
        (await srv.in_run(grant, what, **fields)).refused(400, "invalid_argument")
