"""The spec's recipes as written, against `cryopg dev`, and what issue 17 found a newcomer
tripping over: where a script runs, bash's errexit, retried activities, concurrent calls,
value arguments and submit options."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import http, lines, script, submit, wait_for

POLL = """\
since="$(cryo state get last-seen --entity digest)"
latest="$(cryo step "poll" -- ./fetch-since.sh "${since:-0}")"
cryo step "notify" -- ./post-digest.sh "$latest"
cryo state set last-seen "$latest" --entity digest
"""


def _helper(dir: Path, name: str, body: str) -> None:
    path = dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def _follow(stack: Any, path: Path, timeout: float = 60) -> Any:
    return stack.cli("submit", str(path), "--follow", timeout=timeout)


def test_the_poll_cursor_recipe_runs_as_written(stack: Any) -> None:
    """durable-state.txt: `./fetch-since.sh` beside the script resolves (the dev stack
    runs the script where it was submitted), three runs print 0, 10, 20, and a failing
    fetch fails the run (errexit) instead of writing an empty cursor."""
    _helper(stack.dir, "fetch-since.sh",
            '[ ! -e fetch-fails ] || { echo "feed down" >&2; exit 7; }\necho $(($1 + 10))\n')
    _helper(stack.dir, "post-digest.sh", "echo $(($1 - 10))\n")
    wf = script(stack.dir, "digest.sh", POLL)
    printed = []
    for _ in range(3):
        done = _follow(stack, wf)
        assert done.returncode == 0, done.stdout + done.stderr
        printed.append(done.stdout.strip().splitlines()[-1].strip())
    assert printed == ["0", "10", "20"]
    (stack.dir / "fetch-fails").touch()
    failed = _follow(stack, wf)
    assert failed.returncode == 7, failed.stdout
    cursor = stack.cli("state", "get", "last-seen", "--entity", "digest")
    assert cursor.stdout.strip() == "30"  # untouched by the failed run


def test_spawn_reads_a_child_beside_the_script_and_the_child_runs_there(stack: Any) -> None:
    script(stack.dir, "child.sh", 'echo "child in $PWD" > child.out\n')
    wf = script(stack.dir, "parent.sh", 'child=$(cryopg spawn child.sh)\necho "spawned $child"\n')
    done = _follow(stack, wf)
    assert done.returncode == 0, done.stdout + done.stderr
    out = stack.dir / "child.out"
    wait_for("the child to run", out.exists, timeout=30)
    assert lines(out) == [f"child in {stack.dir}"]


def test_a_deployed_agent_runs_in_a_scratch_directory(split: Any) -> None:
    split.agent("a1")
    wf = script(split.dir, "where.sh", 'echo "cwd=$PWD"\n')
    done = split.cli("submit", str(wf), "--follow")
    assert done.returncode == 0, done.stdout + done.stderr
    cwd = re.search(r"cwd=(\S+)", done.stdout).group(1)
    assert cwd != str(split.dir) and os.path.basename(cwd).startswith("cryo-")


def test_bash_scripts_run_under_errexit_and_nounset(stack: Any) -> None:
    flags = _follow(stack, script(stack.dir, "flags.sh", 'echo "flags=$-"\n'))
    assert flags.returncode == 0
    got = re.search(r"flags=(\S+)", flags.stdout).group(1)
    assert "e" in got and "u" in got
    failing = _follow(stack, script(stack.dir, "fails.sh", "false\necho not-reached\n"))
    assert failing.returncode == 1 and "not-reached" not in failing.stdout
    caught = _follow(stack, script(stack.dir, "caught.sh",
                                   "rc=0\ncryopg step s -- sh -c 'exit 4' || rc=$?\n"
                                   'echo "rc=$rc"\n'))
    assert caught.returncode == 0 and "rc=4" in caught.stdout


def test_an_activity_retry_reruns_the_unit_with_its_own_idempotency_key(stack: Any) -> None:
    """Item 3: the retried activity's step runs again and its incr counts again; its add
    is still won. Item 4: each activity has its own CRYO_IDEMPOTENCY_KEY, the same on
    every attempt."""
    log = stack.dir / "activity.log"
    wf = script(stack.dir, "retry.sh", f"""\
cryopg activity-submit a1 --retries 1 --retry-backoff 100ms --retry-on-exit 75 -- sh -ec '
  echo "a1 key=$CRYO_IDEMPOTENCY_KEY attempt=$CRYO_ATTEMPT" >> {log}
  cryopg step body -- sh -c "echo step-ran >> {log}"
  cryopg state incr tries --entity i17 >/dev/null
  cryopg state add owner --entity i17
  [ "$CRYO_ATTEMPT" -ge 2 ] || exit 75' >/dev/null
cryopg activity-submit a2 -- sh -c 'echo "a2 key=$CRYO_IDEMPOTENCY_KEY" >> {log}' >/dev/null
echo "failed=$(cryopg activity-wait-all)"
""")
    done = _follow(stack, wf, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed=0" in done.stdout
    got = lines(log)
    assert got.count("step-ran") == 2  # the step ran on both attempts
    a1 = {m.group(1) for m in map(re.compile(r"^a1 key=(\S+) attempt=\d$").match, got) if m}
    a2 = {m.group(1) for m in map(re.compile(r"^a2 key=(\S+)$").match, got) if m}
    assert sum(line.startswith("a1 ") for line in got) == 2  # two attempts ...
    assert len(a1) == 1 and len(a2) == 1 and a1 != a2  # ... one key; another for a2
    assert len(next(iter(a1))) == 32
    tries = stack.cli("state", "get", "tries", "--entity", "i17")
    assert tries.stdout.strip() == "2"  # incr counted on each attempt


def test_concurrent_steps_replay_by_identity(stack: Any) -> None:
    wf = script(stack.dir, "par.sh", """\
for i in 1 2 3 4 5 6; do cryopg step "p$i" -- sh -c "sleep 0.$((7 - i))" & done; wait
cryopg sleep 1s
echo done
""")
    done = _follow(stack, wf, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "determinism" not in done.stdout and "done" in done.stdout


@pytest.mark.parametrize("value", ["{bad", "[1,2", '"unterminated', "{", "1e999"])
def test_a_bad_value_is_one_clear_line_inside_a_run(stack: Any, value: str) -> None:
    wf = script(stack.dir, "vals.sh", f"""\
for verb in "emit ev" "state set j" "output set k"; do
  rc=0; cryopg $verb '{value}' 2> err.txt || rc=$?
  echo "$verb rc=$rc lines=$(wc -l < err.txt) $(cat err.txt)"
done
""")
    done = _follow(stack, wf)
    assert done.returncode == 0, done.stdout
    assert "Traceback" not in done.stdout and "SystemError" not in done.stdout
    for verb in ("emit ev", "state set j", "output set k"):
        assert re.search(rf"{verb} rc=2 lines=1 .*(not valid JSON|too large)", done.stdout), \
            done.stdout


def test_values_read_by_one_rule_outside_runs_too(stack: Any) -> None:
    run_id = submit(stack, script(stack.dir, "w.sh", "cryopg wait-signal go\n"))
    bad = stack.cli("signal", run_id, "go", "{bad")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
    assert "Traceback" not in bad.stderr
    status, body = http(stack.project_url + "/events/evt",
                        stack.info["user_token"], "POST", {"payload": 1e999})
    assert status == 400 and body["error"]["code"] == "invalid_argument"
    good = stack.cli("signal", run_id, "go", "plain words")
    assert good.returncode == 0, good.stderr
    done = stack.cli("logs", run_id, "--follow", timeout=30)
    assert done.returncode == 0


def test_a_policy_without_a_concurrency_group_is_refused(stack: Any) -> None:
    wf = script(stack.dir, "p.sh", "true\n")
    done = stack.cli("submit", str(wf), "--policy", "skip")
    assert done.returncode != 0
    assert "concurrency" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert json.loads(stack.cli("runs", "--json").stdout) == []
