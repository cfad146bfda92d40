"""The issue's workflow through a real `cryopg dev`: steps, sleep, replay, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import lines, script, show, submit, wait_for


def test_step_sleep_step_resumes_with_the_recorded_answer(stack: Any) -> None:
    counter = stack.dir / "count.calls"
    wf = script(stack.dir, "wf.sh", f"""\
n=$(cryopg step count -- sh -c 'echo call >> {counter}; echo 41')
echo "before sleep: $n"
cryopg sleep 2s
r=$(cryopg step add -- sh -c "echo \\$(( $n + 1 ))")
echo "after sleep: $r"
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=60)
    assert done.returncode == 0, done.stderr
    # The log holds both passes: the first up to the sleep, the replay to the end.
    assert done.stdout.count("before sleep: 41") == 2
    assert "after sleep: 42" in done.stdout
    assert lines(counter) == ["call"]  # the count step ran once
    run_id = json.loads(stack.cli("runs", "--json").stdout)[0]["id"]
    run = show(stack, run_id)
    assert run["status"] == "succeeded" and run["attempt"] == 2
    kinds = [(e["kind"], e.get("name")) for e in run["history"]]
    assert kinds.count(("step_completed", "count")) == 1
    assert ("timer_fired", "") in kinds


def test_a_sleeping_run_frees_the_only_agent(stack: Any) -> None:
    sleeper = submit(stack, script(stack.dir, "sleeper.sh", "cryopg sleep 8s\necho woke\n"))
    wait_for("the sleeper to park", lambda: show(stack, sleeper)["substate"] == "sleeping")
    runs = stack.cli("runs").stdout
    assert "parked" in runs and "sleeping" in runs
    quick = stack.cli("submit", str(script(stack.dir, "quick.sh", "echo quick\n")), "--follow")
    assert quick.returncode == 0 and "quick" in quick.stdout
    # The quick run finished on the single agent while the first still slept.
    assert show(stack, sleeper)["status"] == "parked"
    followed = stack.cli("logs", sleeper.split(":")[-1], "--follow", timeout=30)
    assert followed.returncode == 0 and "woke" in followed.stdout


def test_step_exit_code_is_recorded_and_replayed(stack: Any) -> None:
    calls = stack.dir / "fail.calls"
    wf = script(stack.dir, "codes.sh", f"""\
rc=0; cryopg step flaky -- sh -c 'echo x >> {calls}; echo out; exit 3' || rc=$?
echo "rc=$rc"
cryopg sleep 1s
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("rc=3") == 2 and done.stdout.count("out") == 2
    assert lines(calls) == ["x"]


def test_failed_run_exits_with_the_script_code(stack: Any) -> None:
    done = stack.cli("submit", str(script(stack.dir, "f.sh", "echo bye\nexit 7\n")), "--follow")
    assert done.returncode == 7 and "bye" in done.stdout
    assert "failed" in done.stderr


def test_input_file_and_step_environment(stack: Any) -> None:
    wf = script(stack.dir, "env.sh", """\
cat "$CRYO_INPUT_FILE"; echo
for i in 1 2; do
  cryopg step key -- sh -c 'echo "key=$CRYO_IDEMPOTENCY_KEY"; \
env | grep "^CRYO_" | grep -v IDEMPOTENCY || true'
done
test -S "$CRYO_SOCKET" && echo socket-ok
""")
    done = stack.cli("submit", str(wf), "--input", '{"n": 5}', "--follow")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '"n": 5' in out or '"n":5' in out
    keys = [ln for ln in out.splitlines() if ln.startswith("key=")]
    assert len(keys) == 2 and keys[0] != keys[1] and len(keys[0]) > 10  # one per iteration
    assert "CRYO_SOCKET" not in out.replace("$CRYO_SOCKET", "")  # step bodies see no handles
    assert "socket-ok" in out


def test_cancel_parked_and_running_runs(stack: Any) -> None:
    parked = submit(stack, script(stack.dir, "long.sh", "cryopg sleep 1h\n"))
    wait_for("park", lambda: show(stack, parked)["status"] == "parked")
    done = stack.cli("cancel", parked.split(":")[-1])
    assert done.returncode == 0 and "cancelled" in done.stdout
    assert show(stack, parked)["status"] == "cancelled"
    again = stack.cli("cancel", parked)
    assert again.returncode != 0 and "already finished" in again.stderr

    started = stack.dir / "started"
    busy = script(stack.dir, "busy.sh", f"touch {started}\nwhile true; do sleep 0.1; done\n")
    running = submit(stack, busy)
    wait_for("the script to start", started.exists)
    assert "cancelling" in stack.cli("cancel", running).stdout
    followed = stack.cli("logs", running, "--follow", timeout=30)
    assert followed.returncode == 130
    assert show(stack, running)["status"] == "cancelled"


def test_annotations_show_in_the_run(stack: Any) -> None:
    wf = script(stack.dir, "a.sh", "cryopg annotate 'deploying v2'\n")
    done = stack.cli("submit", str(wf), "--follow")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(stack.cli("runs", "--json").stdout)[0]["id"]
    texts = [e.get("text") for e in show(stack, run_id)["history"] if e["kind"] == "annotation"]
    assert texts == ["deploying v2"]
    assert "deploying v2" in stack.cli("runs", "show", run_id).stdout


def test_determinism_error_names_both_calls(stack: Any) -> None:
    flag = stack.dir / "flag"
    wf = script(stack.dir, "branchy.sh", f"""\
if [ -f {flag} ]; then cryopg step second -- true; else cryopg step first -- true; fi
touch {flag}
cryopg sleep 1s
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=30)
    assert done.returncode != 0
    run_id = json.loads(stack.cli("runs", "--json").stdout)[0]["id"]
    run = show(stack, run_id)
    assert run["status"] == "failed"
    assert "determinism" in run["error"]
    assert "step/first/0" in run["error"] and "step/second/0" in run["error"]


@pytest.mark.dev_env(CRYO_REPLAY_MODE="lenient")
def test_lenient_replay_mode_lets_the_branch_change(stack: Any) -> None:
    flag = stack.dir / "flag"
    wf = script(stack.dir, "branchy.sh", f"""\
if [ -f {flag} ]; then cryopg step second -- echo two; else cryopg step first -- echo one; fi
touch {flag}
cryopg sleep 1s
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "one" in done.stdout and "two" in done.stdout


def test_bad_input_gets_one_line_errors(stack: Any, tmp_path: Path) -> None:
    missing = stack.cli("submit", "nope.sh")
    assert missing.returncode != 0 and "no such script" in missing.stderr
    bad_json = stack.cli("submit", str(script(stack.dir, "x.sh", "true\n")), "--input", "{oops")
    assert bad_json.returncode != 0 and "not valid JSON" in bad_json.stderr
    unknown = stack.cli("frobnicate")
    assert unknown.returncode == 2 and "No such command" in unknown.stderr
    outside = stack.cli("step", "x", "--", "true")
    assert outside.returncode != 0 and "not inside a run" in outside.stderr
    bad_sleep = stack.cli("submit", str(script(stack.dir, "dur.sh", "cryopg sleep 5x\n")),
                          "--follow")
    assert bad_sleep.returncode != 0 and "5x" in bad_sleep.stdout
    unknown_run = stack.cli("runs", "show", "run-0000000000000000")
    assert unknown_run.returncode == 2 and "no run" in unknown_run.stderr
    nowhere = dict(stack.env, CRYOPG_URL="http://127.0.0.1:9", CRYOPG_TOKEN="t")
    import subprocess
    import sys
    down = subprocess.run([sys.executable, "-m", "cryopg.cli.entry", "runs"], env=nowhere,
                          cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert down.returncode == 1 and "cannot reach the cryopg server" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1


def test_a_caught_failing_step_fn_leaves_replay_aligned(stack: Any) -> None:
    # A step_fn that raises records nothing; calls after it keep their own positions
    # (the journal has a gap), so the replay after the sleep is not a determinism error.
    wf = script(stack.dir, "caught.py", """\
from cryosleep import script

def boom():
    raise RuntimeError("flaky")

try:
    script.step_fn("first", boom)
except RuntimeError:
    print("caught")
print("second=" + script.step_fn("second", lambda: "two"))
script.sleep("200ms")
print("end")
""")
    done = stack.cli("submit", str(wf), "--follow", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("caught") == 2 and "end" in done.stdout
