"""Approvals by N approvers of a role or group with a timeout, and graph concurrency of N
per group, through the in-process server and its graph driver."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until


def approval(**config: Any) -> str:
    return graph([{"id": "ok", "type": "approval", "config": {"fields": {}, **config}},
                  {"id": "after", "type": "state",
                   "config": {"op": "set", "key": "after", "value": 1}}], [("ok", "after")])


async def waiting(srv: Server, run_id: str) -> dict[str, Any]:
    return await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")


async def test_two_approvers_one_is_not_enough_and_nobody_counts_twice(srv: Server) -> None:
    run_id = await submit_graph(srv, approval(approvers=2))
    await waiting(srv, run_id)
    path = f"/runs/{run_id}/approvals/ok"
    first = (await srv.user("POST", path, {})).ok()
    assert (first["approved"], first["approvals"], first["needed"]) == (False, 1, 2)
    run = await srv.show(run_id)
    assert run["substate"] == "awaiting-approval"
    assert nodes_of(run)["ok"]["status"] == "waiting"
    assert [a["by"] for a in nodes_of(run)["ok"]["approval"]["approvals"]] == ["dev"]
    (await srv.user("POST", path, {})).refused(409, "approval_answered")
    second = await srv.make_token("member", login="ann")
    got = (await srv.user("POST", path, {}, token=second)).ok()
    assert (got["approved"], got["approvals"]) == (True, 2)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded"
    assert nodes_of(run)["ok"]["output"]["approved_by"] == "ann"


async def test_one_rejection_rejects_whatever_approvals_came_first(srv: Server) -> None:
    run_id = await submit_graph(srv, approval(approvers=2))
    await waiting(srv, run_id)
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok", {})).ok()
    other = await srv.make_token("member", login="bob")
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok/reject", {"comment": "no"},
                    token=other)).ok()
    assert (await until(srv, run_id, ended))["status"] == "failed"


async def test_an_approver_outside_the_role_is_refused(srv: Server) -> None:
    run_id = await submit_graph(srv, approval(role="admin"))
    await waiting(srv, run_id)
    path = f"/runs/{run_id}/approvals/ok"
    member = await srv.make_token("member", login="carl")
    (await srv.user("POST", path, {}, token=member)).refused(403, "not_an_approver")
    (await srv.user("POST", f"{path}/reject", {}, token=member)).refused(403, "not_an_approver")
    done = await srv.cli("approve", run_id, "ok", "--json", "{}", token=member)
    assert done.returncode == 2 and "needs role admin" in done.stderr
    assert (await srv.user("POST", path, {})).ok()["approved"]  # the owner ranks above admin
    assert (await until(srv, run_id, ended))["status"] == "succeeded"


async def test_an_approval_restricted_to_a_group_refuses_a_token(srv: Server) -> None:
    run_id = await submit_graph(srv, approval(group="release-managers"))
    await waiting(srv, run_id)
    # A token carries no OIDC groups: only a session signed in with the group answers.
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok", {})).refused(403, "not_an_approver")


async def test_a_timed_out_approval_takes_its_default_answer(srv: Server) -> None:
    rejected = await submit_graph(srv, approval(timeout="1s"))
    approved = await submit_graph(srv, approval(timeout="1s", on_timeout="approve"))
    got = await until(srv, rejected, ended, timeout=60)
    assert got["status"] == "failed"
    assert "timed out" in nodes_of(got)["ok"]["error"]
    got = await until(srv, approved, ended, timeout=60)
    assert got["status"] == "succeeded"
    assert nodes_of(got)["ok"]["output"]["timed_out"] is True


async def test_a_node_limit_of_two_runs_two_at_once(srv: Server) -> None:
    doc = graph([{"id": "deploy", "type": "shell",
                  "concurrency": {"group": "deploy-{{ input.env }}", "limit": 2},
                  "config": {"run": "echo deploying"}}])
    runs = [await submit_graph(srv, doc, input={"env": "eu"}) for _ in range(3)]

    async def substates() -> list[str]:
        return sorted([str((await srv.show(i))["substate"]) for i in runs])

    want = ["awaiting-lease", "running-nodes", "running-nodes"]
    for _ in range(400):
        if await substates() == want:
            break
        await asyncio.sleep(0.05)
    assert await substates() == want
    first = await srv.claim()
    assert first is not None
    second = await srv.claim()
    assert second is not None
    assert await srv.claim() is None  # the third waits for the group
    await srv.finish(first)
    third = None
    for _ in range(400):
        third = await srv.claim()
        if third is not None:
            break
        await asyncio.sleep(0.05)
    assert third is not None
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT count(*) FROM cryo.lease_holders")
        assert (await cur.fetchone())[0] <= 2
    for g in (second, third):
        await srv.finish(g)
    assert [(await until(srv, i, ended))["status"] for i in runs] == ["succeeded"] * 3
