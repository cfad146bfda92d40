"""Timeouts, retry backoff and priority with real servers and agents (issue 39, items 3
and 7): a timed-out job's whole tree dies, the database fails a run whose agent is
frozen, a node's retries wait longer each time and only when retry_if says so, and a
high-priority run is claimed before an older low one."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.helpers import finished, script, show, wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_timed_out_job_is_killed_whole_and_exits_124(split: Any) -> None:
    """A body that ignores SIGTERM and SIGHUP and forks a child doing the same: at its
    timeout both get SIGTERM, then SIGKILL, and `submit --follow` exits 124 with the
    reason."""
    split.agent("a1")
    pids, termed = split.dir / "pids", split.dir / "termed"
    body = script(split.dir, "stubborn.sh", f"""
trap 'echo parent >> {termed}' TERM
trap '' HUP
sh -c 'trap "echo child >> {termed}" TERM; trap "" HUP; echo $$ >> {pids}; \
  while :; do sleep 1; done' &
echo $$ >> {pids}
while :; do sleep 1; done
""")
    done = split.cli("submit", str(body), "--timeout", "3s", "--follow", timeout=120)
    assert done.returncode == 124, (done.returncode, done.stderr)
    wait_for("both pids", lambda: len(pids.read_text().split()) == 2 if pids.exists() else False)
    procs = [int(p) for p in pids.read_text().split()]
    wait_for("the whole tree to die", lambda: not any(_alive(p) for p in procs), timeout=60)
    assert "child" in termed.read_text()  # TERM came first, KILL after the grace
    run_id = done.stderr.split("run ", 1)[1].split()[0]
    run = show(split, run_id)
    assert (run["status"], run["exit_code"], run["error"]) == ("failed", 124,
                                                              "timed out after 3s")


def test_the_database_fails_a_run_whose_agent_is_frozen(split: Any) -> None:
    """The agent is SIGSTOPped while its job runs: no agent will ever report, and the
    sweep fails the run at its deadline anyway."""
    agent = split.agent("a1")
    started = split.dir / "started"
    body = script(split.dir, "long.sh", f"touch {started}; sleep 300\n")
    done = split.cli("submit", str(body), "--timeout", "4s")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    wait_for("the job to start", started.exists)
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        run = finished(split, run_id, timeout=60)
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert (run["status"], run["exit_code"], run["error"]) == ("failed", 124,
                                                              "timed out after 4s")


def _graph(path: Path, nodes: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"version": "cryosleep-graph/v1", "nodes": nodes}))
    return path


def test_retries_back_off_exponentially_and_only_when_retry_if_holds(split: Any) -> None:
    """Attempts 1..4 of a node that exits 7 wait 1 s, 2 s, then max_delay's 3 s (timers in
    the database); a node whose failure retry_if refuses runs once."""
    split.agent("a1")
    doc = _graph(split.dir / "retry.json", [
        {"id": "flaky", "type": "shell", "config": {"run": "exit 7"},
         "retry": {"attempts": 4, "backoff": "exponential", "delay": "1s", "max_delay": "3s",
                   "retry_if": "failure.exit_code == 7"}},
        {"id": "other", "type": "shell", "config": {"run": "exit 3"}, "continue_on_error": True,
         "retry": {"attempts": 4, "backoff": "exponential", "delay": "1s",
                   "retry_if": "failure.exit_code == 7"}}])
    done = split.cli("submit", str(doc))
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert finished(split, run_id)["status"] == "failed"
    with psycopg.connect(split.dsn) as db:
        rows = db.execute(
            "SELECT key_name, attempt, detail FROM cryo.history"
            " WHERE run_id = %s AND kind = 'node_retry_scheduled' ORDER BY id",
            (run_id,)).fetchall()
        jobs = db.execute("SELECT graph_node, count(*) FROM cryo.runs WHERE parent_run_id = %s"
                          " GROUP BY 1 ORDER BY 1", (run_id,)).fetchall()
    assert [(n, a, d["delay"]) for n, a, d in rows if n == "flaky"] == [
        ("flaky", 1, 1.0), ("flaky", 2, 2.0), ("flaky", 3, 3.0)]
    assert [r for r in rows if r[0] == "other"] == []
    assert dict(jobs) == {"flaky": 4, "other": 1}


def test_a_node_timeout_fails_each_attempt_with_124(split: Any) -> None:
    """A node's timeout bounds each attempt's job; retry_if can take the timeouts."""
    split.agent("a1")
    doc = _graph(split.dir / "slow.json", [
        {"id": "slow", "type": "shell", "config": {"run": "sleep 300"}, "timeout": "2s",
         "retry": {"attempts": 2, "retry_if": "failure.exit_code == 124"}}])
    done = split.cli("submit", str(doc), "--follow", timeout=180)
    assert done.returncode == 124, (done.returncode, done.stderr)
    with psycopg.connect(split.dsn) as db:
        jobs = db.execute("SELECT exit_code, error FROM cryo.runs WHERE parent_run_id ="
                          " (SELECT id FROM cryo.runs WHERE parent_run_id IS NULL"
                          " AND kind = 'graph' ORDER BY id DESC LIMIT 1) ORDER BY id").fetchall()
    assert jobs == [(124, "timed out after 2s")] * 2


def test_a_later_high_priority_run_is_claimed_before_an_earlier_low_one(split: Any) -> None:
    """One agent, busy: a low-priority run, then a high one, wait; the high one goes first."""
    split.agent("a1")
    gate, order, busy = split.dir / "gate", split.dir / "order", split.dir / "busy"
    blocker = script(split.dir, "blocker.sh",
                     f"touch {busy}; while [ ! -e {gate} ]; do sleep 0.1; done\n")
    assert split.cli("submit", str(blocker)).returncode == 0
    wait_for("the agent to be busy", busy.exists)
    low = script(split.dir, "low.sh", f"echo low >> {order}\n")
    high = script(split.dir, "high.sh", f"echo high >> {order}\n")
    assert split.cli("submit", str(low)).returncode == 0
    made = split.cli("submit", str(high), "--priority", "5")
    assert made.returncode == 0, made.stderr
    gate.touch()
    wait_for("both runs", lambda: order.exists() and len(order.read_text().split()) == 2)
    assert order.read_text().split() == ["high", "low"]
