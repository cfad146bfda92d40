"""Graphs through a real `cryopg dev`: every agent-bound node type on real agents, the CLI
(submit, workflow put, runs show, approve, rerun), and a graph finishing across a killed
stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import show, wait_for


def write(dir: Path, name: str, doc: dict[str, Any]) -> Path:
    path = dir / name
    path.write_text(json.dumps({"version": "cryosleep-graph/v1", **doc}))
    return path


def nodes(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in run["graph"]["nodes"]}


@pytest.mark.agents(2)
@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")  # the http node calls the dev server
def test_every_agent_node_type_runs_on_real_agents(stack: Any) -> None:
    write(stack.dir, "child.json", {"nodes": [
        {"id": "double", "type": "state",
         "config": {"op": "set", "key": "d", "value": {"$expr": "input.n"}}}],
        "output": {"$expr": "input.n"}})
    assert stack.cli("workflow", "put", "child", "child.json").returncode == 0
    (stack.dir / "step.sh").write_text(
        'n=$(cryopg step five -- echo 5)\ncryopg output set n "$n"\n')
    doc = write(stack.dir, "all.json", {"nodes": [
        {"id": "sh", "type": "shell", "config": {"run": "echo \"hi $WHO\"; echo $-",
                                                  "env": {"WHO": {"$expr": "input.who"}}}},
        {"id": "code", "type": "code", "config": {"script": (
            "import json, sys\nscope = json.load(sys.stdin)\n"
            "print(json.dumps({'got': scope['nodes']['sh']['output']['stdout'].split()[1],"
            " 'key': scope['node']['idempotency_key']}))\n")}},
        {"id": "web", "type": "http", "config": {"url": {"$template": "{{ input.url }}"}}},
        {"id": "script", "type": "script", "config": {
            "source": (stack.dir / "step.sh").read_text(), "filename": "step.sh"}},
        {"id": "sub", "type": "workflow", "config": {"graph": "child", "input": {"n": 7}}},
    ], "edges": [{"from": "sh", "to": "code"}]})
    done = stack.cli("submit", str(doc), "--input",
                     json.dumps({"who": "ann", "url": stack.url + "/api/v1/health"}))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    run = wait_for("the graph to end", lambda: (r := show(stack, run_id))["finished_at"] and r,
                   timeout=90)
    assert run["status"] == "succeeded", json.dumps(run["graph"])[:3000]
    got = nodes(run)
    assert got["sh"]["output"]["stdout"].splitlines()[0] == "hi ann"
    assert "e" in got["sh"]["output"]["stdout"].splitlines()[1]  # bash -e
    assert got["code"]["output"]["got"] == "ann" and len(got["code"]["output"]["key"]) == 32
    assert got["web"]["output"]["status"] == 200 and got["web"]["output"]["body"]["ok"] is True
    assert got["script"]["output"] == {"n": 5}
    assert got["sub"]["output"] == 7
    shown = stack.cli("runs", "show", run_id).stdout
    assert "nodes:" in shown and "code" in shown and "succeeded" in shown


def test_approve_and_rerun_from_the_cli(stack: Any) -> None:
    doc = write(stack.dir, "gate.json", {"nodes": [
        {"id": "count", "type": "state", "config": {"op": "incr", "key": "n", "entity": "e"}},
        {"id": "ok", "type": "approval", "config": {"fields": {
            "type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}}}],
        "edges": [{"from": "count", "to": "ok"}]})
    run_id = stack.cli("submit", str(doc)).stdout.strip()
    wait_for("the approval", lambda: show(stack, run_id)["substate"] == "awaiting-approval")
    bad = stack.cli("approve", run_id, "ok", "--json", '{"go": "yes"}')
    assert bad.returncode != 0 and "go" in bad.stderr and "Traceback" not in bad.stderr
    good = stack.cli("approve", run_id, "ok", "--json", '{"go": true}')
    assert good.returncode == 0, good.stderr
    wait_for("the end", lambda: show(stack, run_id)["status"] == "succeeded")
    again = stack.cli("rerun", run_id, "--from", "ok")
    assert again.returncode == 0, again.stderr
    new_id = again.stdout.strip()
    wait_for("the rerun to wait", lambda: show(stack, new_id)["substate"] == "awaiting-approval")
    assert nodes(show(stack, new_id))["count"]["status"] == "seeded"


def _parked_first(dir: Path, name: str) -> tuple[Path, Path]:
    """A graph whose first node runs until the file `go` appears (so a wait sees it running
    however slow the machine), then a counted state node and a second shell node."""
    go = dir / "go"
    doc = write(dir, name, {"nodes": [
        {"id": "first", "type": "shell",
         "config": {"run": f"while [ ! -e {go} ]; do sleep 0.1; done; echo one"}},
        {"id": "count", "type": "state", "config": {"op": "incr", "key": "c", "entity": "k"}},
        {"id": "second", "type": "shell", "config": {"run": "echo two"}}],
        "edges": [{"from": "first", "to": "count"}, {"from": "count", "to": "second"}]})
    return doc, go


@pytest.mark.agents(2)
@pytest.mark.private_stack  # it kills the stack
def test_a_graph_finishes_across_a_killed_stack(stack: Any, dsn: str) -> None:
    doc, go = _parked_first(stack.dir, "slow.json")
    run_id = stack.cli("submit", str(doc)).stdout.strip()
    wait_for("first to run", lambda: nodes(show(stack, run_id))["first"]["status"] == "running")
    os.kill(stack.proc.pid, signal.SIGKILL)  # server, driver and agents, all at once
    stack.proc.wait()
    go.touch()  # the first node may end now (in the orphaned job, or its rerun)
    # The same stack again, on the same database and directory.
    restarted = subprocess.Popen(
        [sys.executable, "-m", "cryopg.cli.entry", "dev", "--database-url", dsn, "--port",
         stack.url.rsplit(":", 1)[1], "--agents", "2", "--no-sample", "--claim-seconds", "3",
         "--tick-interval", "0.3"],
        cwd=stack.dir, env=stack.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def ended() -> dict[str, Any] | None:
            try:
                run = show(stack, run_id)
            except AssertionError:  # the restarted server is not up yet
                return None
            return run if run["finished_at"] else None

        run = wait_for("the graph to end after the restart", ended, timeout=90)
        assert run["status"] == "succeeded", json.dumps(run)[:1500]
        got = nodes(run)
        assert got["count"]["output"]["value"] == 1  # counted once
        assert got["second"]["output"]["stdout"].strip() == "two"
    finally:
        restarted.send_signal(signal.SIGINT)
        try:
            restarted.wait(20)
        except subprocess.TimeoutExpired:
            restarted.kill()
    time.sleep(0.1)


@pytest.mark.agents(2)
def test_a_graph_finishes_across_a_postgres_restart(stack: Any) -> None:
    from tests.conftest import _cluster

    doc, go = _parked_first(stack.dir, "pg.json")
    run_id = stack.cli("submit", str(doc)).stdout.strip()
    wait_for("first to run", lambda: nodes(show(stack, run_id))["first"]["status"] == "running")
    _cluster.stop()  # every connection of the server, driver and agents drops
    time.sleep(3)  # an outage of a few seconds, what is tested
    _cluster.start()
    go.touch()
    run = wait_for("the graph to end after the restart",
                   lambda: (r := show(stack, run_id))["finished_at"] and r, timeout=120)
    assert run["status"] == "succeeded", json.dumps(run["graph"])[:1500]
    assert nodes(run)["count"]["output"]["value"] == 1
