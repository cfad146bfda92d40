"""Following graph and pipeline runs (issue 24): a graph run's log is its node jobs' logs,
each line prefixed with its node, then how each job ended; a failed run says what its
failing job printed last and exits with that job's code; a .json that is not a graph is
refused; a shell node's output has a trimmed `text`; and the graph tier's consistency
fixes (cancelled nodes, one node_approved row, a sleep node's wake, CLI labels)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until
from tests.server.test_pipelines import count_rows, until_claim

TWO_STEPS = graph([
    {"id": "build", "type": "shell", "config": {"run": "make"}},
    {"id": "test", "type": "shell", "config": {"run": "make test"}},
], [("build", "test")])


async def claim_node(srv: Server, node_run: str) -> dict[str, Any]:
    """The next job, which must be the one whose source runs `node_run`."""
    job = await until_claim(srv)
    assert node_run in job["source"], job["source"]
    return job


async def run_ids(srv: Server) -> set[str]:
    return {r["id"] for r in (await srv.user("GET", "/runs")).ok()["runs"]}


async def history_kinds(srv: Server, run_id: str) -> list[str]:
    return [h["kind"] for h in (await srv.show(run_id))["history"]]


async def test_following_a_graph_prefixes_each_jobs_lines_and_exits_with_its_code(
        srv: Server) -> None:
    run_id = await submit_graph(srv, TWO_STEPS)
    follower = asyncio.create_task(srv.cli("logs", run_id, "--follow"))
    build = await claim_node(srv, "make\n")
    await srv.log(build, b"compiling\r\nlin")  # a line cut across two flushes
    await srv.log(build, b"king\r\n")
    await srv.finish(build)
    test = await claim_node(srv, "make test")
    await srv.log(test, b"ok 1\r\nerror: 2 != 3\r\n")
    await srv.finish(test, "failed", 3)
    done = await asyncio.wait_for(follower, 60)
    assert done.stdout.splitlines() == [
        "[build] compiling", "[build] linking", "[build] succeeded",
        "[test] ok 1", "[test] error: 2 != 3", "[test] failed: exit code 3"], done.stdout
    assert done.returncode == 3, done.stderr  # the failing node's exit code, not 1
    err = done.stderr.splitlines()
    assert err[0] == f"cryopg: run {run_id} failed (node test failed: exit code 3)", err
    assert err[1:] == ["  ok 1", "  error: 2 != 3"]  # what the job printed last
    run = await srv.show(run_id)
    # The clear error says how it ended; the log's words come unsealed from the log.
    assert (run["exit_code"], run["error"]) == (3, "node test failed: exit code 3")
    assert nodes_of(run)["test"]["log_tail"] == "ok 1\nerror: 2 != 3"

    again = await srv.cli("logs", run_id)  # an ended run's log, without --follow
    assert (again.returncode, again.stdout) == (0, done.stdout)
    shown = (await srv.cli("runs", "show", run_id)).stdout.splitlines()
    at = next(i for i, ln in enumerate(shown) if ln.strip().startswith("test "))
    assert shown[at + 1:at + 3] == ["    | ok 1", "    | error: 2 != 3"], shown


async def test_submit_follow_of_a_pipeline_streams_its_jobs(srv: Server) -> None:
    (srv.tmp / "ci.yaml").write_text("""\
version: cryosleep/pipeline/v1
jobs:
  lint: {steps: [{run: ./lint.sh}]}
  build: {steps: [{run: make}]}
""")
    follower = asyncio.create_task(srv.cli("submit", "ci.yaml", "--follow"))
    jobs = [await until_claim(srv), await until_claim(srv)]  # both start at once
    by_node = {("lint" if "lint.sh" in j["source"] else "build"): j for j in jobs}
    await srv.log(by_node["lint"], b"clean\n")
    await srv.finish(by_node["lint"])
    await srv.log(by_node["build"], b"cc main.c\nmain.c:3: error: expected ';'\n")
    await srv.finish(by_node["build"], "failed", 2, "exit status 2")
    done = await asyncio.wait_for(follower, 60)
    assert done.returncode == 2, done.stderr
    out = done.stdout.splitlines()
    assert [ln for ln in out if ln.startswith("[lint]")] == ["[lint] clean", "[lint] succeeded"]
    assert [ln for ln in out if ln.startswith("[build]")] == [
        "[build] cc main.c", "[build] main.c:3: error: expected ';'",
        "[build] failed: exit status 2"]
    assert "node build failed: exit status 2" in done.stderr
    assert "  main.c:3: error: expected ';'" in done.stderr.splitlines()


async def test_a_retried_fan_out_node_names_its_item_and_attempt(srv: Server) -> None:
    doc = graph([{"id": "each", "type": "shell", "retry": {"attempts": 2, "backoff": "0s"},
                  "fan_out": {"items": {"$expr": "input.xs"}, "max_parallel": 1},
                  "config": {"run": {"$template": "echo {{ item }}"}}}])
    run_id = await submit_graph(srv, doc, input={"xs": ["a"]})
    first = await until_claim(srv)
    await srv.log(first, b"flaky\n")
    await srv.finish(first, "failed", 1)
    second = await until_claim(srv)
    await srv.log(second, b"a\n")
    await srv.finish(second)
    await until(srv, run_id, ended)
    done = await srv.cli("logs", run_id)
    assert done.stdout.splitlines() == [
        "[each#0] flaky", "[each#0] failed: exit code 1",
        "[each#0] attempt 2", "[each#0] a", "[each#0] succeeded"], done.stdout


async def test_a_shell_nodes_text_is_its_stdout_without_the_trailing_newline(
        srv: Server) -> None:
    doc = graph([
        {"id": "a", "type": "shell", "config": {"run": "echo 7"}},
        {"id": "b", "type": "shell",
         "config": {"run": {"$template": "echo b{{ nodes.a.output.text }} >> f"}}},
    ], [("a", "b")])
    run_id = await submit_graph(srv, doc)
    a = await claim_node(srv, "echo 7")
    await srv.log(a, b"7\r\n\r\n")
    await srv.finish(a)
    b = await until_claim(srv)
    assert b["source"].splitlines()[-1] == "echo b7 >> f"  # one command, not two
    await srv.finish(b)
    run = await until(srv, run_id, ended)
    assert nodes_of(run)["a"]["output"] == {"stdout": "7\n\n", "text": "7", "exit_code": 0}


async def test_a_json_file_that_is_not_a_graph_is_refused_not_run(srv: Server) -> None:
    files = {
        "broken.json": ('{"version": "cryosleep-graph/v1", "nodes": [',
                        "broken.json: the graph is not valid JSON"),
        "v2.json": (json.dumps({"version": "cryosleep-graph/v2", "nodes": []}),
                    'v2.json: version: "cryosleep-graph/v2" is not a version cryopg runs'),
        "plain.json": ('{"hello": 1}', "plain.json: version: a graph document says"),
        "v2.yaml": ("version: cryosleep/pipeline/v2\njobs: {a: {steps: [make]}}\n",
                    "v2.yaml: version: must be cryosleep/pipeline/v1"),
        "broken.yaml": ("jobs: [", "broken.yaml: not valid YAML"),
    }
    before = await count_rows(srv, "runs")
    for name, (text, words) in files.items():
        (srv.tmp / name).write_text(text)
        done = await srv.cli("submit", name)
        assert done.returncode == 2, (name, done)
        assert done.stderr.startswith(f"Error: {words}"), (name, done.stderr)
        assert len(done.stderr.splitlines()) == 1, done.stderr
        reply = await srv.user("POST", "/runs", {"source": text, "filename": name})
        assert reply.refused(400, "invalid_argument").startswith(words)
        put = await srv.cli("workflow", "put", "w", name)
        assert put.returncode == 2 and words in put.stderr, put
    # A JSON object naming a cryosleep version is a graph whatever the file is called.
    reply = await srv.user("POST", "/runs", {"source": files["v2.json"][0],
                                             "filename": "job"})
    assert "is not a version cryopg runs" in reply.refused(400, "invalid_argument")
    assert await count_rows(srv, "runs") == before
    assert await srv.claim() is None


async def test_cancelling_a_graph_cancels_its_nodes(srv: Server) -> None:
    doc = graph([
        {"id": "work", "type": "shell", "config": {"run": "sleep 100"}},
        {"id": "gate", "type": "wait", "config": {"signal": "go"}},
        {"id": "after", "type": "shell", "config": {"run": "echo never"}},
    ], [("work", "after"), ("gate", "after")])
    run_id = await submit_graph(srv, doc)
    await claim_node(srv, "sleep 100")
    await until(srv, run_id, lambda r: nodes_of(r)["gate"]["status"] == "waiting")
    (await srv.user("POST", f"/runs/{run_id}/cancel")).ok()
    run = await until(srv, run_id, ended)
    assert run["status"] == "cancelled"
    assert {n: v["status"] for n, v in nodes_of(run).items()} == {
        "work": "cancelled", "gate": "cancelled", "after": "cancelled"}
    kinds = await history_kinds(srv, run_id)
    assert kinds.count("node_cancelled") == 2  # the two that had started


async def test_a_failed_node_cancels_the_nodes_still_running(srv: Server) -> None:
    doc = graph([
        {"id": "slow", "type": "shell", "config": {"run": "sleep 100"}},
        {"id": "bad", "type": "shell", "config": {"run": "exit 4"}},
        {"id": "after", "type": "shell", "config": {"run": "echo never"}},
    ], [("slow", "after"), ("bad", "after")])
    run_id = await submit_graph(srv, doc)
    jobs = [await until_claim(srv), await until_claim(srv)]
    bad = next(j for j in jobs if "exit 4" in j["source"])
    await srv.finish(bad, "failed", 4)
    run = await until(srv, run_id, ended)
    assert (run["status"], run["exit_code"]) == ("failed", 4)
    assert {n: v["status"] for n, v in nodes_of(run).items()} == {
        "slow": "cancelled", "bad": "failed", "after": "skipped"}


async def test_one_approval_writes_one_node_approved_row(srv: Server) -> None:
    doc = graph([{"id": "ok", "type": "approval", "config": {"fields": {"type": "object"}}}])
    run_id = await submit_graph(srv, doc)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    (await srv.user("POST", f"/runs/{run_id}/approvals/ok", {})).ok()
    await until(srv, run_id, ended)
    assert (await history_kinds(srv, run_id)).count("node_approved") == 1


async def test_a_sleep_node_wakes_its_run_as_a_timer_not_a_timed_out_wait(srv: Server) -> None:
    doc = graph([
        {"id": "nap", "type": "wait", "config": {"sleep": "1s"}},
        {"id": "work", "type": "shell", "config": {"run": "make"}},
    ])
    run_id = await submit_graph(srv, doc)
    job = await claim_node(srv, "make")  # a running job: the run's substate is running-nodes
    deadline = time.monotonic() + 30
    while nodes_of(await srv.show(run_id))["nap"]["status"] != "succeeded":
        assert time.monotonic() < deadline, await srv.show(run_id)
        await srv.tick()  # the sweeper's round, which wakes the run once the nap is due
        await asyncio.sleep(0.1)
    await srv.finish(job)
    await until(srv, run_id, ended)
    kinds = await history_kinds(srv, run_id)
    assert "timer_fired" in kinds and "wait_timed_out" not in kinds, kinds


async def test_runs_show_and_events_label_what_they_print(srv: Server) -> None:
    doc = graph([{"id": "one", "type": "state", "config": {"op": "set", "key": "k", "value": 1}}],
                output={"$expr": "nodes.one.output"})
    run_id = await submit_graph(srv, doc)
    await until(srv, run_id, ended)
    shown = (await srv.cli("runs", "show", run_id)).stdout.splitlines()
    assert 'output: {"version":1}' in shown and not any("output output" in s for s in shown)

    (await srv.user("POST", "/events/deployed", {"payload": {"v": 2}})).ok(201)
    listed = (await srv.cli("events")).stdout.splitlines()
    assert listed[0].split("\t") == ["ID", "CREATED", "NAME", "PAYLOAD", "EMITTED BY", "REFUSED"]
    assert listed[1].split("\t")[2:] == ["deployed", '{"v":2}', "-", "-"]


async def test_refusals_exit_2(srv: Server) -> None:
    (srv.tmp / "g.json").write_text(graph([
        {"id": "a", "type": "state", "config": {"op": "set", "key": "_cryo/x", "value": 1}}]))
    done = await srv.cli("submit", "g.json")
    assert done.returncode == 2 and "reserved" in done.stderr, done
    outside = await srv.cli("state", "set", "k", "1", "--entity", "e")
    assert outside.returncode == 2 and "send it a signal" in outside.stderr, outside
    missing = await srv.cli("logs", "run-nope")  # an unknown run: refused, as bad input is
    assert missing.returncode == 2, missing


async def test_following_a_graph_with_no_jobs_ends_with_the_run(srv: Server) -> None:
    doc = graph([{"id": "gate", "type": "wait", "config": {"signal": "go"}}])
    run_id = await submit_graph(srv, doc)
    follower = asyncio.create_task(srv.cli("logs", run_id, "--follow"))
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-signal")
    started = time.monotonic()
    (await srv.user("POST", f"/runs/{run_id}/signal/go", {"payload": 1})).ok(201)
    done = await asyncio.wait_for(follower, 30)
    assert (done.returncode, done.stdout) == (0, ""), done
    assert time.monotonic() - started < 10
