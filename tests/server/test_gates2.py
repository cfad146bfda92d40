"""Gates, finished (issue 39 item 7): a workflow's input_schema on every way a run starts
(an event handler's run fails at its first turn with CR227; a workflow node, a submitted
graph, and the start route share one check), the node-level keys' schema served to the
canvas and used by the document check, concurrency limits on YAML jobs and graph runs,
and an approval answer naming one item of a fanned-out node."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until
from tests.server.test_triggers import put_workflow

NEEDS_REGION = {"type": "object", "required": ["trigger"], "properties": {"trigger": {
    "type": "object", "properties": {"payload": {
        "type": "object", "required": ["region"],
        "properties": {"region": {"enum": ["eu", "us"]}}}}}}}


def waits_for_go(schema: dict[str, Any]) -> str:
    return graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1}}],
                 input_schema=schema)


async def test_an_event_handler_run_with_a_bad_input_fails_with_cr227(srv: Server) -> None:
    await put_workflow(srv, "on-deploy", waits_for_go(NEEDS_REGION), "d.json")
    (await srv.user("POST", "/handlers", {"name": "h", "event": "deploy",
                                          "workflow": "on-deploy"})).ok(201)
    # The publish stands whatever the handler's schema says; its run fails, visibly.
    (await srv.user("POST", "/events/deploy", {"payload": {"region": "mars"}})).ok(201)
    (await srv.user("POST", "/events/deploy", {"payload": {"region": "eu"}})).ok(201)

    async def handler_runs() -> list[dict[str, Any]]:
        got = (await srv.user("GET", "/runs?workflow=on-deploy&limit=10")).ok()["runs"]
        return sorted(got, key=lambda r: r["id"])

    for _ in range(400):
        runs = await handler_runs()
        if len(runs) == 2 and all(ended(r) for r in runs):
            break
        await asyncio.sleep(0.05)
    shown = [await srv.show(r["id"]) for r in await handler_runs()]
    by_status = {r["status"]: r for r in shown}
    assert set(by_status) == {"failed", "succeeded"}, [r["status"] for r in shown]
    bad = by_status["failed"]
    assert bad["error"].startswith("CR227 input: field trigger.payload.region"), bad["error"]
    assert "mars" in bad["error"]
    assert nodes_of(bad)["a"]["status"] == "skipped"  # nothing ran on the bad input


async def test_a_workflow_node_with_a_bad_input_fails_naming_the_field(srv: Server) -> None:
    child = graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "c", "value": 1}}],
                  input_schema={"type": "object", "required": ["env"],
                                "properties": {"env": {"enum": ["prod", "dev"]}}})
    await put_workflow(srv, "child", child, "c.json")
    parent = graph([{"id": "call", "type": "workflow",
                     "config": {"graph": "child", "input": {"env": "moon"}}}])
    run = await until(srv, await submit_graph(srv, parent), ended)
    assert run["status"] == "failed"
    assert nodes_of(run)["call"]["error"].startswith("input: field env: 'moon'"), run
    assert (await srv.user("GET", "/runs?workflow=child&limit=5")).ok()["runs"] == []


async def test_a_submitted_graph_is_checked_against_its_own_input_schema(srv: Server) -> None:
    doc = graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "s", "value": 1}}],
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    said = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json",
                                             "input": {"n": "three"}})).refused(
        422, "input_refused")
    assert said.startswith("input: field n:"), said
    await submit_graph(srv, doc, input={"n": 3})


async def test_the_canvas_gets_the_node_keys_schema(srv: Server) -> None:
    got = (await srv.user("GET", "/api/v1/graphs/node-types")).ok()
    keys = got["node_keys"]["properties"]
    assert {"if", "retry", "concurrency", "fan_out", "continue_on_error", "always"} <= set(keys)
    form = next(f for f in keys["concurrency"]["anyOf"] if "group" in f.get("properties", {}))
    limit = form["properties"]["limit"]
    assert limit["minimum"] == 1 and keys["concurrency"]["description"]


async def test_a_bad_concurrency_limit_is_a_400_naming_the_field(srv: Server) -> None:
    doc = graph([{"id": "d", "type": "shell", "config": {"run": "true"},
                  "concurrency": {"group": "deploy", "limit": 0}}])
    said = (await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})).refused(
        400, "invalid_argument")
    assert "node d: concurrency.limit:" in said and "minimum of 1" in said, said


async def _at_most_two_hold(srv: Server, runs: list[str]) -> None:
    """Two of the three hold the group and the third waits for it, by state; then, as
    each holder ends, never more than two hold it, and all three succeed."""
    async def substates() -> list[str]:
        return sorted([str((await srv.show(i))["substate"]) for i in runs])

    want = ["awaiting-lease", "running-nodes", "running-nodes"]
    for _ in range(400):
        if await substates() == want:
            break
        await asyncio.sleep(0.05)
    assert await substates() == want
    grants = [await srv.claim(), await srv.claim()]
    assert None not in grants and await srv.claim() is None  # the third waits
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT count(*) FROM cryo.leases WHERE grp = 'deploy'")
        assert (await cur.fetchone())[0] == 2
    await srv.finish(grants[0])  # type: ignore[arg-type]
    third = None
    for _ in range(400):
        if (third := await srv.claim()) is not None:
            break
        await asyncio.sleep(0.05)
    assert third is not None
    for g in (grants[1], third):
        await srv.finish(g)  # type: ignore[arg-type]
    assert [(await until(srv, i, ended))["status"] for i in runs] == ["succeeded"] * 3


async def test_a_yaml_job_limit_of_two_runs_two_at_once_across_runs(srv: Server) -> None:
    pipeline = ("version: cryosleep/pipeline/v1\njobs:\n  ship:\n"
                "    concurrency: {group: deploy, limit: 2}\n    steps:\n      - run: echo ship\n")
    runs = [await srv.submit(pipeline, filename="p.yaml") for _ in range(3)]
    await _at_most_two_hold(srv, runs)


async def test_a_graph_level_limit_of_two_admits_two_runs_at_once(srv: Server) -> None:
    doc = graph([{"id": "ship", "type": "shell", "config": {"run": "echo ship"}}],
                concurrency={"group": "deploy", "limit": 2})
    runs = [await submit_graph(srv, doc) for _ in range(3)]

    # The run's own lease admits it: two are driven and each starts its job; the third
    # waits to be admitted, so no job of it is there to claim.
    grants: list[dict[str, Any]] = []
    for _ in range(400):
        got = await srv.claim()
        if got is not None:
            grants.append(got)
        if len(grants) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(grants) == 2
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT count(*) FROM cryo.leases WHERE grp = 'deploy'")
        assert (await cur.fetchone())[0] == 2
    assert await srv.claim() is None  # the third run holds no lease, so no job of it
    await srv.finish(grants[0])
    third = None
    for _ in range(400):
        if (third := await srv.claim()) is not None:
            break
        await asyncio.sleep(0.05)
    assert third is not None
    for g in (grants[1], third):
        await srv.finish(g)
    assert [(await until(srv, i, ended))["status"] for i in runs] == ["succeeded"] * 3


FANNED = graph([{"id": "ok", "type": "approval", "fan_out": {"items": "input.xs"},
                 "config": {"fields": {}}}])
XS = {"xs": [1, 2]}


async def test_an_answer_names_one_item_of_a_fanned_out_approval(srv: Server) -> None:
    run_id = await submit_graph(srv, FANNED, input=XS)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    got = (await srv.user("POST", f"/runs/{run_id}/approvals/ok?item=1", {})).ok()
    assert (got["approved"], got["item"]) == (True, 1)
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok?item=1", {})).refused(409, "run_finished")
    run = await srv.show(run_id)
    assert run["status"] != "succeeded" and run["substate"] == "awaiting-approval", run
    done = await srv.cli("approve", run_id, "ok", "--json", "{}", "--item", "0")
    assert done.returncode == 0 and "ok item 0" in done.stdout, done.stderr
    assert (await until(srv, run_id, ended))["status"] == "succeeded"


async def test_an_answer_naming_no_item_answers_every_waiting_one(srv: Server) -> None:
    run_id = await submit_graph(srv, FANNED, input=XS)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok", {})).ok()
    assert (await until(srv, run_id, ended))["status"] == "succeeded"
    rejected = await submit_graph(srv, FANNED, input=XS)
    await until(srv, rejected, lambda r: r["substate"] == "awaiting-approval")
    (await srv.user("POST", f"/runs/{rejected}/approvals/ok/reject?item=0", {})).ok()
    run = await until(srv, rejected, ended)
    assert run["status"] == "failed"
    assert json.dumps(run).count("rejected by") >= 1
