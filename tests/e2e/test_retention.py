"""Retention and project deletion end to end: a run past its project's retention is
collected with its run-scoped cells (reads then 404), entity cells stay, and deleting a
project takes everything in it, Owners only."""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg

from tests.e2e.conftest import CLI
from tests.e2e.helpers import http, script, submit, token


def _follow_ok(stack: Any, run_id: str) -> None:
    done = stack.cli("logs", run_id, "--follow", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_run_past_retention_is_collected_and_reads_say_so(stack: Any) -> None:
    wf = script(stack.dir, "r.sh", "cryopg state set k v\ncryopg state set n 1 --entity keep\n")
    run_id = submit(stack, wf)
    _follow_ok(stack, run_id)
    assert stack.cli("state", "get", "k", "--run", run_id).stdout == "v\n"

    shown = stack.cli("project", "retention", "default")
    assert shown.stdout == "runs\t90d\nevents\t30d\n", shown.stderr
    changed = stack.cli("project", "retention", "default", "--runs", "12h")
    assert changed.stdout == "runs\t12h\nevents\t30d\n", changed.stderr
    for bad in ("0", "soon", "-1d"):
        refused = stack.cli("project", "retention", "default", "--runs", bad, "--events", "1d")
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, bad
    assert stack.cli("project", "retention", "default").stdout == "runs\t12h\nevents\t30d\n"

    # Age the run as the clock would, then let the sweeper in tick() run once.
    with psycopg.connect(stack.info["database_url"], autocommit=True) as db:
        db.execute("UPDATE cryo.runs SET created_at = created_at - interval '13 hours', "
                   "finished_at = finished_at - interval '13 hours' "
                   "WHERE id = %s", (run_id,))
        db.execute("SELECT * FROM cryo.tick()")
        left = db.execute("SELECT count(*) FROM cryo.state_cells WHERE run_id = %s", (run_id,))
        assert left.fetchone() == (0,)

    base = f"{stack.url}/api/v1/orgs/dev/projects/default"
    owner = stack.info["user_token"]
    assert http(f"{base}/runs/{run_id}/state/k", owner)[0] == 404
    assert http(f"{base}/runs/{run_id}", owner)[0] == 404
    gone = stack.cli("state", "get", "k", "--run", run_id)
    assert gone.returncode == 1 and "no run" in gone.stderr
    assert stack.cli("state", "get", "n", "--entity", "keep").stdout == "1\n"


def test_deleting_a_project_takes_everything_in_it(stack: Any) -> None:
    assert stack.cli("project", "create", "scratch").returncode == 0
    env = {**stack.env, "CRYOPG_PROJECT": "scratch"}
    wf = script(stack.dir, "s.sh", "cryopg state set k v\ncryopg state set n 1 --entity e\n")
    made = subprocess.run([*CLI, "submit", str(wf), "--follow"], cwd=stack.dir, env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    kept = submit(stack, script(stack.dir, "d.sh", "cryopg state set n 2 --entity e\n"))
    _follow_ok(stack, kept)

    unconfirmed = stack.cli("project", "delete", "scratch")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    base = f"{stack.url}/api/v1/orgs/dev/projects/scratch"
    admin = token(stack.info["database_url"], "user", member="ada", role="admin")
    assert http(base, admin, "DELETE")[0] == 403

    done = stack.cli("project", "delete", "scratch", "--yes")
    assert done.stdout == "deleted scratch (1 runs)\n", done.stderr
    with psycopg.connect(stack.info["database_url"]) as db:
        for table in ("runs", "state_cells", "projects"):
            column = "slug" if table == "projects" else "project"
            n = db.execute(f"SELECT count(*) FROM cryo.{table} "  # noqa: S608
                           f"WHERE {column} = 'scratch'").fetchone()
            assert n == (0,), table
    again = stack.cli("project", "delete", "scratch", "--yes")
    assert again.returncode == 1 and "scratch" in again.stderr
    # The other project is untouched.
    assert stack.cli("state", "get", "n", "--entity", "e").stdout == "2\n"
