"""A workflow's input_schema is checked on every trigger, not only the start route: a
webhook with a bad input is answered 422 and the delivery recorded as refused; a
schedule's tick records the refusal and fires nothing."""

from __future__ import annotations

import json

from tests.server.conftest import Server
from tests.server.test_triggers import PUSH, deliver, fire, hook, put_workflow, runs_of, schedule

# The webhook's run gets {"trigger": {...}}: this schema wants the trigger's ref to be main.
MAIN_ONLY = {"type": "object", "required": ["trigger"], "properties": {"trigger": {
    "type": "object", "required": ["ref"], "properties": {"ref": {"const": "refs/heads/main"}}}}}


def doc(schema: dict) -> str:
    return json.dumps({"version": "cryosleep-graph/v1", "input_schema": schema,
                       "nodes": [{"id": "a", "type": "wait", "config": {"signal": "go"}}]})


async def test_a_webhook_with_a_bad_input_gets_422_and_no_run(srv: Server) -> None:
    await put_workflow(srv, "deploy", doc(MAIN_ONLY), "deploy.json")
    made = await hook(srv, "gh", workflow="deploy")
    status, got = await deliver(srv, made["path"], {**PUSH, "ref": "refs/heads/dev"},
                                secret=made["secret"])
    assert status == 422, got
    assert got["error"]["code"] == "input_refused"
    said = got["error"]["message"]
    assert said.startswith("input:") and "refs/heads/main" in said
    assert await runs_of(srv, "deploy") == []
    rows = (await srv.user("GET", "/webhook-deliveries")).ok()["deliveries"]
    assert [r["outcome"] for r in rows] == ["refused"]
    status, got = await deliver(srv, made["path"], PUSH, secret=made["secret"])
    assert (status, got["outcome"]) == (201, "started")


async def test_a_schedule_tick_with_a_bad_input_records_the_refusal(srv: Server) -> None:
    needs_region = {"type": "object", "required": ["region"],
                    "properties": {"region": {"enum": ["eu", "us"]}}}
    await put_workflow(srv, "nightly", doc(needs_region), "nightly.json")
    (await srv.user("POST", "/schedules", {"name": "bad", "workflow": "nightly",
                                           "every": "60s", "input": {"region": "mars"}})).ok(201)
    assert await fire(srv, later=120) == []
    assert await runs_of(srv, "nightly") == []
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT last_refusal, last_run_id FROM cryo.schedules"
                                 " WHERE name = 'bad'")
        refusal, last_run = await cur.fetchone()
    assert refusal.startswith("input:") and "mars" in refusal and last_run is None
    assert (await schedule(srv, "bad"))["next_fire_at"] is not None
