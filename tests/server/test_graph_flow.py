"""Loops with a bound, early stop and result caching (issue 39 item 7), in graphs and
YAML pipelines: a loop's iterations are recorded one instance each, stop_if ends the run
successfully with what had not started skipped, and a cache hit ends a node at once with
the stored output, never across the trust boundary."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

from tests.server.conftest import AGENT_CAPS, Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until


def _kinds(run: dict[str, Any]) -> list[str]:
    return [h["kind"] for h in run["history"]]


async def test_a_loop_runs_until_its_condition_holds_one_instance_an_iteration(
        srv: Server) -> None:
    doc = graph([
        {"id": "count", "type": "state", "config": {"op": "incr", "key": "n", "entity": "l"},
         "loop": {"until": "nodes.count.output.value >= 3", "max_iterations": 10}},
        {"id": "after", "type": "state", "config": {"op": "incr", "key": "after", "entity": "l"}},
    ], [("count", "after")])
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "succeeded", run
    count = nodes_of(run)["count"]
    assert count["status"] == "succeeded" and count["iterations"] == 3
    assert count["output"]["value"] == 3  # the last iteration's output
    assert nodes_of(run)["after"]["output"]["value"] == 1  # once, after the loop ended
    assert _kinds(run).count("node_iteration") == 2
    async with await srv.connect() as conn:
        rows = await (await conn.execute(
            "SELECT item, status FROM cryo.node_instances WHERE node_id = 'count' ORDER BY item"
        )).fetchall()
    assert rows == [(0, "succeeded"), (1, "succeeded"), (2, "succeeded")]


async def test_a_loop_that_reaches_max_iterations_fails_its_node(srv: Server) -> None:
    source = """\
version: cryosleep/pipeline/v1
jobs:
  poll:
    state: {op: incr, key: polls, entity: l}
    loop: {while: "nodes.poll.output.value < 100", max_iterations: 2}
"""
    run = await until(srv, await srv.submit(source, filename="p.yaml"), ended)
    assert run["status"] == "failed"
    poll = nodes_of(run)["poll"]
    assert poll["status"] == "failed" and poll["iterations"] == 2
    assert "max_iterations (2)" in poll["error"]


async def test_a_loop_of_jobs_gives_each_iteration_its_own_job_and_key(srv: Server) -> None:
    doc = graph([{"id": "try", "type": "shell",
                  "config": {"run": {"$template": "echo {{ node.iteration }}"}},
                  "loop": {"while": "node.iteration < 1", "max_iterations": 5}}])
    run_id = await submit_graph(srv, doc)
    keys = []
    for want in (1, 2):
        await until(srv, run_id, lambda r, n=want: len(nodes_of(r)["try"].get("runs", [])) == n)
        grant = await srv.claim()
        assert grant is not None
        keys.append(grant["source"])
        await srv.finish(grant)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded" and nodes_of(run)["try"]["iterations"] == 2
    assert "echo 0" in keys[0] and "echo 1" in keys[1]
    assert keys[0].split("CRYO_IDEMPOTENCY_KEY=")[1][:32] != keys[1].split(
        "CRYO_IDEMPOTENCY_KEY=")[1][:32]


async def test_stop_if_ends_the_run_successfully_and_skips_the_rest(srv: Server) -> None:
    doc = graph([
        {"id": "check", "type": "state", "config": {"op": "incr", "key": "c", "entity": "s"},
         "stop_if": "nodes.check.output.value == 1"},
        {"id": "next", "type": "state", "config": {"op": "incr", "key": "x", "entity": "s"}},
        {"id": "last", "type": "state", "config": {"op": "incr", "key": "y", "entity": "s"}},
    ], [("check", "next"), ("next", "last")])
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert run["status"] == "succeeded", run
    got = nodes_of(run)
    assert [got[n]["status"] for n in ("check", "next", "last")] == [
        "succeeded", "skipped", "skipped"]
    assert got["next"]["error"] == "stopped early: the stop_if of check held"
    assert "graph_stopped" in _kinds(run)
    # The second run's count is 2: stop_if does not hold, and the rest runs.
    run = await until(srv, await submit_graph(srv, doc), ended)
    assert [nodes_of(run)[n]["status"] for n in ("check", "next", "last")] == ["succeeded"] * 3


async def _job(srv: Server, run_id: str, caps: list[str] | None = None,
               token: str | None = None) -> dict[str, Any] | None:
    """The node's job, once the turn that made it committed; None when the node ended
    without one (a cache hit)."""
    run = await until(srv, run_id, lambda r: ended(r) or bool(nodes_of(r)["build"].get("runs")))
    if ended(run):
        return None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        got = await srv.claim(caps=caps, token=token)
        if got is not None:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("no job was handed out")


CACHED = graph([{"id": "build", "type": "shell", "config": {"run": "make"},
                 "cache": {"key": "build-{{ input.v }}", "ttl": "1h"}}])


async def test_a_cached_output_ends_the_node_at_once_until_its_ttl(srv: Server) -> None:
    first = await submit_graph(srv, CACHED, input={"v": 1})
    grant = await _job(srv, first)
    assert grant is not None
    await srv.log(grant, b"built v1\n")
    await srv.finish(grant)
    run = await until(srv, first, ended)
    assert nodes_of(run)["build"]["output"]["text"] == "built v1"
    assert not nodes_of(run)["build"].get("cached")
    # Same key: no job, the stored output, marked cached.
    second = await submit_graph(srv, CACHED, input={"v": 1})
    assert await _job(srv, second) is None
    run = await srv.show(second)
    node = nodes_of(run)["build"]
    assert run["status"] == "succeeded" and node["status"] == "succeeded"
    assert node["cached"] is True and node["output"]["text"] == "built v1"
    assert "node_cached" in _kinds(run)
    # Another key runs; so does the same key once its entry is older than the ttl.
    other = await submit_graph(srv, CACHED, input={"v": 2})
    grant = await _job(srv, other)
    assert grant is not None
    await srv.finish(grant)
    await until(srv, other, ended)
    async with await srv.connect() as conn:
        await conn.execute("UPDATE cryo.graph_cache SET stored_at = stored_at - interval '2h'")
        # The key is a keyed digest and the output sealed: neither is readable at rest.
        rows = await (await conn.execute("SELECT key_hash, value FROM cryo.graph_cache")
                      ).fetchall()
    assert len(rows) == 2 and all(b"build" not in bytes(k) and b"built" not in bytes(v)
                                  for k, v in rows)
    stale = await submit_graph(srv, CACHED, input={"v": 1})
    grant = await _job(srv, stale)
    assert grant is not None
    await srv.finish(grant)


async def test_an_untrusted_run_never_reads_or_writes_a_trusted_entry(srv: Server) -> None:
    isolated = [*AGENT_CAPS, "isolated"]
    token = await srv.make_token(kind="agent", caps=isolated)
    trusted = await submit_graph(srv, CACHED, input={"v": 1})
    grant = await _job(srv, trusted)
    assert grant is not None
    await srv.log(grant, b"trusted\n")
    await srv.finish(grant)
    await until(srv, trusted, ended)
    # The untrusted run misses the trusted entry and stores its own beside it.
    untrusted = await submit_graph(srv, CACHED, input={"v": 1}, untrusted=True)
    grant = await _job(srv, untrusted, caps=isolated, token=token)
    assert grant is not None and grant["untrusted"] is True
    data = base64.b64encode(b"tainted\n").decode()
    (await srv.in_run(grant, "logs", token=token, data=data)).ok()
    (await srv.in_run(grant, "finish", token=token, outcome="succeeded", exit_code=0,
                      error=None)).ok()
    await until(srv, untrusted, ended)
    # A trusted run still reads the trusted output; an untrusted one its own.
    again = await until(srv, await submit_graph(srv, CACHED, input={"v": 1}), ended)
    assert nodes_of(again)["build"]["output"]["text"] == "trusted"
    again = await until(srv, await submit_graph(srv, CACHED, input={"v": 1}, untrusted=True),
                        ended)
    assert nodes_of(again)["build"]["output"]["text"] == "tainted"
    assert nodes_of(again)["build"]["cached"] is True
