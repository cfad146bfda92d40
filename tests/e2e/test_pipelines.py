"""YAML pipelines on a real `cryopg dev` (server, driver, real agents): every job key in
one pipeline run with `cryopg submit ci.yaml --follow`, a failing first step that stops
its job, and a job's concurrency group admitting one instance at a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import http, lines, show, token, wait_for


def nodes(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in run["graph"]["nodes"]}


def latest_run(stack: Any) -> str | None:
    listed = json.loads(stack.cli("runs", "--json").stdout)
    tops = [r for r in listed if not r.get("parent_run_id")]
    return tops[0]["id"] if tops else None


@pytest.mark.agents(2)
@pytest.mark.dev_env(CRYOPG_EGRESS_ALLOW="127.0.0.1")  # the http job calls the dev server
def test_every_job_key_in_one_pipeline_with_submit_follow(stack: Any, dsn: str) -> None:
    d: Path = stack.dir
    (d / "deploy.sh").write_text(
        # a stored script: fails its first attempt, so retry has something to do
        f'echo attempt >> {d}/tries\n'
        f'cat "$CRYO_INPUT_FILE" > {d}/deploy-input\n'
        f'[ "$(wc -l < {d}/tries)" -ge 2 ]\n'
        'cryopg output set deployed yes\n')
    assert stack.cli("workflow", "put", "deploy.sh", "deploy.sh").returncode == 0
    (d / "child.yaml").write_text(
        "version: cryosleep/pipeline/v1\noutput: input.n\n"
        "jobs:\n  keep: {state: {op: set, key: child, value: '{{ input.n }}'}}\n")
    put = stack.cli("workflow", "put", "child", "child.yaml")
    assert put.returncode == 0 and "stored pipeline workflow child" in put.stdout, put.stderr
    (d / "ci.yaml").write_text(f"""\
version: cryosleep/pipeline/v1
concurrency: "ci-{{{{ input.env }}}}"
env: {{REGION: eu, TIER: gold}}
jobs:
  build:
    env: {{TIER: silver}}
    steps:
      - run: echo "build $REGION $TIER {{{{ input.env }}}}"
      - run: echo build >> {d}/order
  ledger: {{state: {{op: add, key: "seen-{{{{ input.id }}}}", entity: ledger}}}}
  deploy:
    needs: [build, ledger]
    if: nodes.ledger.output.claimed
    script: deploy.sh
    input: {{env: "{{{{ input.env }}}}"}}
    retry: {{attempts: 2, backoff: 0s}}
    concurrency: "deploy-{{{{ input.env }}}}"
  never:
    needs: build
    if: "input.env == 'none'"
    steps: [{{run: "echo never >> {d}/order"}}]
  approve:
    needs: [deploy]
    approval: {{fields: {{type: object, properties: {{go: {{type: boolean}}}}, required: [go]}}}}
  wait-pr: {{needs: [approve], wait_for_event: {{name: pr.closed, timeout: 1h}}}}
  notify:
    needs: [wait-pr]
    fan_out: {{items: input.recipients}}
    steps: [{{run: "echo notify {{{{ item }}}} >> {d}/order"}}]
  sub: {{needs: [notify], workflow: child, input: {{n: 7}}}}
  web: {{needs: build, http: "{{{{ input.health }}}}"}}
""")
    follow = subprocess.Popen(
        [sys.executable, "-m", "cryopg.cli.entry", "submit", "ci.yaml", "--follow", "--input",
         json.dumps({"env": "prod", "id": 1, "recipients": ["ann", "bob"],
                     "health": stack.url + "/api/v1/health"})],
        cwd=d, env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = wait_for("the run", lambda: latest_run(stack), timeout=30)
        wait_for("the approval", lambda: show(stack, run_id)["substate"] == "awaiting-approval",
                 timeout=90)
        approved = stack.cli("approve", run_id, "approve", "--json", '{"go": true}')
        assert approved.returncode == 0, approved.stderr
        wait_for("the event wait", lambda: nodes(show(stack, run_id))["wait-pr"]["status"]
                 == "waiting", timeout=30)
        user = token(dsn, "user", member="tester")
        status, _ = http(f"{stack.project_url}/events/pr.closed", user, "POST",
                         {"payload": {"pr": 12}})
        assert status == 201
        out, err = follow.communicate(timeout=120)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0, err
    run = show(stack, run_id)
    assert run["status"] == "succeeded" and run["pipeline"] == "cryosleep/pipeline/v1"
    got = nodes(run)
    # steps: one bash -eu script, env merged (the job's wins), input templated
    assert got["build"]["output"]["stdout"].strip() == "build eu silver prod"
    assert got["ledger"]["output"] == {"claimed": True}
    # needs: build ran before the fan-out; if false: skipped, never ran
    assert lines(d / "order")[0] == "build" and "never" not in lines(d / "order")
    assert got["never"]["status"] == "skipped"
    # retry: the stored script failed once, then succeeded with its templated input
    assert lines(d / "tries") == ["attempt", "attempt"] and got["deploy"]["attempt"] == 2
    assert json.loads((d / "deploy-input").read_text()) == {"env": "prod"}
    assert got["deploy"]["output"] == {"deployed": "yes"}
    assert got["approve"]["output"]["go"] is True
    assert got["wait-pr"]["output"] == {"pr": 12}
    # fan_out: once per item
    assert sorted(lines(d / "order")[1:]) == ["notify ann", "notify bob"]
    assert len(got["notify"]["output"]) == 2
    assert got["sub"]["output"] == 7  # the workflow job: a stored pipeline as a child
    assert got["web"]["output"]["status"] == 200  # the http job, on a connector agent
    assert run["concurrency_group"] == "ci-prod"  # the lock a script names ci-prod
    shown = stack.cli("runs", "show", run_id).stdout
    assert "pipeline:" in shown and "never" in shown and "skipped" in shown


def test_a_failing_first_step_stops_the_job_and_the_run(stack: Any) -> None:
    d: Path = stack.dir
    (d / "fail.yml").write_text(f"""\
version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: echo first >> {d}/ran
      - run: "false"
      - run: echo third >> {d}/ran
  after: {{needs: build, steps: [{{run: echo after >> {d}/ran}}]}}
""")
    done = stack.cli("submit", "fail.yml", "--follow", timeout=90)
    assert done.returncode != 0
    assert lines(d / "ran") == ["first"]  # no durable boundary, and no step after `false`
    run = show(stack, latest_run(stack) or "")
    assert run["status"] == "failed"
    assert nodes(run)["build"]["status"] == "failed"
    assert nodes(run)["after"]["status"] in ("pending", "skipped")


@pytest.mark.agents(2)
def test_a_job_concurrency_group_admits_one_instance_at_a_time(stack: Any) -> None:
    d: Path = stack.dir
    (d / "one.yaml").write_text(f"""\
version: cryosleep/pipeline/v1
jobs:
  each:
    fan_out: {{items: input.xs, max_parallel: 3}}
    concurrency: "one-{{{{ input.env }}}}"
    steps:
      - run: echo "start {{{{ item }}}} $(date +%s.%N)" >> {d}/log
      - run: sleep 0.5
      - run: echo "end {{{{ item }}}} $(date +%s.%N)" >> {d}/log
""")
    done = stack.cli("submit", "one.yaml", "--follow", "--input",
                     json.dumps({"env": "prod", "xs": [1, 2, 3]}), timeout=120)
    assert done.returncode == 0, done.stderr
    events = [ln.split() for ln in lines(d / "log")]
    assert len(events) == 6
    # one at a time: every start follows the previous end
    kinds = [e[0] for e in sorted(events, key=lambda e: float(e[2]))]
    assert kinds == ["start", "end"] * 3, events
