"""The CLI verbs a newcomer reached for and did not find: `org create`, `project list`,
`workflow list|delete`, `emit` outside a run, `cryopg agent`'s first line, and
`cryopg run FILE` with its embedded stack."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import script, show, wait_for


@pytest.mark.private_stack  # it makes an org, which the stack's database keeps
def test_org_create_makes_token_create_for_that_org_work(stack: Any) -> None:
    refused = stack.cli("token", "create", "--kind", "user", "--org", "acme", "--member",
                        "alice", "--role", "admin")
    assert refused.returncode != 0 and "no org acme" in refused.stderr
    made = stack.cli("org", "create", "acme", "--name", "Acme Corp")
    assert (made.returncode, made.stdout) == (0, "created: org acme, project default\n"), made
    again = stack.cli("org", "create", "acme")
    assert (again.returncode, again.stdout) == (0, "exists: org acme\n")
    token = stack.cli("token", "create", "--kind", "user", "--org", "acme", "--member",
                      "alice", "--role", "admin")
    assert token.returncode == 0, token.stderr
    env = {**stack.env, "CRYOPG_URL": stack.url, "CRYOPG_TOKEN": token.stdout.strip(),
           "CRYOPG_ORG": "acme"}
    listed = subprocess.run([sys.executable, "-m", "cryopg.cli.entry", "project", "list"],
                            cwd=stack.dir, env=env, capture_output=True, text=True, timeout=60)
    assert (listed.returncode, listed.stdout) == (0, "default\tdefault\n"), listed.stderr
    bad = stack.cli("org", "create", "Not A Slug")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "org slug" in bad.stderr


def test_workflow_list_and_delete(stack: Any) -> None:
    script(stack.dir, "report.sh", "echo report\n")
    assert stack.cli("workflow", "put", "nightly", "report.sh").returncode == 0
    assert stack.cli("schedule", "create", "poll", "--workflow", "nightly",
                     "--every", "10m").returncode == 0
    listed = stack.cli("workflow", "list")
    assert listed.returncode == 0, listed.stderr
    head, row = listed.stdout.splitlines()
    assert head.split() == ["NAME", "KIND", "FILE", "TRIGGERS", "UPDATED"]
    assert row.split()[:5] == ["nightly", "script", "report.sh", "1", "schedule"]
    refused = stack.cli("workflow", "delete", "nightly")
    assert refused.returncode == 2
    assert refused.stderr == ("Error: workflow nightly is started by schedule poll; "
                              "delete those first\n")
    assert stack.cli("schedule", "delete", "poll").returncode == 0
    done = stack.cli("workflow", "delete", "nightly")
    assert (done.returncode, done.stdout) == (
        0, f"deleted workflow nightly from {stack.org}/{stack.project}\n")
    empty = stack.cli("workflow", "list")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert "no stored workflows" in empty.stderr


def test_emit_outside_a_run_publishes_on_the_bus_and_wakes_a_waiting_run(stack: Any) -> None:
    waiter = script(stack.dir, "waiter.sh", "cryopg wait-event deploy.done\n")
    run_id = stack.cli("submit", str(waiter)).stdout.strip()
    wait_for("the run to wait", lambda: show(stack, run_id)["substate"] == "awaiting-event",
             timeout=60)
    sent = stack.cli("emit", "deploy.done", '{"sha": "abc"}')
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"published deploy.done in {stack.org}/{stack.project} (event ")
    followed = stack.cli("logs", run_id, "--follow")
    assert followed.returncode == 0 and '{"sha":"abc"}' in followed.stdout.replace(" ", "")
    got = json.loads(stack.cli("events", "--name", "deploy.done", "--json").stdout)
    assert [(e["payload"], e["emitted_by_run"]) for e in got] == [({"sha": "abc"}, None)]
    bad = stack.cli("emit", "x", "{broken")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_agent_says_what_it_connected_to(stack: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "cryopg.cli.entry", "agent", "--id", "a7"],
                            cwd=stack.dir, env=stack.env, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        while line and not line.startswith("cryopg agent:"):
            line = proc.stderr.readline()  # e.g. what isolation it can do
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert line.startswith(f"cryopg agent: connected to {stack.url} (server answers) as a7-1; "
                           "capabilities: shell, polyglot"), line
    assert line.rstrip().endswith("scripts run in the directory each run was submitted from")


def test_run_starts_an_embedded_stack_runs_from_the_files_directory_and_stops() -> None:
    # Not tmp_path: as root that is a 0700 tree the postgres OS user cannot enter.
    base = Path(tempfile.mkdtemp(prefix="cryopg-run-"))
    base.chmod(0o755)
    try:
        _run_once_in(base / "proj")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_once_in(here: Path) -> None:
    (here / "sub").mkdir(parents=True)
    (here / "sub" / "helper.sh").write_text("echo helper says $1\n")
    (here / "sub" / "wf.sh").write_text(
        'n=$(cryopg step count -- sh -c "echo 41")\n'
        "./helper.sh \"$n\"\n"
        'echo "input: $(cat "$CRYO_INPUT_FILE")"\n'
        "cryopg sleep 500ms\n"
        "exit 3\n")
    (here / "sub" / "helper.sh").chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRYOPG_", "CRYO_", "PYTEST_"))}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run([sys.executable, "-m", "cryopg.cli.entry", "run", "sub/wf.sh",
                           "--input", '{"k": 1}'], cwd=here, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 3, done.stderr
    assert done.stdout.count("helper says 41") == 2  # both passes, around the sleep
    assert 'input: {"k": 1}' in done.stdout.replace('{"k":1}', '{"k": 1}')
    assert "started a local stack" in done.stderr
    state = here / ".cryopg"
    assert not (state / "dev.json").exists()  # nothing says a stack runs here any more
    assert not (state / "pgdata" / "postmaster.pid").exists()  # the cluster it started stopped
