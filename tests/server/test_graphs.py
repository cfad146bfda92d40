"""The graph tier through the server: documents checked at submit, the driver running
state and wait nodes with no agent, agent-bound nodes as jobs (driven by hand here),
if/skip, fan-out, retry, approvals, rerun --from, and the nodes in a run's JSON."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.server.conftest import Server


def graph(nodes: list[dict[str, Any]], edges: list[tuple[str, str]] = (), **top: Any) -> str:
    return json.dumps({"version": "cryosleep-graph/v1", "nodes": nodes,
                       "edges": [{"from": a, "to": b} for a, b in edges], **top})


async def submit_graph(srv: Server, doc: str, **fields: Any) -> str:
    return await srv.submit(doc, filename="g.json", **fields)


async def until(srv: Server, run_id: str, pred: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = await srv.show(run_id)
        if pred(run):
            return run
        assert time.monotonic() < deadline, f"timed out; run is {json.dumps(run)[:800]}"
        await asyncio.sleep(0.05)


def nodes_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in run["graph"]["nodes"]}


def ended(run: dict[str, Any]) -> bool:
    return run["status"] in ("succeeded", "failed", "cancelled")


LEDGER = graph([
    {"id": "claim", "type": "state",
     "config": {"op": "add", "key": {"$template": "seen-{{ input.order_id }}"}, "value": True,
                "entity": "ledger"}},
    {"id": "process", "type": "shell", "if": "nodes.claim.output.claimed",
     "config": {"run": {"$template": "echo processing {{ input.order_id }}"}}},
], [("claim", "process")])


async def test_the_dedup_ledger_runs_once_per_order(srv: Server) -> None:
    first = await submit_graph(srv, LEDGER, input={"order_id": 42})
    run = await until(srv, first, lambda r: nodes_of(r)["process"]["status"] == "running")
    assert nodes_of(run)["claim"]["output"] == {"claimed": True}
    job = await srv.claim()
    assert job is not None and "echo processing 42" in job["source"]
    assert "CRYO_IDEMPOTENCY_KEY" in job["source"]
    await srv.log(job, b"processing 42\r\n")
    await srv.finish(job)
    run = await until(srv, first, ended)
    assert run["status"] == "succeeded"
    shell = {"stdout": "processing 42\n", "text": "processing 42", "exit_code": 0}
    assert nodes_of(run)["process"]["output"] == shell
    assert run["outputs"]["output"] == {"process": shell}

    second = await submit_graph(srv, LEDGER, input={"order_id": 42})
    run = await until(srv, second, ended)
    assert run["status"] == "succeeded"
    assert nodes_of(run)["claim"]["output"] == {"claimed": False}
    assert nodes_of(run)["process"]["status"] == "skipped"
    assert await srv.claim() is None  # nothing was dispatched
    kinds = [e["kind"] for e in run["history"]]
    assert "node_skipped" in kinds and "node_completed" in kinds


async def test_state_and_wait_nodes_need_no_agent(srv: Server) -> None:
    doc = graph([
        {"id": "set", "type": "state",
         "config": {"op": "set", "key": "k", "value": {"$expr": "input.v"}}},
        {"id": "nap", "type": "wait", "config": {"sleep": "0s"}},
        {"id": "get", "type": "state", "config": {"op": "get", "key": "k"}},
        {"id": "bump", "type": "state",
         "config": {"op": "incr", "key": "n", "entity": "c", "by": 2}},
    ], [("set", "nap"), ("nap", "get"), ("get", "bump")],
        output={"$expr": "nodes.get.output.value"})
    run_id = await submit_graph(srv, doc, input={"v": "hello"})
    await srv.tick()
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded", run
    assert run["outputs"]["output"] == "hello"
    got = nodes_of(run)
    assert got["set"]["output"] == {"version": 1}
    assert got["nap"]["output"] == {}
    assert got["bump"]["output"] == {"value": 2, "version": 1}


async def test_validation_errors_are_one_line_and_store_nothing(srv: Server) -> None:
    bad = [
        (graph([{"id": "a", "type": "shell", "config": {"run": "x"}}], [("a", "b")]), "edges"),
        (graph([{"id": "a", "type": "nope"}]), "node a"),
        (graph([{"id": "a", "type": "shell", "config": {"run": "x"}, "if": "nodes.zz.output"}]),
         "no node 'zz'"),
        (graph([{"id": "a", "type": "shell", "config": {"run": "x"}, "if": "input.a =="}]),
         "node a: if"),
        (graph([{"id": "a", "type": "state", "config": {"op": "add", "key": "k"}}]), "entity"),
        (graph([{"id": "a", "type": "state", "config": {"op": "set", "key": "_cryo/x",
                                                         "value": 1}}]), "reserved"),
        (graph([{"id": "a", "type": "shell", "config": {"run": "x"}},
                {"id": "b", "type": "shell", "config": {"run": "x"}}],
               [("a", "b"), ("b", "a")]), "cycle"),
        (graph([{"id": "a", "type": "wait", "config": {"sleep": "1s", "signal": "x"}}]),
         "exactly one"),
    ]
    for doc, words in bad:
        reply = await srv.user("POST", "/runs", {"source": doc, "filename": "g.json"})
        message = reply.refused(400, "invalid_argument")
        assert words in message and "\n" not in message, message
    assert (await srv.user("GET", "/runs")).ok()["runs"] == []


async def test_fan_out_keys_differ_and_outputs_keep_their_order(srv: Server) -> None:
    doc = graph([{"id": "each", "type": "shell", "fan_out": {"items": {"$expr": "input.xs"},
                                                          "max_parallel": 2},
                  "config": {"run": {"$template": "echo {{ item }}"}}}])
    run_id = await submit_graph(srv, doc, input={"xs": ["a", "b", "c"]})
    keys = []
    for expect in ("a", "b", "c"):
        job = None
        deadline = time.monotonic() + 30
        while job is None and time.monotonic() < deadline:
            job = await srv.claim()
            if job is None:
                await srv.tick()  # the backstop a real server runs every second
                await asyncio.sleep(0.02)
        assert job is not None
        assert f"echo {expect}" in job["source"]
        keys.append(next(ln for ln in job["source"].splitlines() if "IDEMPOTENCY" in ln))
        await srv.log(job, f"{expect}\n".encode())
        await srv.finish(job)
    run = await until(srv, run_id, ended)
    assert len(set(keys)) == 3
    assert [o["stdout"] for o in nodes_of(run)["each"]["output"]] == ["a\n", "b\n", "c\n"]


async def test_a_failed_node_is_retried_then_fails_the_run(srv: Server) -> None:
    doc = graph([{"id": "flaky", "type": "shell", "retry": {"attempts": 2, "backoff": "0s"},
                  "config": {"run": "exit 3"}},
                 {"id": "after", "type": "shell", "config": {"run": "echo never"}}],
                [("flaky", "after")])
    run_id = await submit_graph(srv, doc)
    sources = []
    for _ in range(2):
        job = None
        deadline = time.monotonic() + 30
        while job is None and time.monotonic() < deadline:
            job = await srv.claim()
            if job is None:
                await srv.tick()
                await asyncio.sleep(0.05)
        assert job is not None
        sources.append(job["source"])
        await srv.finish(job, "failed", 3)
    run = await until(srv, run_id, ended)
    assert run["status"] == "failed" and "flaky" in run["error"]
    assert sources[0] == sources[1]  # same key across the retry
    got = nodes_of(run)
    # A finished run leaves no node pending: what never started was skipped.
    assert got["flaky"]["attempt"] == 2 and got["after"]["status"] == "skipped"
    assert got["after"]["error"] == "the run failed"
    assert await srv.claim() is None


async def test_an_approval_takes_a_valid_answer_only(srv: Server) -> None:
    doc = graph([{"id": "ok", "type": "approval", "config": {"fields": {
        "type": "object", "required": ["approve"],
        "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}}}}},
        {"id": "after", "type": "state", "if": "nodes.ok.output.approve",
         "config": {"op": "set", "key": "went", "value": True}}], [("ok", "after")])
    run_id = await submit_graph(srv, doc)
    run = await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    assert nodes_of(run)["ok"]["approval"]["fields"]["required"] == ["approve"]
    path = f"/runs/{run_id}/approvals/ok"
    bad = await srv.user("POST", path, {"approve": "yes"})
    assert "approve" in bad.refused(400, "invalid_argument")
    (await srv.user("POST", path, {"note": "x"})).refused(400, "invalid_argument")
    (await srv.user("POST", path, {"approve": True}, role="viewer")).refused(403, "forbidden")
    assert (await srv.user("POST", path, {"approve": True, "note": "lgtm"})).ok()["approved"]
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded"
    got = nodes_of(run)
    assert got["ok"]["output"] == {"approve": True, "note": "lgtm", "approved_by": "dev"}
    assert got["after"]["status"] == "succeeded"
    (await srv.user("POST", path, {"approve": True})).refused(409, "run_finished")


async def test_rerun_from_a_node_seeds_what_is_upstream(srv: Server) -> None:
    doc = graph([
        {"id": "count", "type": "state", "config": {"op": "incr", "key": "runs", "entity": "r"}},
        {"id": "again", "type": "state", "config": {"op": "incr", "key": "later", "entity": "r"}},
    ], [("count", "again")])
    run_id = await submit_graph(srv, doc)
    await until(srv, run_id, ended)
    got = (await srv.user("POST", f"/runs/{run_id}/rerun", {"from": "again"})).ok(201)
    rerun = await until(srv, got["id"], ended)
    nodes = nodes_of(rerun)
    assert nodes["count"]["status"] == "seeded" and nodes["count"]["output"]["value"] == 1
    assert nodes["again"]["status"] == "succeeded" and nodes["again"]["output"]["value"] == 2
    assert "node_seeded" in [e["kind"] for e in rerun["history"]]
    (await srv.user("POST", f"/runs/{run_id}/rerun", {"from": "nope"})).refused(404, "not_found")


async def test_signal_and_event_waits_take_their_payload(srv: Server) -> None:
    doc = graph([{"id": "go", "type": "wait", "config": {"signal": "go"}},
                 {"id": "ev", "type": "wait", "config": {"event": "shipped", "timeout": "1h"}}])
    run_id = await submit_graph(srv, doc)
    await until(srv, run_id, lambda r: r["status"] == "parked")
    (await srv.user("POST", f"/runs/{run_id}/signal/go", {"payload": {"n": 1}})).ok(201)
    (await srv.user("POST", "/events/shipped", {"payload": "box"})).ok(201)
    run = await until(srv, run_id, ended)
    got = nodes_of(run)
    assert got["go"]["output"] == {"n": 1} and got["ev"]["output"] == "box"


async def test_incr_and_cas_graphs_under_8_concurrent_runs_are_exact(srv: Server) -> None:
    bump = graph([{"id": "n", "type": "state",
                   "config": {"op": "incr", "key": "hits", "entity": "ctr"}}])
    seed = graph([{"id": "s", "type": "state",
                   "config": {"op": "set", "key": "doc", "value": 0, "entity": "cfg"}}])
    await until(srv, await submit_graph(srv, seed), ended)
    swap = graph([
        {"id": "read", "type": "state", "config": {"op": "get", "key": "doc", "entity": "cfg"}},
        {"id": "write", "type": "state", "config": {
            "op": "cas", "key": "doc", "entity": "cfg", "value": {"$expr": "run.id"},
            "expected": {"$expr": "nodes.read.output.version"}}}], [("read", "write")])
    ids = await asyncio.gather(*[submit_graph(srv, bump) for _ in range(8)],
                               *[submit_graph(srv, swap) for _ in range(8)])
    runs = [await until(srv, i, ended) for i in ids]
    assert all(r["status"] == "succeeded" for r in runs)
    values = sorted(nodes_of(r)["n"]["output"]["value"] for r in runs[:8])
    assert values == list(range(1, 9))  # every increment landed, none twice
    swapped = sum(nodes_of(r)["write"]["output"]["swapped"] for r in runs[8:])
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT version FROM cryo.state_cells WHERE key = 'doc'")
        assert (await cur.fetchone())[0] == 1 + swapped


async def test_a_node_concurrency_group_holds_one_instance_at_a_time(srv: Server) -> None:
    doc = graph([{"id": "deploy", "type": "shell", "concurrency": "deploy-{{ input.env }}",
                  "config": {"run": "echo deploying"}}])
    a = await submit_graph(srv, doc, input={"env": "eu"})
    b = await submit_graph(srv, doc, input={"env": "eu"})
    # Drivers run side by side, so either may take the group first; the other waits.
    subs = set()
    for _ in range(200):
        subs = {(await srv.show(i))["substate"] for i in (a, b)}
        if subs == {"running-nodes", "awaiting-lease"}:
            break
        await asyncio.sleep(0.05)
    assert subs == {"running-nodes", "awaiting-lease"}
    first = await srv.claim()
    assert first is not None
    await asyncio.sleep(0.3)
    assert await srv.claim() is None  # the other waits for the group
    await srv.finish(first)
    second = None
    deadline = time.monotonic() + 10
    while second is None and time.monotonic() < deadline:
        second = await srv.claim()
        await asyncio.sleep(0.05)
    assert second is not None and second["run_id"] != first["run_id"]
    await srv.finish(second)
    assert [(await until(srv, i, ended))["status"] for i in (a, b)] == ["succeeded"] * 2


async def test_a_state_node_the_database_refuses_fails_its_node_not_the_driver(
        srv: Server) -> None:
    # A refusal inside a turn (here a malformed entity name) must end the node with the
    # reason; it used to abort the turn's transaction, so the driver rolled back and
    # retried the same run forever.
    doc = graph([
        {"id": "bad", "type": "state",
         "config": {"op": "set", "key": "k", "entity": "no spaces allowed", "value": 1}},
        {"id": "after", "type": "state", "config": {"op": "get", "key": "k"}},
    ], [("bad", "after")])
    run_id = await submit_graph(srv, doc)
    run = await until(srv, run_id, ended)
    assert run["status"] == "failed", run
    bad = nodes_of(run)["bad"]
    assert bad["status"] == "failed" and "entity name" in (bad.get("error") or ""), bad
    assert nodes_of(run)["after"]["status"] != "succeeded"
