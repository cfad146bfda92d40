"""Nothing a job started outlives its agent, its claim or a drain (issue 36, items 4-6),
through real servers, agents and HAProxy.

- A kill storm: agents are killed with SIGKILL again and again while workflows run many
  steps whose bodies ignore SIGHUP and SIGTERM, leave a child in a session of its own and
  a double-forked one, and append to a side-effect file, each line saying whether the
  body's agent was still alive. No line may come from a body whose agent was dead (an
  old process that lived on). A body killed mid-way and run again is the at-least-once
  the spec keeps; so is a body that completed but whose record its dying agent never
  sent. Both are counted and printed.
- After `kill -9` of an agent mid-step, neither /dev/shm nor the temp dir holds its job
  directories (the script, the decrypted input), with no other agent started on the host.
- A SIGSTOPped agent's body, and what it forked away, die as its claim lapses.
- Behind HAProxy (deploy/haproxy.cfg's options): an agent drained by SIGTERM or killed
  while long-polling gets no run claimed for it (the next run goes to a live agent at
  attempt 1), `cryopg agents` shows it gone within seconds, and a busy agent drained by
  SIGTERM is shown draining, finishes its run and takes no new one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.deploy import Balancer, Chaos
from tests.e2e.helpers import script, wait_for

# A step body as stubborn as the operator's. `say` appends one line to the effect file:
# what happened, the step, the run's attempt, and whether the body's agent was alive.
BODY = textwrap.dedent("""\
    trap '' HUP TERM
    mode=$1 name=$2 attempt=$3 agent=$4 out=$5
    say() {
        if kill -0 "$agent" 2>/dev/null; then s=live; else s=dead; fi
        echo "$1 $name $attempt $s" >> "$out"
    }
    case $mode in
    body)
        say start
        setsid bash "$0" setsid "$name" "$attempt" "$agent" "$out" </dev/null >/dev/null 2>&1 &
        ( bash "$0" double "$name" "$attempt" "$agent" "$out" </dev/null >/dev/null 2>&1 & )
        sleep 0.4
        say done ;;
    *)
        sleep 0.3
        say "$mode" ;;
    esac
    """)


@pytest.fixture
def split(chaos: Chaos) -> Chaos:
    """One replica, r1; each test starts its agents."""
    chaos.replica("r1")
    return chaos


def _workflow(split: Chaos, steps: int) -> Path:
    body = split.dir / "body.sh"
    body.write_text(BODY)
    wf = "\n".join([
        # A trusted run's script is the agent's own child; one effect file per run.
        f"agent=$PPID out={split.dir}/effects-${{CRYO_RUN_ID##*:}}",
        *(f'cryopg step s{i} -- bash {body} body s{i} "$CRYO_ATTEMPT" "$agent" "$out"'
          for i in range(steps)),
        "echo all steps done",
    ]) + "\n"
    return script(split.dir, "storm.sh", wf)


def _effects(split: Chaos) -> dict[str, list[tuple[str, str, int, str]]]:
    got: dict[str, list[tuple[str, str, int, str]]] = {}
    for f in split.dir.glob("effects-*"):
        rows = []
        for line in f.read_text().splitlines():
            what, name, attempt, alive = line.split()
            rows.append((what, name, int(attempt), alive))
        got[f.name.removeprefix("effects-")] = rows
    return got


def _runs(split: Chaos, ids: list[str]) -> dict[str, tuple[str, int]]:
    """(status, attempt) of each run, read from the database (a CLI call per poll would
    cost an interpreter start each)."""
    rows = split.sql("SELECT id, status, attempt FROM cryo.runs WHERE id = ANY(%s)", (ids,))
    return {r: (status, attempt) for r, status, attempt in rows}


def test_a_kill_storm_runs_no_body_on_past_its_agent(split: Chaos) -> None:
    runs, steps, agents = 3, 10, 3
    wf = _workflow(split, steps)
    live = [f"storm{i}" for i in range(agents)]
    for name in live:
        split.agent(name)
    ids = []
    for _ in range(runs):
        done = split.cli("r1", "submit", str(wf))
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.strip())
    rng = random.Random(36)
    kills = 0
    n = agents

    def ended() -> bool:
        return all(s in ("succeeded", "failed", "cancelled")
                   for s, _ in _runs(split, ids).values())

    # Kill an agent while some body runs, start a new one each time, until enough kills
    # happened; then the runs finish in peace. Where inside a body (by what it has said
    # so far, not by a clock): just started, or once what it forked away has written.
    while kills < 12 and not ended():
        phases = rng.choice((("start",), ("setsid", "double")))
        wait_for("some body to be running", lambda p=phases: ended() or any(
            rows and rows[-1][0] in p for rows in _effects(split).values()),
            timeout=60, every=0.02)
        victim = live.pop(rng.randrange(len(live)))
        split.kill_agent(victim)
        kills += 1
        n += 1
        live.append(f"storm{n}")
        split.agent(live[-1])
    wait_for("every run to end", ended, timeout=120)
    assert all(s == "succeeded" for s, _ in _runs(split, ids).values()), _runs(split, ids)

    effects = _effects(split)
    dead = [(run, row) for run, rows in effects.items() for row in rows if row[3] == "dead"]
    assert not dead, f"effects written after their agent died: {dead[:10]}"
    reran = done_twice = 0
    for run, rows in effects.items():
        starts = Counter(name for what, name, _, _ in rows if what == "start")
        dones = Counter(name for what, name, _, _ in rows if what == "done")
        assert set(dones) == {f"s{i}" for i in range(steps)}, (run, rows)
        reran += sum(c - 1 for c in starts.values())
        done_twice += sum(c - 1 for c in dones.values())
        # A body's effect never lands after a later attempt of its run started.
        latest = 0
        for what, name, attempt, _ in rows:
            if what == "start":
                latest = max(latest, attempt)
            else:
                assert attempt >= latest, (run, what, name, attempt, latest)
    print(f"\nkill storm: {kills} agent kills, {runs * steps} steps; {reran} bodies started "
          f"again (killed mid-way, or completed but unrecorded: at-least-once); "
          f"{done_twice} of them had completed their effect before; 0 effects after "
          f"their agent died")


def _job_dirs(pid: int) -> list[str]:
    found = []
    for parent in {"/dev/shm", tempfile.gettempdir()}:
        try:
            found += [os.path.join(parent, n) for n in os.listdir(parent)
                      if n.startswith(f"cryo-{pid}-")]
        except OSError:
            pass
    return found


def test_no_plaintext_is_left_after_kill_9_of_an_agent_mid_step(split: Chaos) -> None:
    marker = f"plaintext-{os.getpid()}-{time.monotonic_ns()}"
    started = split.dir / "started"
    wf = script(split.dir, "secret.sh", textwrap.dedent(f"""\
        cryopg step hold -- bash -c 'trap "" HUP TERM; echo go > {started}; exec sleep 300'
        """))
    agent = split.agent("plain")
    done = split.cli("r1", "submit", str(wf), "--input", json.dumps({"token": marker}))
    assert done.returncode == 0, done.stderr
    wait_for("the step to start", started.exists, timeout=60)
    held = _job_dirs(agent.pid)
    assert held, "the job's directories are named after its agent"
    assert any(marker in Path(d, "input.json").read_text() for d in held
               if Path(d, "input.json").exists())
    split.kill_agent("plain")
    # No other agent starts on this host meanwhile: the dead agent's guard cleans up.
    wait_for("the job directories to go", lambda: not _job_dirs(agent.pid), timeout=15)


def test_a_stopped_agents_body_dies_as_its_claim_lapses(split: Chaos) -> None:
    pids = split.dir / "pids"
    pids.mkdir()
    stubborn = split.dir / "stubborn.sh"
    stubborn.write_text(textwrap.dedent("""\
        trap '' HUP TERM
        setsid bash -c 'echo $$ > "$1/setsid"; exec sleep 300' _ "$1" </dev/null >/dev/null 2>&1 &
        ( bash -c 'echo $$ > "$1/double"; exec sleep 300' _ "$1" </dev/null >/dev/null 2>&1 & )
        echo $$ > "$1/leader"
        exec sleep 300
        """))
    wf = script(split.dir, "stop.sh", f"cryopg step hold -- bash {stubborn} {pids}\n")
    agent = split.agent("frozen")
    run_id = split.cli("r1", "submit", str(wf)).stdout.strip()
    names = ("leader", "setsid", "double")
    wait_for("the body and its escapees", lambda: all(
        (pids / n).exists() and (pids / n).read_text().strip() for n in names), timeout=60)
    procs = {n: int((pids / n).read_text()) for n in names}
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        wait_for("the guard to kill the body and its escapees as the claim lapses",
                 lambda: not any(_alive(p) for p in procs.values()), timeout=30)
        assert agent.poll() is None
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    assert split.cli("r1", "cancel", run_id).returncode == 0


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


# -- drains and the balancer ---------------------------------------------------------


@pytest.fixture
def balanced(split: Chaos) -> tuple[Chaos, Balancer]:
    """HAProxy with deploy/haproxy.cfg's defaults in front of r1."""
    return split, split.balancer(["r1"])


def _agent_via(split: Chaos, lb: Balancer, name: str) -> subprocess.Popen[bytes]:
    return split.agent(name, url=lb.url)


def _states(split: Chaos) -> dict[str, str]:
    """What `cryopg agents` lists (cryo.list_agents), read without an interpreter start."""
    return dict(split.sql("SELECT id, state FROM cryo.list_agents('dev')"))


def _cli_states(split: Chaos) -> dict[str, str]:
    done = split.cli("r1", "agents", "--json")
    assert done.returncode == 0, done.stderr
    return {a["id"]: a["state"] for a in json.loads(done.stdout)}


def _long_polling(split: Chaos, agent_id: str) -> bool:
    return _states(split).get(agent_id) == "idle"


def test_behind_haproxy_a_gone_long_poll_is_granted_nothing(
        balanced: tuple[Chaos, Balancer]) -> None:
    split, lb = balanced
    wf = script(split.dir, "quick.sh", "echo quick\n")
    for i, how in enumerate((signal.SIGTERM, signal.SIGKILL, signal.SIGTERM)):
        agent = _agent_via(split, lb, f"lb{i}")
        wait_for("the agent to long-poll", lambda i=i: _long_polling(split, f"lb{i}-1"),
                 timeout=30)
        agent.send_signal(how)
        agent.wait(timeout=30)
        wait_for("cryopg agents to show it gone",
                 lambda i=i: _states(split).get(f"lb{i}-1") == "gone", timeout=10)
        # The next run is not claimed for the agent that went (it would run at attempt 2,
        # once that claim expired): a live agent, started now, takes it at attempt 1.
        run_id = split.cli("r1", "submit", str(wf)).stdout.strip()
        _agent_via(split, lb, f"taker{i}")
        wait_for("the run to end", lambda r=run_id: _runs(split, [r])[r][0] not in (
            "pending", "running"), timeout=60)
        assert _runs(split, [run_id])[run_id] == ("succeeded", 1), _runs(split, [run_id])
        split.kill_agent(f"taker{i}")
    assert _cli_states(split)["lb2-1"] == "gone"


def test_a_sigterm_drained_busy_agent_takes_no_new_run(
        balanced: tuple[Chaos, Balancer]) -> None:
    split, lb = balanced
    started, go = split.dir / "started", split.dir / "go"
    wf = script(split.dir, "hold.sh", f"echo x > {started}\n"
                f"while [ ! -f {go} ]; do sleep 0.05; done\necho held done\n")
    agent = _agent_via(split, lb, "busy")
    first = split.cli("r1", "submit", str(wf)).stdout.strip()
    wait_for("the job to start", started.exists, timeout=60)
    nxt_wf = script(split.dir, "next.sh", "echo next\n")
    second = split.cli("r1", "submit", str(nxt_wf)).stdout.strip()
    agent.send_signal(signal.SIGTERM)
    wait_for("cryopg agents to show it draining",
             lambda: _states(split).get("busy-1") == "draining", timeout=10)
    assert _cli_states(split)["busy-1"] == "draining"
    go.touch()
    assert agent.wait(timeout=60) == 0
    wait_for("cryopg agents to show it gone", lambda: _states(split).get("busy-1") == "gone",
             timeout=10)
    show = json.loads(split.cli("r1", "runs", "show", first, "--json").stdout)
    assert show["status"] == "succeeded" and show["attempt"] == 1
    nxt = json.loads(split.cli("r1", "runs", "show", second, "--json").stdout)
    assert nxt["status"] == "pending" and nxt["attempt"] == 0, nxt  # never claimed
    _agent_via(split, lb, "after")
    assert split.cli("r1", "logs", second, "--follow", timeout=60).returncode == 0
    nxt = json.loads(split.cli("r1", "runs", "show", second, "--json").stdout)
    assert nxt["status"] == "succeeded" and nxt["attempt"] == 1, nxt
