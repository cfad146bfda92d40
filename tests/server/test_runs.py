"""User routes on runs: submit (idempotent, admitted by concurrency group), list, show,
logs (plain and followed) and cancel, plus stored workflows."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from tests.server.conftest import Server


async def test_submit_show_and_list(srv: Server) -> None:
    got = (await srv.user("POST", "/runs", {"source": "echo hi\n", "filename": "hello.sh",
                                            "input": {"n": 5}})).ok(201)
    assert got["created"] is True and got["status"] == "pending" and got["position"] is None
    run_id = got["run_id"]
    assert run_id.startswith("dev:default:run-")
    run = await srv.show(run_id)
    assert (run["id"], run["org"], run["project"], run["filename"]) == (
        run_id, "dev", "default", "hello.sh")
    assert (run["status"], run["attempt"], run["finished_at"]) == ("pending", 0, None)
    assert [e["kind"] for e in run["history"]] == ["submitted"] and run["outputs"] == {}
    second = await srv.submit("true\n")
    listed = (await srv.user("GET", "/runs", role="viewer")).ok()["runs"]
    assert [r["id"] for r in listed] == [second, run_id]  # newest first
    assert [r["id"] for r in (await srv.user("GET", "/runs?limit=1")).ok()["runs"]] == [second]
    grant = await srv.claim_run(run_id)
    assert grant["input"] == {"n": 5} and grant["source"] == "echo hi\n"


async def test_idempotency_key_returns_the_first_run(srv: Server) -> None:
    body = {"source": "echo once\n", "filename": "once.sh", "idempotency_key": "order-42"}
    first = (await srv.user("POST", "/runs", body)).ok(201)
    again = (await srv.user("POST", "/runs", {**body, "source": "echo other\n"})).ok(200)
    other = (await srv.user("POST", "/runs", {**body, "idempotency_key": "order-43"})).ok(201)
    assert again == {**first, "created": False}
    assert other["run_id"] != first["run_id"]
    assert len((await srv.user("GET", "/runs")).ok()["runs"]) == 2
    grant = await srv.claim_run(first["run_id"])
    assert grant["source"] == "echo once\n"  # the repeat did not replace the script
    assert (await srv.show(first["run_id"]))["idempotency_key"] == "order-42"
    script = srv.tmp / "once.sh"
    script.write_text("echo once\n")
    done = await srv.cli("submit", str(script), "--idempotency-key", "order-42")
    assert done.stdout == first["run_id"] + "\n", done.stderr


MALFORMED_SUBMITS: list[tuple[Any, str]] = [
    ({"filename": "a.sh"}, "source and filename"),
    ({"source": "x", "filename": ""}, "source and filename"),
    ({"source": 1, "filename": "a.sh"}, "source and filename"),
    ({"source": "x", "filename": "a.sh", "interpreter": 3}, "interpreter"),
    ({"source": "x", "filename": "a.sh", "idempotency_key": 7}, "idempotency_key"),
    ({"source": "x", "filename": "a.sh", "idempotency_key": ""}, "idempotency key"),
    ({"source": "x", "filename": "a.sh", "untrusted": "yes"}, "untrusted"),
    ({"source": "x", "filename": "a.sh", "concurrency": 5}, "concurrency"),
    ({"source": "x", "filename": "a.sh", "concurrency": "g", "policy": "sometimes"}, "policy"),
    ({"source": "x", "filename": "a.sh", "concurrency": ""}, "concurrency group"),
    ([1, 2], "JSON object"),
]


async def test_submit_refuses_a_malformed_body(srv: Server) -> None:
    for body, words in MALFORMED_SUBMITS:
        message = (await srv.user("POST", "/runs", body)).refused(400, "invalid_argument")
        assert words in message, (body, message)
    assert (await srv.user("GET", "/runs")).ok()["runs"] == []


async def test_submit_refuses_a_body_that_is_not_json(srv: Server) -> None:
    reply = await srv.user("POST", "/runs", data=b"{not json")
    assert "JSON" in reply.refused(400, "invalid_argument")


async def test_only_members_submit_and_cancel(srv: Server) -> None:
    body = {"source": "x", "filename": "a.sh"}
    assert "viewer" in (await srv.user("POST", "/runs", body, role="viewer")).refused(
        403, "forbidden")
    run_id = (await srv.user("POST", "/runs", body, role="member")).ok(201)["run_id"]
    (await srv.user("POST", f"/runs/{run_id}/cancel", {}, role="viewer")).refused(403, "forbidden")
    assert (await srv.user("GET", f"/runs/{run_id}", role="viewer")).ok()["status"] == "pending"
    got = (await srv.user("POST", f"/runs/{run_id}/cancel", {}, role="member")).ok()
    assert got["cancel"] == "cancelled" and got["status"] == "cancelled"


async def test_unknown_and_foreign_runs_are_404(srv: Server) -> None:
    run_id = await srv.submit()
    for path in ("/runs/dev:default:run-0000000000000000",
                 "/runs/dev:default:run-0000000000000000/logs"):
        assert "no run" in (await srv.user("GET", path)).refused(404, "run_not_found")
    (await srv.user("POST", "/runs/dev:default:run-0000000000000000/cancel", {})).refused(
        404, "run_not_found")
    async with await srv.connect() as conn:
        await conn.execute("SELECT cryo.ensure_project('dev', 'other', 'Other')")
    # The run exists, but not in the project of the path.
    other = f"/api/v1/orgs/dev/projects/other/runs/{run_id}"
    (await srv.user("GET", other)).refused(404, "run_not_found")
    (await srv.user("POST", other + "/cancel", {})).refused(404, "run_not_found")
    assert await srv.status(run_id) == "pending"


async def test_cancel_pending_running_parked_and_finished_runs(srv: Server) -> None:
    pending = await srv.submit()
    assert (await srv.user("POST", f"/runs/{pending}/cancel", {})).ok()["cancel"] == "cancelled"
    assert await srv.claim() is None  # a cancelled run is never handed out

    running = await srv.submit()
    grant = await srv.claim_run(running)
    got = (await srv.user("POST", f"/runs/{running}/cancel", {})).ok()
    assert (got["cancel"], got["status"]) == ("cancelling", "running")
    assert await srv.log(grant, b"still going\n") is True  # the agent learns on its next flush
    await srv.finish(grant, "cancelled", None)
    assert await srv.status(running) == "cancelled"

    parked = await srv.submit()
    (await srv.in_run(await srv.claim_run(parked), "park", path="sleep//0", ordinal=0,
                      seconds=3600)).ok()
    assert (await srv.user("POST", f"/runs/{parked}/cancel", {})).ok()["cancel"] == "cancelled"
    await srv.tick(later=7200)
    assert await srv.status(parked) == "cancelled"  # the due sleep did not wake it

    for run_id in (pending, running, parked):
        message = (await srv.user("POST", f"/runs/{run_id}/cancel", {})).refused(
            409, "run_finished")
        assert "already finished" in message


async def test_cancel_reaches_children(srv: Server) -> None:
    parent = await srv.submit()
    grant = await srv.claim_run(parent)
    child = (await srv.in_run(grant, "spawn", path="spawn//0", ordinal=0, filename="c.sh",
                              source="echo child\n")).ok()["run_id"]
    unrelated = await srv.submit()
    assert await srv.status(child) == "pending"
    assert (await srv.user("POST", f"/runs/{parent}/cancel", {})).ok()["cancel"] == "cancelling"
    assert await srv.status(child) == "cancelled"
    assert await srv.status(unrelated) == "pending"
    assert await srv.log(grant, b"") is True


async def test_logs_read_after_and_follow(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    await srv.log(grant, b"one\n")
    await srv.log(grant, b"")  # a heartbeat adds nothing
    await srv.log(grant, "two \u00e9\n".encode())
    reply = await srv.user("GET", f"/runs/{run_id}/logs", role="viewer")
    assert reply.ok() is None and reply.text == "one\ntwo \u00e9\n"
    follow = asyncio.create_task(srv.user("GET", f"/runs/{run_id}/logs?follow=1&after=1"))
    await asyncio.sleep(0.2)
    assert not follow.done()  # the run is live: the follow waits for more
    await srv.log(grant, b"three\n")
    await srv.finish(grant)
    followed = await asyncio.wait_for(follow, 10)
    assert followed.status == 200 and followed.text == "two \u00e9\nthree\n"
    (await srv.user("GET", f"/runs/{run_id}/logs?after=x")).refused(400, "invalid_argument")


async def test_logs_after_out_of_range_is_400(srv: Server) -> None:
    run_id = await srv.submit()
    reply = await srv.user("GET", f"/runs/{run_id}/logs?after=99999999999999999999999")
    reply.refused(400, "invalid_argument")


async def test_list_limit_must_be_an_integer(srv: Server) -> None:
    (await srv.user("GET", "/runs?limit=many")).refused(400, "invalid_argument")


async def test_list_limit_out_of_range_is_400(srv: Server) -> None:
    (await srv.user("GET", "/runs?limit=99999999999")).refused(400, "invalid_argument")


async def test_submit_refuses_a_nul_in_a_name(srv: Server) -> None:
    for field in ("filename", "idempotency_key", "concurrency"):
        body = {"source": "x", "filename": "a.sh", field: "a\u0000b"}
        (await srv.user("POST", "/runs", body)).refused(400, "invalid_argument")


# -- concurrency groups --------------------------------------------------------------------

async def test_the_101st_queued_submit_is_rejected(srv: Server) -> None:
    body = {"source": "cryopg sleep 1h\n", "filename": "hold.sh", "concurrency": "busy"}
    made = [(await srv.user("POST", "/runs", body)).ok(201) for _ in range(101)]
    assert made[0]["status"] == "pending" and made[0]["position"] is None
    assert [m["status"] for m in made[1:]] == ["queued"] * 100
    assert [m["position"] for m in made[1:]] == list(range(1, 101))
    message = (await srv.user("POST", "/runs", body)).refused(409, "queue_full")
    assert "100" in message
    assert len((await srv.user("GET", "/runs?limit=200")).ok()["runs"]) == 101
    free = {**body, "concurrency": "other"}
    assert (await srv.user("POST", "/runs", free)).ok(201)["status"] == "pending"


async def test_policies_skip_cancel_queued_and_cancel_running(srv: Server) -> None:
    def body(policy: str | None = None) -> dict[str, Any]:
        return {"source": "sleep 1\n", "filename": "slow.sh", "concurrency": "g",
                "policy": policy}

    holder = (await srv.user("POST", "/runs", body())).ok(201)["run_id"]
    holding = await srv.claim_run(holder)
    waiter = (await srv.user("POST", "/runs", body())).ok(201)
    assert (waiter["status"], waiter["position"]) == ("queued", 1)
    assert await srv.claim() is None  # a queued run is not claimable

    skipped = (await srv.user("POST", "/runs", body("skip"))).ok(200)
    assert skipped == {"run_id": None, "created": False, "skipped": True}
    assert len((await srv.user("GET", "/runs")).ok()["runs"]) == 2  # skip made nothing

    drainer = (await srv.user("POST", "/runs", body("cancel-queued"))).ok(201)
    assert await srv.status(waiter["run_id"]) == "cancelled"
    assert (drainer["status"], drainer["position"]) == ("queued", 1)

    usurper = (await srv.user("POST", "/runs", body("cancel-running"))).ok(201)
    assert usurper["status"] == "pending"  # it holds the group at once
    assert await srv.log(holding, b"") is True  # the holder is told to stop
    await srv.finish(holding, "cancelled", None)
    assert await srv.status(holder) == "cancelled"
    assert await srv.status(drainer["run_id"]) == "queued"  # behind the usurper

    await srv.finish(await srv.claim_run(usurper["run_id"]))
    assert await srv.status(drainer["run_id"]) == "pending"  # admitted after it
    await srv.claim_run(drainer["run_id"])


async def test_cli_submit_with_skip_exits_3_and_says_so(srv: Server) -> None:
    (await srv.user("POST", "/runs", {"source": "x", "filename": "a.sh",
                                      "concurrency": "g"})).ok(201)
    script = srv.tmp / "slow.sh"
    script.write_text("sleep 1\n")
    done = await srv.cli("submit", str(script), "--concurrency", "g", "--policy", "skip")
    assert (done.returncode, done.stdout) == (3, "") and "skipped" in done.stderr
    assert len((await srv.user("GET", "/runs")).ok()["runs"]) == 1


# -- workflows -----------------------------------------------------------------------------

async def test_a_stored_workflow_runs_from_an_sql_submit(srv: Server) -> None:
    body = {"source": "echo nightly\n", "filename": "nightly.sh"}
    (await srv.user("PUT", "/workflows/nightly", body, role="viewer")).refused(403, "forbidden")
    (await srv.user("PUT", "/workflows/nightly", {"filename": "x.sh"})).refused(
        400, "invalid_argument")
    assert (await srv.user("PUT", "/workflows/nightly", body, role="member")).ok() == {
        "name": "nightly", "kind": "script", "version": 1}
    async with await srv.connect() as app:  # an application's own transaction
        async with app.transaction():
            cur = await app.execute("SELECT cryo.submit_run('dev', 'default', 'nightly', "
                                    "'{\"n\": 1}'::jsonb)")
            row = await cur.fetchone()
        with pytest.raises(psycopg.Error):
            await app.execute("SELECT cryo.submit_run('dev', 'default', 'nope')")
    assert row is not None
    run = await srv.show(row[0])
    assert (run["workflow"], run["filename"], run["status"]) == ("nightly", "nightly.sh", "pending")
    grant = await srv.claim_run(row[0])
    assert (grant["source"], grant["input"]) == ("echo nightly\n", {"n": 1})
