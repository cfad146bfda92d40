"""Untrusted runs, tried as an attacker would, through a real `cryopg dev`: the script
goes after the agent's credentials, memory, database and network, and every move must
fail. Also: an agent that cannot confine jobs takes no untrusted run, job directories
are private and swept, and the CLI inside a run never acts with the stack's credentials."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agent.job import sweep_job_dirs
from tests.conftest import _cluster
from tests.e2e.helpers import script, show, submit, wait_for

# Whole-log assertions: a claim lapsing on a loaded machine would replay a pass and
# print its lines twice, so these runs keep a claim long enough to ride out the load.
pytestmark = pytest.mark.claim_seconds(30)

SECRET = "isolation-SECRET-7731"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (scripts/setup installs it)")

ATTACK = """\
leak() {{ echo "LEAK $1"; }}
echo "uid=$(id -u)"
for f in {cryodir}/dev.json {cryodir}/master.key; do
  [ -r "$f" ] && leak "read $f: $(head -c 200 "$f")"
done
for p in /proc/*/environ /proc/*/cmdline; do
  tr '\\0' ' ' < "$p" 2>/dev/null | grep -q -e {token_head} -e CRYOPG_ && leak "$p"
done
[ -r /proc/$PPID/mem ] && head -c 1 /proc/$PPID/mem >/dev/null 2>&1 && leak "parent memory"
env | grep -q -e '^CRYOPG_' && leak "agent environment"
python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect("{sockdir}/.s.PGSQL.{port}")' \\
  2>/dev/null && leak "database socket"
python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", {http_port}), 2)' \\
  2>/dev/null && leak "server over tcp"
touch {venv}/pwned 2>/dev/null && leak "wrote the virtualenv"
touch {code}/pwned 2>/dev/null && leak "wrote the agent's code"
env -u CRYO_SOCKET cryopg runs >/dev/null 2>&1 && leak "cli acted as the dev owner"
ls -d /dev/shm/cryo-* /tmp/cryo-* 2>/dev/null | grep -v "^$(dirname "$CRYO_INPUT_FILE")\\$" \\
  | grep -v "^$PWD\\$" | grep -q . && leak "another job's directory"
d=$(dirname "$CRYO_INPUT_FILE")
echo "input mode $(stat -c %a "$CRYO_INPUT_FILE") dir mode $(stat -c %a "$d")"
cryopg step still-works -- echo durable
echo done
"""


@needs_bwrap
def test_an_untrusted_run_reaches_no_credential_memory_socket_or_network(stack: Any) -> None:
    done = stack.cli("secret", "set", "API_KEY", input=SECRET + "\n")
    assert done.returncode == 0, done.stderr
    code = Path(__file__).resolve().parents[2]
    wf = script(stack.dir, "attack.sh", ATTACK.format(
        cryodir=stack.dir / ".cryopg", token_head=stack.info["agent_token"][:12],
        sockdir=_cluster.sockdir, port=_cluster.port, http_port=stack.url.rsplit(":", 1)[1],
        venv=Path(sys.executable).parent.parent, code=code / "cryopg"))
    run_id = submit(stack, wf, "--untrusted")
    out = stack.cli("logs", run_id, "--follow")
    assert out.returncode == 0, out.stdout + out.stderr
    log = out.stdout
    assert "durable" in log and "done" in log, log
    assert "LEAK" not in log, log
    if os.geteuid() == 0:
        assert "uid=65534" in log, log  # not the agent's user
    assert "input mode 600 dir mode 700" in log, log
    for secret in (SECRET, stack.info["agent_token"], stack.info["user_token"],
                   (stack.dir / ".cryopg" / "master.key").read_text().strip()):
        assert secret not in log
    assert not (code / "cryopg" / "pwned").exists()


@pytest.mark.dev_env(CRYOPG_SANDBOX="off")
def test_an_agent_that_cannot_isolate_leaves_untrusted_runs_waiting(stack: Any) -> None:
    wf = script(stack.dir, "u.sh", "echo ran\n")
    untrusted = submit(stack, wf, "--untrusted")
    trusted = submit(stack, wf)
    assert stack.cli("logs", trusted, "--follow").returncode == 0
    assert show(stack, untrusted)["status"] == "pending"
    wait_for("the agent to say why", lambda: "cannot isolate jobs (CRYOPG_SANDBOX=off)" in
             (stack.dir / "dev.stderr").read_text())


@needs_bwrap
@pytest.mark.agents(0)
def test_an_isolating_agent_confines_trusted_runs_too_and_they_keep_their_secrets(
        stack: Any) -> None:
    done = stack.cli("secret", "set", "API_KEY", input=SECRET + "\n")
    assert done.returncode == 0, done.stderr
    env = dict(stack.env, CRYOPG_URL=stack.url, CRYOPG_AGENT_TOKEN=stack.info["agent_token"])
    agent = subprocess.Popen(
        [sys.executable, "-m", "cryopg.cli.entry", "agent", "--isolate", "--id", "iso"],
        cwd=stack.dir, env=env)
    try:
        wf = script(stack.dir, "t.sh", f"""\
echo "uid=$(id -u) key=${{API_KEY:+set}}"
[ -r {stack.dir}/.cryopg/dev.json ] && echo LEAK
echo "$API_KEY" | rev
""")
        done = stack.cli("submit", str(wf), "--interpreter", "bash", "--follow")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "key=set" in done.stdout and "LEAK" not in done.stdout
        if os.geteuid() == 0:
            assert "uid=65534" in done.stdout
    finally:
        agent.terminate()
        agent.wait(15)


def test_a_step_body_cannot_make_durable_calls_or_act_as_the_owner(stack: Any) -> None:
    wf = script(stack.dir, "n.sh", """\
cryopg step outer -- sh -c 'cryopg state set k v' && echo "LEAK nested state"
cryopg step outer2 -- sh -c 'cryopg step inner -- echo hi' && echo "LEAK nested step"
cryopg step outer3 -- sh -c 'cryopg runs' && echo "LEAK owner from a step body"
env -u CRYO_SOCKET -u CRYO_RUN_ID -u CRYO_INPUT_FILE -u CRYO_IDEMPOTENCY_KEY true
env -u CRYO_SOCKET cryopg submit n.sh && echo "LEAK submitted as the owner"
echo done
""")
    run_id = submit(stack, wf)
    out = stack.cli("logs", run_id, "--follow")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "LEAK" not in out.stdout and "done" in out.stdout, out.stdout
    assert "a durable call cannot be made inside a step" in out.stdout, out.stdout
    assert "never uses the dev stack's credentials" in out.stdout, out.stdout
    runs = json.loads(stack.cli("runs", "--json").stdout)
    assert len(runs if isinstance(runs, list) else runs["runs"]) == 1


def test_job_directories_of_a_dead_agent_are_swept_and_a_live_ones_kept() -> None:
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = Path(tempfile.mkdtemp(prefix=f"cryo-{dead.pid}-", dir=parent))
    (stale / "input.json").write_text('{"card": "4111"}')
    live = Path(tempfile.mkdtemp(prefix=f"cryo-{os.getpid()}-", dir=parent))
    try:
        assert sweep_job_dirs() >= 1
        assert not stale.exists() and live.exists()
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)
