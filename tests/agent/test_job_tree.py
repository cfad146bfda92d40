"""Nothing a job starts outlives its end, its agent or its claim (issue 36, item 4): a
body that ignores SIGHUP and SIGTERM, double-forks and calls setsid is killed whole when
the job ends, when its agent is killed with SIGKILL (the guard), and when its claim
lapses while the agent cannot act (the guard again); the job's directories go too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent.jobtree import Cgroups, Guard, JobTree, host_setup
from agent.runner import PtyProcess
from tests.e2e.helpers import wait_for

# A body as stubborn as the operator's: it ignores SIGHUP and SIGTERM, and leaves one
# child in a session of its own and one double-forked (adopted by init), all sleeping.
STUBBORN = textwrap.dedent("""\
    trap '' HUP TERM
    setsid bash -c 'echo $$ > "$1/setsid"; exec sleep 300' _ "$1" &
    ( ( echo $BASHPID > "$1/double"; exec sleep 300 ) & )
    echo $$ > "$1/leader"
    exec sleep 300
    """)
NAMES = ("leader", "setsid", "double")


def _pids(d: Path) -> dict[str, int]:
    return {n: int((d / n).read_text()) for n in NAMES if (d / n).exists()
            and (d / n).read_text().strip()}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _cgroups() -> Cgroups:
    cg = host_setup()[0]
    if cg is None:
        pytest.skip("no writable cgroup v2 here: only process groups are killed")
    return cg


async def test_killing_a_job_kills_what_left_its_session_and_group(tmp_path: Path) -> None:
    _cgroups()
    script = tmp_path / "body.sh"
    script.write_text(STUBBORN)
    tree = JobTree([], None)
    proc = await PtyProcess.spawn(["bash", str(script), str(tmp_path)], cwd=str(tmp_path),
                                  env={"PATH": os.environ["PATH"]}, on_output=lambda _b: None,
                                  tree=tree)
    wait_for("the body and its escapees", lambda: len(_pids(tmp_path)) == 3)
    pids = _pids(tmp_path)
    assert all(_alive(p) for p in pids.values())
    # The escapees really escaped: another session, and not the leader's child.
    assert os.getsid(pids["setsid"]) != os.getsid(pids["leader"])
    proc.kill()
    assert await proc.wait() == 128 + signal.SIGKILL
    proc.close()
    wait_for("every process of the job to die",
             lambda: not any(_alive(p) for p in pids.values()), timeout=10)
    cgroup = tree.cgroup
    tree.close()
    assert cgroup is None or not os.path.exists(cgroup)


# A stand-in for an agent process: starts the stubborn body as a job (its tree told to
# the guard), writes plaintext into the job's directory, then waits to be killed or
# stopped. Given a claim of N seconds it never renews it.
FAKE_AGENT = textwrap.dedent("""\
    import asyncio, os, sys, time
    sys.path.insert(0, {root!r})
    from agent.jobtree import JobTree
    from agent.runner import PtyProcess

    async def main(out, private, claim):
        deadline = time.monotonic() + claim if claim else None
        tree = JobTree([private], deadline)
        with open(os.path.join(private, "input.json"), "w") as f:
            f.write('{{"secret": "plaintext"}}')
        await PtyProcess.spawn(["bash", os.path.join(out, "body.sh"), out], cwd=out,
                               env={{"PATH": os.environ["PATH"]}}, on_output=lambda b: None,
                               tree=tree)
        open(os.path.join(out, "started"), "w").close()
        await asyncio.sleep(600)

    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
    """)


def _fake_agent(tmp_path: Path, claim: float) -> tuple[subprocess.Popen[bytes], Path]:
    (tmp_path / "body.sh").write_text(STUBBORN)
    root = str(Path(__file__).resolve().parents[2])
    (tmp_path / "agent.py").write_text(FAKE_AGENT.format(root=root))
    private = Path("/dev/shm" if os.access("/dev/shm", os.W_OK) else tmp_path) / \
        f"cryo-test-{os.getpid()}-{time.monotonic_ns()}"
    private.mkdir()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "agent.py"), str(tmp_path),
                             str(private), str(claim)], start_new_session=True)
    wait_for("the fake agent's job to start",
             lambda: (tmp_path / "started").exists() and len(_pids(tmp_path)) == 3, timeout=30)
    return proc, private


def test_a_killed_agents_guard_kills_its_jobs_and_removes_their_plaintext(
        tmp_path: Path) -> None:
    _cgroups()
    agent, private = _fake_agent(tmp_path, 0)
    try:
        pids = _pids(tmp_path)
        assert (private / "input.json").exists()
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        wait_for("the guard to kill every process of the job",
                 lambda: not any(_alive(p) for p in pids.values()), timeout=10)
        wait_for("the guard to remove the job's directory", lambda: not private.exists(),
                 timeout=10)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def test_a_stopped_agents_job_is_killed_when_its_claim_lapses(tmp_path: Path) -> None:
    _cgroups()
    agent, private = _fake_agent(tmp_path, 2.0)
    try:
        pids = _pids(tmp_path)
        agent.send_signal(signal.SIGSTOP)
        wait_for("the guard to kill the lapsed claim's job",
                 lambda: not any(_alive(p) for p in pids.values()), timeout=15)
        assert not private.exists()
        assert agent.poll() is None  # the agent itself is only stopped
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()


def test_a_guard_that_died_is_started_again_and_told_the_live_jobs(tmp_path: Path) -> None:
    guard = Guard()
    d = tmp_path / "job"
    d.mkdir()
    guard.send({"op": "job", "key": "1", "cgroup": None, "dirs": [str(d)], "deadline": None})
    first = guard._proc
    assert first is not None
    first.kill()
    first.wait()
    guard.send({"op": "renew", "key": "1", "deadline": time.monotonic() + 600})
    assert guard._proc is not None and guard._proc is not first
    guard.close()  # EOF: the new guard removes what it was told again
    assert not d.exists()
