"""Agent build ids and drains through real processes (issue 25): `cryopg agents` lists
builds and states, `cryopg agents drain --build OLD` lets the old agent finish its run and
exit while a new build takes the next one, and SIGTERM drains an agent the same way."""

from __future__ import annotations

import json
import signal
import subprocess

from tests.e2e.conftest import Split
from tests.e2e.helpers import lines, script, wait_for


def _agent(split: Split, name: str, build: str) -> subprocess.Popen[bytes]:
    split.env["CRYOPG_AGENT_BUILD"] = build
    try:
        return split.agent(name)
    finally:
        del split.env["CRYOPG_AGENT_BUILD"]


def _agents(split: Split) -> dict[str, dict]:
    done = split.cli("agents", "--json")
    assert done.returncode == 0, done.stderr
    return {a["id"]: a for a in json.loads(done.stdout)}


def _waiting_job(split: Split, name: str) -> tuple[str, object, object]:
    started, go = split.dir / f"{name}.started", split.dir / f"{name}.go"
    wf = script(split.dir, f"{name}.sh", f"""\
echo x >> {started}
while [ ! -f {go} ]; do sleep 0.05; done
echo {name} finished
""")
    run_id = split.cli("submit", str(wf)).stdout.strip()
    return run_id, started, go


def test_drain_by_build_finishes_the_run_then_the_old_agent_exits(split: Split) -> None:
    old = _agent(split, "old", "1.0+old")
    run_id, started, go = _waiting_job(split, "one")
    wait_for("the job to start", lambda: lines(started) == ["x"])  # type: ignore[arg-type]
    listed = _agents(split)
    assert listed["old-1"]["build"] == "1.0+old" and listed["old-1"]["state"] == "busy"
    table = split.cli("agents").stdout
    assert "1.0+old" in table and "busy" in table and run_id in table
    done = split.cli("agents", "drain", "--build", "1.0+old")
    assert done.returncode == 0 and "draining 1" in done.stdout, done.stderr
    bad = split.cli("agents", "drain")
    assert bad.returncode == 2 and "--build" in bad.stderr
    next_id, next_started, next_go = _waiting_job(split, "two")
    go.touch()  # type: ignore[attr-defined]
    assert old.wait(timeout=30) == 0  # finished its run, took no new one, exited
    show = json.loads(split.cli("runs", "show", run_id, "--json").stdout)
    assert show["status"] == "succeeded" and show["attempt"] == 1
    assert json.loads(split.cli("runs", "show", next_id, "--json").stdout)["status"] == "pending"
    _agent(split, "new", "1.1+new")
    wait_for("the new build to take the next run",
             lambda: lines(next_started) == ["x"])  # type: ignore[arg-type]
    next_go.touch()  # type: ignore[attr-defined]
    assert split.cli("logs", next_id, "--follow", timeout=30).returncode == 0
    assert _agents(split)["old-1"]["state"] in ("draining", "gone")


def test_sigterm_drains_an_agent_and_agent_drain_asks_by_id(split: Split) -> None:
    agent = split.agent("term")
    run_id, started, go = _waiting_job(split, "three")
    wait_for("the job to start", lambda: lines(started) == ["x"])  # type: ignore[arg-type]
    agent.send_signal(signal.SIGTERM)
    go.touch()  # type: ignore[attr-defined]
    assert agent.wait(timeout=30) == 0
    show = json.loads(split.cli("runs", "show", run_id, "--json").stdout)
    assert show["status"] == "succeeded" and show["attempt"] == 1  # finished, not handed back
    # `cryopg agent --drain --id ID` from anywhere with the agent token.
    idle = split.agent("idle")
    wait_for("the idle agent to register", lambda: "idle-1" in _agents(split))
    done = split.cli("agent", "--url", split.url, "--token", split.agent_token,
                     "--drain", "--id", "idle")
    assert done.returncode == 0 and "draining 1" in done.stdout, done.stderr
    assert idle.wait(timeout=40) == 0
