"""Concurrency admission and script leases through a real stack: what needs scripts
running in agents. Submit-time admission (queue limit, policies) is tested in process
in tests/server/test_runs.py."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.e2e.helpers import lines, script, submit, wait_for


@pytest.mark.agents(3)
def test_queue_runs_one_at_a_time_in_submit_order(stack: Any) -> None:
    trace, gate = stack.dir / "trace", stack.dir / "gate"
    wf = script(stack.dir, "serial.sh", f"""\
n=$(cat "$CRYO_INPUT_FILE")
echo "start $n" >> {trace}
while [ ! -f {gate} ]; do sleep 0.05; done
sleep 0.2
echo "end $n" >> {trace}
""")
    ids = []
    for i in range(5):
        done = stack.cli("submit", str(wf), "--input", str(i), "--concurrency", "deploy")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
        if i:
            assert f"queued at position {i}" in done.stderr
    listing = stack.cli("runs").stdout
    assert "queued" in listing and "position 1" in listing
    gate.touch()
    for run_id in ids:
        assert stack.cli("logs", run_id, "--follow", timeout=60).returncode == 0
    expected = [f"{w} {i}" for i in range(5) for w in ("start", "end")]
    assert lines(trace) == expected


def test_five_scripts_increment_under_a_bare_lock_to_the_exact_total(stack: Any) -> None:
    wf = script(stack.dir, "tally.sh", """\
cryopg lock tally
n=$(cryopg state get total --entity counters)
cryopg sleep 200ms
cryopg state set total $(( ${n:-0} + 1 )) --entity counters
""")
    ids = [submit(stack, wf) for _ in range(5)]
    for run_id in ids:
        assert stack.cli("logs", run_id, "--follow", timeout=60).returncode == 0
    got = stack.cli("state", "get", "total", "--entity", "counters")
    assert got.stdout.strip() == "5", got.stdout + got.stderr
    twice = script(stack.dir, "twice.sh", "cryopg lock t\ncryopg lock t\n")
    again = stack.cli("submit", str(twice), "--follow")
    assert again.returncode != 0 and "already holds" in again.stdout


def test_bracketed_lock_runs_the_command_once_and_releases(stack: Any) -> None:
    calls = stack.dir / "calls"
    wf = script(stack.dir, "bracket.sh", f"""\
cryopg lock deploy -- sh -c 'echo x >> {calls}; echo inside'
cryopg sleep 200ms
echo "after rc=$?"
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=30)
    assert done.returncode == 0 and done.stdout.count("inside") == 2
    assert lines(calls) == ["x"]
    nxt = script(stack.dir, "next.sh", "cryopg lock deploy -- echo free\n")
    other = stack.cli("submit", str(nxt), "--follow", timeout=30)
    assert other.returncode == 0 and "free" in other.stdout


def test_a_holder_whose_agent_dies_does_not_wedge_the_group(split: Any) -> None:
    started, gate = split.dir / "started", split.dir / "gate"
    wf = script(split.dir, "hold.sh", f"""\
cryopg step work -- sh -c 'echo x >> {started}; while [ ! -f {gate} ]; do sleep 0.05; done'
echo held
""")
    doomed = split.agent("doomed")
    holder = split.cli("submit", str(wf), "--concurrency", "one").stdout.strip()
    waiter = split.cli("submit", str(script(split.dir, "after.sh", "echo next\n")),
                       "--concurrency", "one").stdout.strip()
    wait_for("the holder to run", lambda: lines(started) == ["x"])
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait()
    split.agent("rescuer")
    wait_for("the holder to be re-run", lambda: len(lines(started)) == 2, timeout=30)
    gate.touch()
    assert split.cli("logs", holder, "--follow", timeout=30).returncode == 0
    done = split.cli("logs", waiter, "--follow", timeout=30)
    assert done.returncode == 0 and "next" in done.stdout
