"""Triggers end to end: real server processes (two of them on one database for the
scheduler), real agents running the runs that triggers start."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

import psycopg

from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.conftest import Split
from tests.e2e.helpers import http, script, wait_for

PROJECT = "/api/v1/orgs/dev/projects/default"


def _put(split: Split, name: str, body: str, filename: str = "wf.sh") -> None:
    path = script(split.dir, filename, body)
    done = split.cli("workflow", "put", name, str(path))
    assert done.returncode == 0, done.stderr


def _triggered_runs(dsn: str, workflow: str) -> list[tuple[str, str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        return db.execute(
            "SELECT id, status, trigger_name FROM cryo.runs WHERE workflow = %s ORDER BY id",
            (workflow,)).fetchall()


def test_two_servers_fire_every_tick_once_and_lose_none(split: Split) -> None:
    """Two server processes on one database, ten schedules ticking every second for a
    few seconds: every (schedule, tick) starts exactly one run, and no tick is skipped."""
    port = _free_tcp_port()
    split.spawn("server", "--database-url", split.dsn, "--port", str(port),
                "--claim-seconds", "2", "--tick-interval", "0.2")
    wait_for("the second server", lambda: _healthy(f"http://127.0.0.1:{port}"), timeout=30)
    _put(split, "tick", "echo tick\n")
    for i in range(10):
        done = split.cli("schedule", "create", f"s{i}", "--workflow", "tick", "--every", "1s")
        assert done.returncode == 0, done.stderr
    time.sleep(5)
    for i in range(10):
        assert split.cli("schedule", "pause", f"s{i}").returncode == 0
    seen: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    status, listed = http(f"{split.url}{PROJECT}/runs?workflow=tick&limit=1000", split.user_token)
    assert status == 200
    for run in listed["runs"]:
        _, shown = http(f"{split.url}{PROJECT}/runs/{run['id']}", split.user_token)
        trig = shown["input"]["trigger"]
        seen[trig["name"]].append((trig["scheduled_at"], trig["catch_up"]))
    assert set(seen) == {f"s{i}" for i in range(10)}
    for name, ticks in seen.items():
        ticks.sort()
        stamps = [t for t, _ in ticks]
        assert len(stamps) == len(set(stamps)), f"{name} fired a tick twice: {stamps}"
        assert len(stamps) >= 2, f"{name} fired only {stamps}"
        # Consecutive ticks are a second apart: a late round fires every tick it missed
        # (catch-up runs are for downtime, more than cron.MAX_LATE_TICKS missed ticks).
        assert not any(caught_up for _, caught_up in ticks), f"{name} caught up: {ticks}"
        for (a, _), (b, _) in zip(ticks, ticks[1:], strict=False):
            gap = (dt.datetime.fromisoformat(b) - dt.datetime.fromisoformat(a)).total_seconds()
            assert gap == 1.0, f"{name} lost ticks: {ticks}"
    listed_cli = split.cli("schedule", "list")
    assert listed_cli.returncode == 0 and "s0\ttick\tevery 1s\tpaused" in listed_cli.stdout


def _deliver(url: str, secret: str, event: str, payload: Any) -> tuple[int, Any]:
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "X-GitHub-Event": event, "X-Hub-Signature-256": sig,
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


FORK_PR = {"action": "opened", "number": 7, "pull_request": {
    "head": {"ref": "feature", "sha": "f00d", "repo": {"full_name": "mallory/r"}},
    "base": {"ref": "main", "sha": "b00c", "repo": {"full_name": "o/r"}}}}


def test_a_fork_pull_request_runs_untrusted_and_its_secret_step_fails(split: Split) -> None:
    split.agent("a1")
    status, _ = http(f"{split.url}{PROJECT}/secrets/API_KEY", split.user_token, "PUT",
                     {"value": "s3cr3t-VALUE"})
    assert status == 201
    charged = split.dir / "charged"
    _put(split, "ci", f"""\
ref=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["trigger"]["ref"])' \
      < "$CRYO_INPUT_FILE")
echo "ref=$ref"
echo "env: [${{API_KEY:-none}}]"
cryopg step deploy --secret API_KEY -- sh -c 'echo x >> {charged}'
echo "after the step"
""")
    done = split.cli("webhook", "create", "gh", "--workflow", "ci")
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    status, got = _deliver(lines["url"], lines["secret"], "pull_request", FORK_PR)
    assert status == 201 and got["untrusted"] is True, got
    run_id = got["run_id"]
    logs = split.cli("logs", run_id, "--follow")
    assert "ref=feature" in logs.stdout and "env: [none]" in logs.stdout, logs.stdout
    assert "after the step" not in logs.stdout
    _, shown = http(f"{split.url}{PROJECT}/runs/{run_id}", split.user_token)
    assert shown["status"] == "failed" and "withheld" in shown["error"], shown
    assert not charged.exists()
    # A bad signature is 401 with a JSON body, and starts nothing.
    status, body = _deliver(lines["url"], "whsec_wrong", "pull_request", {**FORK_PR, "n": 2})
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert len(_triggered_runs(split.dsn, "ci")) == 1


def test_a_handler_chain_of_real_runs_stops_at_depth_five(split: Split) -> None:
    split.agent("a1")
    _put(split, "relay", "cryopg emit ping '{\"hop\": 1}'\necho relayed\n")
    done = split.cli("handler", "create", "relay", "--event", "ping", "--workflow", "relay")
    assert done.returncode == 0, done.stderr
    status, _ = http(f"{split.url}{PROJECT}/events/ping", split.user_token, "POST", {})
    assert status == 201

    def chain_done() -> bool:
        runs = _triggered_runs(split.dsn, "relay")
        return len(runs) == 5 and all(s == "succeeded" for _, s, _ in runs)
    wait_for("five relayed runs", chain_done, timeout=60)
    time.sleep(1)  # nothing more starts
    runs = _triggered_runs(split.dsn, "relay")
    assert len(runs) == 5
    events = split.cli("events", "--name", "ping")
    first = events.stdout.splitlines()[1]
    assert "handler depth 5" in first, events.stdout
    _, shown = http(f"{split.url}{PROJECT}/runs/{runs[-1][0]}", split.user_token)
    assert any(h["kind"] == "handler_refused" for h in shown["history"])


def test_the_readme_webhook_curl_line_signs_its_body(split: Split) -> None:
    """The README's curl example, run as written: openssl signs the body, the server
    starts the run."""
    import re
    import subprocess

    from cryopg.paths import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", readme, re.S | re.M)
    block = next(b for b in blocks if "openssl dgst" in b)
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("body="))
    end = next(i for i, line in enumerate(lines) if line.startswith("curl")) + 1
    while lines[end - 1].endswith("\\"):
        end += 1
    _put(split, "ci", "echo built\n")
    made = split.cli("webhook", "create", "gh", "--workflow", "ci")
    got = dict(line.split(": ", 1) for line in made.stdout.splitlines())
    done = subprocess.run(["bash", "-c", "\n".join(lines[start:end])], capture_output=True,
                          text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "URL": got["url"],
                               "SECRET": got["secret"]})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["outcome"] == "started", answer
    assert _triggered_runs(split.dsn, "ci")[0][2] == "gh"
