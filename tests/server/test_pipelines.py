"""YAML pipelines through the server: HTTP submit and workflow put compile them (errors
are 400 naming the job and key, and store nothing), the database-side jobs run with no
agent, the job an agent takes is the steps as one bash -eu script, and the SQL path
(`cryopg pipeline compile --compiled`, cryo.put_compiled_workflow, cryo.submit_run)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from psycopg.types.json import Jsonb

from tests.server.conftest import Server
from tests.server.test_graphs import ended, nodes_of, until

GATED = """\
version: cryosleep/pipeline/v1
env: {REGION: eu}
jobs:
  ledger: {state: {op: add, key: "seen-{{ input.id }}", entity: ledger}}
  wait-pr: {needs: [ledger], wait_for_event: {name: pr.closed, timeout: 7d}}
  approve:
    needs: [wait-pr]
    approval: {fields: {type: object, properties: {go: {type: boolean}}, required: [go]}}
"""


async def count_rows(srv: Server, table: str) -> int:
    async with await srv.connect() as conn:
        row = await (await conn.execute(f"SELECT count(*) FROM cryo.{table}")).fetchone()
    assert row is not None
    return int(row[0])


async def test_state_wait_for_event_and_approval_jobs_run_in_the_database(srv: Server) -> None:
    run_id = await srv.submit(GATED, filename="gate.yaml", input={"id": 7})
    run = await until(srv, run_id, lambda r: nodes_of(r)["wait-pr"]["status"] == "waiting")
    assert run["pipeline"] == "cryosleep/pipeline/v1" and run["graph"]["pipeline"]
    assert nodes_of(run)["ledger"]["output"] == {"claimed": True}
    assert nodes_of(run)["approve"]["status"] == "pending"
    (await srv.user("POST", "/events/pr.closed", {"payload": {"pr": 12}})).ok(201)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    bad = await srv.user("POST", f"/runs/{run_id}/approvals/approve", {"go": "yes"})
    assert "go" in bad.refused(400, "invalid_argument")
    (await srv.user("POST", f"/runs/{run_id}/approvals/approve", {"go": True})).ok()
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded"
    got = nodes_of(run)
    assert got["wait-pr"]["output"] == {"pr": 12}
    assert got["approve"]["output"]["go"] is True
    assert await srv.claim() is None  # no job was ever an agent's

    again = await srv.submit(GATED, filename="gate.yaml", input={"id": 7})
    run = await until(srv, again, lambda r: nodes_of(r)["ledger"]["status"] == "succeeded")
    assert nodes_of(run)["ledger"]["output"] == {"claimed": False}  # the same shared cell


async def test_the_agent_gets_the_steps_as_one_script_with_env_and_templates(
        srv: Server) -> None:
    source = """\
version: cryosleep/pipeline/v1
env: {REGION: eu, TIER: gold}
jobs:
  build:
    env: {TIER: silver}
    steps:
      - {name: first, run: "echo one {{ input.who }} > marker"}
      - run: |
          echo two
          echo "$REGION $TIER"
      - run: echo '{"a":{"b":1}}' {{ '{{' }}.State{{ '}}' }}
"""
    run_id = await srv.submit(source, filename="ci.yml", input={"who": "ann"})
    job = await until_claim(srv)
    lines = job["source"].splitlines()
    assert lines[0] == "set -eu"
    assert "export REGION=eu" in lines and "export TIER=silver" in lines
    body = lines[lines.index("# step 1: first"):]
    assert body == ["# step 1: first", "echo one ann > marker", "# step 2", "echo two",
                    'echo "$REGION $TIER"', "# step 3", """echo '{"a":{"b":1}}' {{.State}}"""]
    # the same script under bash: a failing step ends it there
    failing = job["source"].replace("echo one ann > marker", "false")
    done = subprocess.run(["bash", "-c", failing], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "two" not in done.stdout
    await srv.log(job, b"two\r\neu silver\r\n")
    await srv.finish(job)
    run = await until(srv, run_id, ended)
    assert nodes_of(run)["build"]["output"]["stdout"] == "two\neu silver\n"


async def until_claim(srv: Server) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = await srv.claim()
        if job is not None:
            return job
        await srv.tick()
        await asyncio.sleep(0.05)
    raise AssertionError("no job was dispatched")


async def test_refusals_are_400_naming_job_and_key_and_store_nothing(srv: Server) -> None:
    cases = {
        "needs": ("jobs: {build: {steps: [make]}, deploy: {needs: [buidl], steps: [x]}}",
                  "ci.yaml: job deploy: needs: 'buidl' names no job"),
        "key": ("jobs: {build: {steps: [make], retries: 3}}", "ci.yaml: job build: retries: "),
        "cycle": ("jobs: {a: {needs: b, steps: [x]}, b: {needs: a, steps: [y]}}",
                  "ci.yaml: job a: needs: a cycle"),
        "expr": ("jobs: {a: {if: 'input.x >', steps: [x]}}", "ci.yaml: job a: if: "),
        "job": ("jobs: {a: make}", "ci.yaml: job a: a job is a mapping"),
        "yaml": ("jobs: {a: [", "ci.yaml: not valid YAML: line "),
    }
    for what, (body, message) in cases.items():
        source = f"version: cryosleep/pipeline/v1\n{body}\n"
        for method, path in (("POST", "/runs"), ("PUT", "/workflows/ci")):
            reply = await srv.user(method, path, {"source": source, "filename": "ci.yaml"})
            got = reply.refused(400, "invalid_argument")
            assert got.startswith(message), (what, got)
    wrong = await srv.user("POST", "/runs", {"source": "version: cryosleep/pipeline/v9\njobs: {}",
                                             "filename": "ci.yaml"})
    assert "version: must be cryosleep/pipeline/v1" in wrong.refused(400, "invalid_argument")
    assert await count_rows(srv, "runs") == 0 and await count_rows(srv, "workflows") == 0
    (await srv.user("GET", "/workflows/ci")).refused(404, "not_found")


async def test_workflow_put_and_get_say_it_is_a_pipeline(srv: Server) -> None:
    put = (await srv.user("PUT", "/workflows/gate", {"source": GATED,
                                                     "filename": "gate.yaml"})).ok()
    assert put == {"name": "gate", "kind": "pipeline", "pipeline": "cryosleep/pipeline/v1",
                   "version": 1}
    got = (await srv.user("GET", "/workflows/gate", role="viewer")).ok()
    assert got["kind"] == "pipeline" and got["filename"] == "gate.yaml"
    assert got["nodes"][1] == {"id": "wait-pr", "type": "wait", "needs": ["ledger"]}
    assert "source" not in got
    (await srv.user("GET", "/workflows/gate?source=1", role="viewer")).refused(403, "forbidden")
    with_source = (await srv.user("GET", "/workflows/gate?source=1")).ok()
    assert with_source["source"] == GATED
    (await srv.user("PUT", "/workflows/plain", {"source": "echo hi\n",
                                                "filename": "x.sh"})).ok()
    assert (await srv.user("GET", "/workflows/plain?source=1")).ok()["source"] == "echo hi\n"
    assert (await srv.user("GET", "/workflows/plain")).ok()["kind"] == "script"

    shown = await srv.cli("workflow", "get", "gate")
    assert shown.returncode == 0, shown.stderr
    assert "kind:      pipeline (cryosleep/pipeline/v1)" in shown.stdout
    assert "job wait-pr (wait)  needs ledger" in shown.stdout
    assert (await srv.cli("workflow", "get", "gate", "--source")).stdout == GATED

    # SQL starts a stored pipeline like any stored workflow
    async with await srv.connect() as conn:
        row = await (await conn.execute(
            "SELECT cryo.submit_run('dev', 'default', 'gate', %s)", (Jsonb({"id": 9}),)
        )).fetchone()
    assert row is not None
    run = await until(srv, row[0], lambda r: nodes_of(r)["wait-pr"]["status"] == "waiting")
    assert run["pipeline"] and nodes_of(run)["ledger"]["output"] == {"claimed": True}


async def test_the_cli_compiles_submits_and_stores_pipelines(srv: Server) -> None:
    (srv.tmp / "ci.yaml").write_text(GATED)
    ir = await srv.cli("pipeline", "compile", "ci.yaml")
    assert ir.returncode == 0, ir.stderr
    doc = json.loads(ir.stdout)
    assert doc["version"] == "cryosleep-graph/v1"
    assert [n["type"] for n in doc["nodes"]] == ["state", "wait", "approval"]
    assert doc["edges"] == [{"from": "ledger", "to": "wait-pr"},
                            {"from": "wait-pr", "to": "approve"}]

    put = await srv.cli("workflow", "put", "gate", "ci.yaml")
    assert put.returncode == 0 and "stored pipeline workflow gate" in put.stdout, put.stderr
    made = await srv.cli("submit", "ci.yaml", "--input", '{"id": 3}')
    assert made.returncode == 0, made.stderr
    run = await until(srv, made.stdout.strip(),
                      lambda r: nodes_of(r)["wait-pr"]["status"] == "waiting")
    shown = await srv.cli("runs", "show", run["id"])
    assert "pipeline:" in shown.stdout and "cryosleep/pipeline/v1" in shown.stdout

    (srv.tmp / "bad.yml").write_text(
        "version: cryosleep/pipeline/v1\njobs:\n  deploy: {needs: [buidl], steps: [x]}\n")
    before = await count_rows(srv, "runs")
    for args in (("submit", "bad.yml"), ("workflow", "put", "bad", "bad.yml"),
                 ("pipeline", "compile", "bad.yml")):
        done = await srv.cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip() == "Error: bad.yml: job deploy: needs: 'buidl' names no job"
    assert await count_rows(srv, "runs") == before
    (await srv.user("GET", "/workflows/bad")).refused(404, "not_found")


async def test_an_application_stores_a_compiled_pipeline_from_sql(srv: Server) -> None:
    (srv.tmp / "ci.yaml").write_text(GATED)
    compiled = await srv.cli("pipeline", "compile", "--compiled", "ci.yaml")
    assert compiled.returncode == 0, compiled.stderr
    value = json.loads(compiled.stdout)
    assert set(value) == {"filename", "structure", "document"}
    async with await srv.connect() as conn:
        await conn.execute("SELECT cryo.put_compiled_workflow('dev', 'default', 'gate', %s)",
                           (Jsonb(value),))
        row = await (await conn.execute(
            "SELECT cryo.submit_run('dev', 'default', 'gate', %s)", (Jsonb({"id": 5}),)
        )).fetchone()
        assert row is not None
        run_id = row[0]
        bad = None
        try:
            await conn.execute("SELECT cryo.put_compiled_workflow('dev', 'default', 'x', %s)",
                               (Jsonb({"structure": {}}),))
        except Exception as exc:  # noqa: BLE001 - the SQLSTATE is what is checked
            bad = exc
        assert bad is not None and getattr(bad, "sqlstate", None) == "CR004"
    got = (await srv.user("GET", "/workflows/gate")).ok()
    assert got["kind"] == "pipeline" and got["filename"] == "ci.yaml"
    run = await until(srv, run_id, lambda r: nodes_of(r)["wait-pr"]["status"] == "waiting")
    assert nodes_of(run)["ledger"]["output"] == {"claimed": True}
    (await srv.user("POST", "/events/pr.closed", {"payload": 1})).ok(201)
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    (await srv.user("POST", f"/runs/{run_id}/approvals/approve", {"go": False})).ok()
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded" and nodes_of(run)["approve"]["output"]["go"] is False


async def test_sleep_and_wait_for_signal_jobs(srv: Server) -> None:
    source = """\
version: cryosleep/pipeline/v1
output: nodes.go.output
jobs:
  nap: {sleep: 0s}
  go: {needs: nap, wait_for_signal: {name: go, timeout: 1h}}
  late: {wait_for_signal: {name: never, timeout: 1s}}
"""
    run_id = await srv.submit(source, filename="w.yaml")
    await until(srv, run_id, lambda r: nodes_of(r)["go"]["status"] == "waiting")
    assert nodes_of(await srv.show(run_id))["nap"]["output"] == {}
    (await srv.user("POST", f"/runs/{run_id}/signal/go", {"payload": {"n": 1}})).ok(201)
    await until(srv, run_id, lambda r: nodes_of(r)["go"]["status"] == "succeeded")
    await asyncio.sleep(1.1)  # the timeout of `late` is due; the tick wakes the run
    await srv.tick()
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded" and run["outputs"]["output"] == {"n": 1}
    assert nodes_of(run)["late"]["output"] == {"timed_out": True}


async def test_a_job_in_the_runs_own_admission_group_runs_under_the_runs_lease(
        srv: Server) -> None:
    """The issue's example has `concurrency: deploy-{{ input.env }}` on the run and on its
    deploy job: the job must not wait behind its own run (it did: awaiting-lease forever),
    while another run of that group still queues behind this one."""
    source = """\
version: cryosleep/pipeline/v1
concurrency: "deploy-{{ input.env }}"
jobs:
  deploy: {concurrency: "deploy-{{ input.env }}", state: {op: incr, key: n, entity: d}}
  hold: {needs: deploy, wait_for_signal: go}
"""
    first = await srv.submit(source, filename="d.yaml", input={"env": "prod"})
    run = await until(srv, first, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    assert nodes_of(run)["deploy"]["output"]["value"] == 1
    # The lock a script takes as deploy-prod (issue 39 item 5).
    assert run["concurrency_group"] == "deploy-prod"
    second = await srv.submit(source, filename="d.yaml", input={"env": "prod"})
    assert (await srv.show(second))["status"] == "queued"
    (await srv.user("POST", f"/runs/{first}/signal/go", {})).ok(201)
    assert (await until(srv, first, ended))["status"] == "succeeded"
    run = await until(srv, second, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    assert nodes_of(run)["deploy"]["output"]["value"] == 2
