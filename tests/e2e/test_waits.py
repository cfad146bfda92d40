"""Signals, bus events, bounded waits, children and activities through a real stack."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.e2e.helpers import lines, script, show, submit, wait_for


def _status(stack: Any, run_id: str) -> str:
    return show(stack, run_id)["status"]


def _follow(stack: Any, run_id: str, timeout: float = 60) -> Any:
    return stack.cli("logs", run_id, "--follow", timeout=timeout)


def test_signal_sent_after_the_wait_wakes_the_run(stack: Any) -> None:
    run_id = submit(stack, script(stack.dir, "s.sh", 'echo "got $(cryopg wait-signal approve)"\n'))
    wait_for("the wait", lambda: show(stack, run_id)["substate"] == "awaiting-signal")
    assert "awaiting-signal" in stack.cli("runs").stdout
    sent = stack.cli("signal", run_id.split(":")[-1], "approve", '{"by":"ann"}')
    assert sent.returncode == 0, sent.stderr
    done = _follow(stack, run_id)
    assert done.returncode == 0 and 'got {"by":"ann"}' in done.stdout


def test_signals_sent_before_the_wait_queue_in_order(stack: Any) -> None:
    gate = stack.dir / "gate"
    run_id = submit(stack, script(stack.dir, "q.sh", f"""\
cryopg step gate -- sh -c 'while [ ! -f {gate} ]; do sleep 0.05; done'
echo "first=$(cryopg wait-signal item)"
echo "second=$(cryopg wait-signal item)"
"""))
    wait_for("the run to start", lambda: _status(stack, run_id) == "running")
    for payload in ("one", "two"):
        assert stack.cli("signal", run_id, "item", payload).returncode == 0
    gate.touch()
    done = _follow(stack, run_id)
    assert done.returncode == 0, done.stdout
    assert "first=one" in done.stdout and "second=two" in done.stdout


def test_timeout_branch_is_recorded_and_replayed(stack: Any) -> None:
    calls = stack.dir / "branch.calls"
    wf = script(stack.dir, "t.sh", f"""\
if cryopg wait-signal nudge --timeout 1s; then b=got; else b="timeout-$?"; fi
cryopg step mark -- sh -c 'echo "{'$'}0" >> {calls}' "$b"
echo "branch=$b"
cryopg sleep 1s
echo "still=$b"
""")
    run_id = submit(stack, wf)
    done = _follow(stack, run_id)
    assert done.returncode == 0, done.stdout
    assert "still=timeout-124" in done.stdout
    assert done.stdout.count("branch=timeout-124") == 2  # both passes took the same branch
    assert lines(calls) == ["timeout-124"]


def test_emit_is_not_duplicated_on_replay(stack: Any) -> None:
    run_id = submit(stack, script(stack.dir, "e.sh", """\
cryopg emit deployed '{"v":2}'
cryopg sleep 1s
cryopg emit deployed '{"v":3}'
"""))
    assert _follow(stack, run_id).returncode == 0
    listed = json.loads(stack.cli("events", "--name", "deployed", "--json").stdout)
    assert sorted(e["payload"]["v"] for e in listed) == [2, 3]
    assert {e["emitted_by_run"] for e in listed} == {run_id}


@pytest.mark.agents(3)
def test_event_waiters_are_woken_together(stack: Any) -> None:
    waiters = [submit(stack, script(stack.dir, f"w{i}.sh",
                                    'echo "saw $(cryopg wait-event release)"\n'))
               for i in range(3)]
    for run_id in waiters:
        wait_for("parked", lambda r=run_id: show(stack, r)["substate"] == "awaiting-event")
    emitter = submit(stack, script(stack.dir, "em.sh", "cryopg emit release v7\n"))
    assert _follow(stack, emitter).returncode == 0
    for run_id in waiters:
        done = _follow(stack, run_id)
        assert done.returncode == 0 and "saw v7" in done.stdout


def test_an_event_before_the_wait_does_not_count(stack: Any, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as app:
        app.execute("SELECT cryo.publish_event(%s, %s, 'early', '1')", (stack.org, stack.project))
    run_id = submit(stack, script(stack.dir, "late.sh",
                                  "rc=0; cryopg wait-event early --timeout 1s || rc=$?\n"
                                  "echo rc=$rc\n"))
    done = _follow(stack, run_id)
    assert "rc=124" in done.stdout
    with psycopg.connect(dsn, autocommit=True) as app:  # an application emits from SQL
        waiter = submit(stack, script(stack.dir, "app.sh",
                                      'echo "app=$(cryopg wait-event from-app)"\n'))
        wait_for("parked", lambda: show(stack, waiter)["substate"] == "awaiting-event")
        app.execute("SELECT cryo.publish_event(%s, %s, 'from-app', '{\"n\": 1}')",
                    (stack.org, stack.project))
    assert 'app={"n":1}' in _follow(stack, waiter).stdout


@pytest.mark.agents(4)
def test_fan_out_of_ten_activities_with_one_retried(stack: Any) -> None:
    flaky = stack.dir / "flaky.attempts"
    wf = script(stack.dir, "fan.sh", f"""\
for i in 1 2 3 4 5 6 7 8 9; do \
cryopg activity-submit "job-$i" -- sh -c "echo out-$i" >/dev/null; done
cryopg activity-submit flaky --retries 2 --retry-backoff 200ms --retry-on-exit 75 -- \
  sh -c 'echo try >> {flaky}; [ "$(wc -l < {flaky})" -ge 2 ] && echo flaky-ok || exit 75' >/dev/null
echo "first=$(cryopg activity-collect job-1)"
cryopg activity-collect flaky; echo "flaky-rc=$?"
echo "failed=$(cryopg activity-wait-all)"
""")
    run_id = submit(stack, wf)
    done = _follow(stack, run_id, timeout=90)
    assert done.returncode == 0, done.stdout
    out = done.stdout
    assert "first=out-1" in out and "flaky-ok" in out and "flaky-rc=0" in out
    assert "failed=0" in out
    assert lines(flaky) == ["try", "try"]  # failed once, retried once
    listed = stack.cli("runs", "--all", "--json", "--limit", "100").stdout
    children = [r for r in json.loads(listed) if r["id"] != run_id]
    assert len(children) == 10 and all(r["status"] == "succeeded" for r in children)


def test_a_failing_activity_is_counted_and_its_exit_code_collected(stack: Any) -> None:
    wf = script(stack.dir, "fail.sh", """\
rc=0; cryopg activity bad -- sh -c 'echo broken; exit 9' || rc=$?; echo "bad-rc=$rc"
cryopg activity-submit worse -- sh -c 'exit 4' >/dev/null
echo "failed=$(cryopg activity-wait-all)"
rc=0; cryopg activity-submit bad -- true || rc=$?; echo "reuse-rc=$rc"
""")
    done = _follow(stack, submit(stack, wf), timeout=60)
    assert "broken" in done.stdout and "bad-rc=9" in done.stdout
    assert "failed=1" in done.stdout  # bad was collected already; only worse is counted
    assert "already submitted" in done.stdout and "reuse-rc=2" in done.stdout


def test_spawn_starts_a_child_once_and_outputs_show(stack: Any) -> None:
    child = script(stack.dir, "child.sh", 'echo "child got $(cat "$CRYO_INPUT_FILE")"\n')
    wf = script(stack.dir, "parent.sh", f"""\
id=$(cryopg spawn {child} --input '{{"n": 3}}')
cryopg output set child "$id"
cryopg output set answer 42
cryopg sleep 1s
echo "spawned $id"
""")
    parent = submit(stack, wf)
    assert _follow(stack, parent).returncode == 0
    run = show(stack, parent)
    child_id = run["outputs"]["child"]
    assert run["outputs"]["answer"] == 42
    runs = json.loads(stack.cli("runs", "--all", "--json").stdout)
    assert len(runs) == 2  # the replay did not spawn a second child
    done = _follow(stack, child_id)
    assert done.returncode == 0 and 'child got {"n": 3}' in done.stdout


def test_cancel_reaches_parked_queued_and_children(stack: Any) -> None:
    gate = stack.dir / "never"
    parent = submit(stack, script(stack.dir, "p.sh", f"""\
cryopg activity-submit long -- sh -c 'while [ ! -f {gate} ]; do sleep 0.1; done' >/dev/null
cryopg activity-collect long
"""))
    wait_for("the parent to wait on its child",
             lambda: show(stack, parent)["substate"] == "awaiting-children", timeout=30)
    queued = submit(stack, script(stack.dir, "queued.sh", "echo never\n"))  # the one agent is busy
    assert _status(stack, queued) == "pending"
    assert "cancelled" in stack.cli("cancel", queued).stdout
    assert "cancelled" in stack.cli("cancel", parent).stdout
    def statuses() -> dict[str, str]:
        return {r["id"]: r["status"]
                for r in json.loads(stack.cli("runs", "--all", "--json").stdout)}

    runs = statuses()
    wait_for("the child to be cancelled",
             lambda: all(s == "cancelled" for s in statuses().values()), timeout=30)
    assert len(runs) == 3


@pytest.mark.agents(4)
def test_many_parked_runs_woken_by_one_event_resume_exactly_once(stack: Any, dsn: str) -> None:
    count = 40
    ledger = stack.dir / "resumed"
    wf = script(stack.dir, "fanin.sh", f"""\
cryopg wait-event go >/dev/null
cryopg step mark -- sh -c 'echo "$CRYO_IDEMPOTENCY_KEY" >> {ledger}'
""")
    assert stack.cli("workflow", "put", "fanin", str(wf)).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as app:
        for i in range(count):
            app.execute("SELECT cryo.submit_run(%s, %s, 'fanin', %s::jsonb)",
                        (stack.org, stack.project, str(i)))
        wait_for("all to park", lambda: app.execute(
            "SELECT count(*) FROM cryo.parked_runs"
            " WHERE reason = 'awaiting-event' AND project = %s",
            (stack.project,)).fetchone()[0]
            == count, timeout=90)
        app.execute("SELECT cryo.publish_event(%s, %s, 'go')", (stack.org, stack.project))
        wait_for("all to finish", lambda: app.execute(
            "SELECT count(*) FROM cryo.runs WHERE status = 'succeeded' AND project = %s",
            (stack.project,)).fetchone()[0] == count,
            timeout=90)
    marks = lines(ledger)
    assert len(marks) == count and len(set(marks)) == count
