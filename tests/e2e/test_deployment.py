"""A split deployment (separate server and agent processes), SQL submits, sealing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cryopg.seal import generate_master_key
from tests.e2e.conftest import CLI, Split
from tests.e2e.helpers import lines, script, wait_for


def _run(split: Split, run_id: str) -> dict[str, Any]:
    return json.loads(split.cli("runs", "show", run_id, "--json").stdout)


def test_agent_killed_mid_step_replays_on_another_agent(split: Split) -> None:
    first, second, keys, go = (split.dir / n for n in ("first.calls", "second.calls", "keys", "go"))
    wf = script(split.dir, "crash.sh", f"""\
cryopg step first -- sh -c 'echo x >> {first}; echo one'
cryopg step second -- sh -c 'echo "$CRYO_IDEMPOTENCY_KEY" >> {keys}; echo x >> {second}; \
while [ ! -f {go} ]; do sleep 0.05; done; echo two'
echo finished
""")
    doomed = split.agent("doomed")
    run_id = split.cli("submit", str(wf)).stdout.strip()
    wait_for("the second step to start", lambda: lines(second) == ["x"])
    os.killpg(doomed.pid, signal.SIGKILL)  # the agent and the script it ran
    doomed.wait()
    split.agent("rescuer")
    wait_for("the second step to run again", lambda: len(lines(second)) == 2, timeout=30)
    go.touch()
    done = split.cli("logs", run_id, "--follow", timeout=30)
    assert done.returncode == 0, done.stderr
    assert lines(first) == ["x"]  # recorded before the crash: not run again
    assert len(set(lines(keys))) == 1  # the same idempotency key on both attempts
    run = _run(split, run_id)
    assert run["status"] == "succeeded" and run["attempt"] == 2
    assert "claim_expired" in [e["kind"] for e in run["history"]]


class _Abort(Exception):
    """Raised to roll back an application's transaction."""


def test_sql_submit_in_app_transaction_runs_sealed(split: Split) -> None:
    marker = "PLAINTEXT-MARKER-7f3a"
    wf = script(split.dir, "nightly.sh", f"""\
echo "{marker}-source"
cat "$CRYO_INPUT_FILE"; echo
cryopg step s -- echo "{marker}-memo"
cryopg annotate "{marker}-note"
""")
    assert split.cli("workflow", "put", "nightly", str(wf)).returncode == 0
    split.agent("a1")
    with psycopg.connect(split.dsn) as app:
        with app.transaction():
            kept = app.execute("SELECT cryo.submit_run('dev','default','nightly', %s::jsonb)",
                               (json.dumps({"secret": f"{marker}-input"}),)).fetchone()[0]
        with pytest.raises(_Abort):
            with app.transaction():
                app.execute("SELECT cryo.submit_run('dev','default','nightly')")
                raise _Abort
    done = split.cli("logs", kept, "--follow", timeout=30)
    assert done.returncode == 0, done.stderr
    for piece in ("source", "input", "memo"):
        assert f"{marker}-{piece}" in done.stdout
    runs = json.loads(split.cli("runs", "--json").stdout)
    assert [r["id"] for r in runs] == [kept]  # the rolled-back submit left nothing
    # A DBA's view: ids, statuses and names in the clear, no payload anywhere.
    with psycopg.connect(split.dsn) as dba:
        assert dba.execute("SELECT status, input_clear FROM cryo.runs").fetchall() == [
            ("succeeded", None)]
        dump = dba.execute("""
            SELECT string_agg(encode(b, 'escape'), ' ') FROM (
              SELECT source AS b FROM cryo.runs UNION ALL SELECT input FROM cryo.runs
              UNION ALL SELECT source FROM cryo.workflows UNION ALL SELECT result FROM cryo.journal
              UNION ALL SELECT payload FROM cryo.history UNION ALL SELECT data FROM cryo.logs) x
            WHERE b IS NOT NULL""").fetchone()[0]
    assert dump and marker not in dump


def test_server_refuses_to_start_without_a_master_key(dsn: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CRYOPG_MASTER_KEY"}
    done = subprocess.run([*CLI, "server", "--database-url", dsn, "--port", "0"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "CRYOPG_MASTER_KEY" in done.stderr
    bad = subprocess.run([*CLI, "server", "--database-url", dsn], capture_output=True, text=True,
                         env=dict(env, CRYOPG_MASTER_KEY="short"), timeout=30)
    assert bad.returncode == 1 and "32 bytes" in bad.stderr


def test_a_database_that_is_down_is_one_clear_line(tmp_path: Path) -> None:
    gone = f"host={tmp_path} port=1 user=cryopg dbname=none connect_timeout=2"
    for args in (["migrate", "--database-url", gone],
                 ["server", "--database-url", gone, "--port", "0"],
                 ["token", "--kind", "user", "--database-url", gone]):
        env = dict(os.environ, CRYOPG_MASTER_KEY=generate_master_key())
        done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (args, done.stderr)
        err = done.stderr.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in done.stderr, (args, done.stderr)


def test_a_stopping_agent_hands_its_run_back_at_once(split: Split) -> None:
    started, go = split.dir / "started", split.dir / "go"
    wf = script(split.dir, "long.sh", f"""\
cryopg step first -- echo one
echo x >> {started}
while [ ! -f {go} ]; do sleep 0.05; done
echo finished
""")
    leaving = split.agent("leaving")
    run_id = split.cli("submit", str(wf)).stdout.strip()
    wait_for("the script to start", lambda: lines(started) == ["x"])
    leaving.send_signal(signal.SIGINT)  # SIGTERM would drain; the script has its own session
    assert leaving.wait(timeout=20) == 0
    run = _run(split, run_id)
    kinds = [e["kind"] for e in run["history"]]
    assert run["status"] == "pending" and "released" in kinds and "claim_expired" not in kinds

    go.touch()
    split.agent("next")
    done = split.cli("logs", run_id, "--follow", timeout=30)
    assert done.returncode == 0, done.stderr
    assert lines(started) == ["x", "x"] and _run(split, run_id)["attempt"] == 2
