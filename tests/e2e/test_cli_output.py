"""What the CLI prints for people (issue 17 items 8 and 15): run details whose columns
never run together, labels, history for every activity wait, events with a header, child
runs with their parent, and the dev stack's own database for token commands."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from typing import Any

from tests.e2e.helpers import script, show, submit, wait_for


def test_runs_show_keeps_columns_apart_and_shows_labels_and_every_activity_wait(
        stack: Any) -> None:
    wf = script(stack.dir, "shown.sh", """\
cryopg step build --label "Build the thing" -- true
cryopg activity-submit a1 -- sh -c 'exit 3' >/dev/null
cryopg activity-submit a2 -- true >/dev/null
rc=0; cryopg activity-collect a1 || rc=$?
echo "failed=$(cryopg activity-wait-all)"
""")
    run_id = submit(stack, wf, "--concurrency", "grp")
    done = stack.cli("logs", run_id, "--follow", timeout=60)
    assert done.returncode == 0, done.stdout
    shown = stack.cli("runs", "show", run_id).stdout
    assert re.search(r"^concurrency_group:\s+grp$", shown, re.M), shown
    assert "Build the thing" in shown
    assert re.search(r"activity_scheduled\s+activity/a1/0", shown), shown
    assert "None" not in shown
    assert re.search(r"activity_completed\s+activity.collect/a1/0", shown), shown
    assert re.search(r"activities_completed\s+activity.wait-all//0", shown), shown
    # children list with their parent
    listed = stack.cli("runs", "--all").stdout.splitlines()
    assert listed[0].split()[-1] == "PARENT"
    short = run_id.rsplit(":", 1)[-1]
    children = [line for line in listed if f"{short} (a" in line]
    assert len(children) == 2, listed


def test_signal_rows_show_no_missing_ordinal(stack: Any) -> None:
    run_id = submit(stack, script(stack.dir, "sig.sh", "cryopg wait-signal approve\n"))
    wait_for("parked", lambda: "awaiting" in (show(stack, run_id)["substate"] or ""))
    assert stack.cli("signal", run_id, "approve", "yes").returncode == 0
    assert stack.cli("logs", run_id, "--follow", timeout=30).returncode == 0
    shown = stack.cli("runs", "show", run_id).stdout
    assert "signal/approve/None" not in shown and "signal/approve" in shown


def test_events_have_a_header_and_say_when_there_are_none(stack: Any) -> None:
    empty = stack.cli("events")
    assert empty.returncode == 0 and "no events" in empty.stderr
    run_id = submit(stack, script(stack.dir, "emit.sh", "cryopg emit hello '{\"n\": 1}'\n"))
    assert stack.cli("logs", run_id, "--follow", timeout=30).returncode == 0
    listed = stack.cli("events").stdout.splitlines()
    assert listed[0].split("\t")[:3] == ["ID", "CREATED", "NAME"]
    assert "hello" in listed[1]


def test_token_list_in_a_dev_directory_needs_no_database_url(stack: Any) -> None:
    done = stack.cli("token", "list")
    assert done.returncode == 0, done.stderr
    assert "agent" in done.stdout


def test_a_port_clash_suggests_port(stack: Any, tmp_path: Any) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "cryopg.cli.entry", "server", "--database-url",
             stack.info["database_url"], "--port", str(port), "--host", "127.0.0.1"],
            env={**stack.env, "CRYOPG_MASTER_KEY": _master_key()}, cwd=tmp_path,
            capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--port" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _master_key() -> str:
    from cryopg.seal import generate_master_key

    return generate_master_key()
