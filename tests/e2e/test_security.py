"""Security end to end, through a real `cryopg dev`: tenants cannot reach each other by
any user route, roles gate cells and secrets, tokens expire and revoke, an agent's
ceiling bounds its work, secrets are redacted and withheld, and payloads that will not
open end their run as unreadable instead of re-running a step."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from cryopg.seal import MasterKey, generate_master_key
from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.helpers import http as _http
from tests.e2e.helpers import lines, script, show, submit, wait_for
from tests.e2e.helpers import token as _token

SECRET = "s3cr3t-VALUE-0042"
CLI = [sys.executable, "-m", "cryopg.cli.entry"]


def _user_paths() -> list[tuple[str, str]]:
    """Every user route the server has, from its own router (so new ones are covered)."""
    from cryopg.server.app import build_app
    from cryopg.server.config import ServerConfig

    app = build_app(ServerConfig("postgresql:///unused", MasterKey(b"\0" * 32)))
    found = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource else ""
        if path.startswith("/api/v1/orgs/") and route.method != "HEAD":
            found.add((route.method, path))
    return sorted(found)


def _fill(path: str, org: str, project: str, run_id: str) -> str:
    path = path.replace("{org}", org).replace("{project}", project).replace("{run}", run_id)
    return re.sub(r"\{[^}]+\}", "x", path)


def test_no_user_route_reaches_another_tenant(stack: Any, dsn: str) -> None:
    wf = script(stack.dir, "t.sh", "cryopg state set k v\necho hi\n")
    run_id = submit(stack, wf)
    wait_for("the run", lambda: show(stack, run_id)["status"] == "succeeded")
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SELECT cryo.ensure_org('acme', 'Acme')")
        db.execute("SELECT cryo.ensure_project('acme', 'web', 'W')")
        db.execute("SELECT cryo.ensure_project('dev', 'other', 'Other')")
    stranger = _token(dsn, "user", org="acme", member="mallory")
    owner = stack.info["user_token"]
    routes = _user_paths()
    assert len(routes) >= 15, routes
    body = {"source": "echo", "filename": "x.sh", "value": "v", "role": "viewer", "slug": "zz",
            "name": "n"}
    for method, path in routes:
        # acme's owner at dev's routes; dev's owner at acme's; dev's owner at a dev run
        # through another dev project. None succeeds, and none says more than 404.
        for token, org, project in ((stranger, "dev", "default"), (owner, "acme", "web"),
                                    (owner, "dev", "nope")):
            if project == "nope" and "{project}" not in path:
                continue  # an org-level route of the owner's own org
            url = stack.url + _fill(path, org, project, run_id)
            status, got = _http(url, token, method, None if method == "GET" else body)
            assert status == 404, (method, url, status, got)
        if "{run}" in path:
            url = stack.url + _fill(path, "dev", "other", run_id)
            status, got = _http(url, owner, method, None if method == "GET" else body)
            assert status == 404, (method, url, status, got)
    assert show(stack, run_id)["status"] == "succeeded"  # nothing was cancelled


def test_roles_viewer_reads_runs_not_entities_and_admin_owns_secrets(stack: Any, dsn: str) -> None:
    wf = script(stack.dir, "r.sh", "cryopg state set k v\ncryopg state set e 1 --entity shop\n")
    run_id = submit(stack, wf)
    wait_for("the run", lambda: show(stack, run_id)["status"] == "succeeded")
    base = f"{stack.url}/api/v1/orgs/dev/projects/default"
    viewer = _token(dsn, "user", member="vera", role="viewer")
    member = _token(dsn, "user", member="mo", role="member")
    assert _http(f"{base}/runs/{run_id}", viewer)[0] == 200
    assert _http(f"{base}/runs/{run_id}/state/k", viewer)[1]["value"] == "v"
    status, got = _http(f"{base}/entities/shop/state", viewer)
    assert status == 403 and got["error"]["code"] == "forbidden"
    assert _http(f"{base}/entities/shop/state/e", member)[1]["value"] == 1
    src = {"source": "echo", "filename": "x.sh"}
    assert _http(f"{base}/runs", viewer, "POST", src)[0] == 403
    assert _http(f"{base}/runs/{run_id}/cancel", viewer, "POST", {})[0] == 403
    assert _http(f"{base}/secrets", member)[0] == 403
    assert _http(f"{base}/secrets/K", member, "PUT", {"value": "x"})[0] == 403
    assert _http(f"{stack.url}/api/v1/orgs/dev/members/x", member, "PUT",
                 {"role": "admin"})[0] == 403
    assert _http(f"{base}/secrets/K", stack.info["user_token"], "PUT", {"value": "x"})[0] == 201


def test_expired_and_revoked_tokens_get_401(stack: Any, dsn: str) -> None:
    url = f"{stack.url}/api/v1/orgs/dev/projects/default/runs"
    short = _token(dsn, "user", member="sam", role="member",
                   expires=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 2)))
    assert _http(url, short)[0] == 200
    made = stack.cli("token", "create", "--kind", "user", "--member", "kim", "--role", "viewer",
                     "--database-url", dsn)
    assert made.returncode == 0, made.stderr
    kept = made.stdout.strip()
    assert _http(url, kept)[0] == 200
    listed = stack.cli("token", "list", "--database-url", dsn).stdout
    tok_id = next(ln.split("\t")[0] for ln in listed.splitlines() if "\tkim\t" in ln)
    assert stack.cli("token", "revoke", tok_id, "--database-url", dsn).returncode == 0
    status, got = _http(url, kept)
    assert status == 401 and got["error"]["code"] == "unauthorized"
    assert "revoked" in stack.cli("token", "list", "--database-url", dsn).stdout
    wait_for("the token to expire", lambda: _http(url, short)[0] == 401, timeout=10)


@pytest.mark.agents(0)
def test_work_beyond_an_agents_ceiling_never_reaches_it(stack: Any, dsn: str) -> None:
    claim_url = f"{stack.url}/api/v1/agent/claim"
    shell_only = _token(dsn, "agent", caps=["shell"])
    default = _token(dsn, "agent")
    wf = script(stack.dir, "p.py", "print('hi')\n")
    run_id = submit(stack, wf)  # needs polyglot
    with psycopg.connect(dsn, autocommit=True) as db:
        conn_run = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'c.sh', "
                              "NULL, 's', NULL, NULL, '{connector}')").fetchone()[0]
    ask = {"agent_id": "greedy", "capabilities": ["shell", "polyglot", "connector"], "wait": 0}
    assert _http(claim_url, shell_only, "POST", ask)[0] == 204
    assert show(stack, run_id)["status"] == "pending"
    status, grant = _http(claim_url, default, "POST", ask)
    assert status == 200 and grant["run_id"] == run_id
    assert _http(claim_url, default, "POST", ask)[0] == 204  # connector is not in the default
    with psycopg.connect(dsn, autocommit=True) as db:
        assert db.execute("SELECT status FROM cryo.get_run(%s)", (conn_run,)).fetchone()[0] == \
            "pending"


def _set_secret(stack: Any, name: str, value: str) -> None:
    done = stack.cli("secret", "set", name, input=value + "\n")
    assert done.returncode == 0, done.stderr


def test_secrets_are_injected_and_redacted_even_split_across_flushes(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    assert stack.cli("secret", "list").stdout.split() == ["API_KEY"]
    wf = script(stack.dir, "s.sh", """\
echo "whole: $API_KEY"
printf 'split: %s' "$(echo "$API_KEY" | cut -c1-6)"
sleep 0.5
printf '%s\\n' "$(echo "$API_KEY" | cut -c7-)"
cryopg step use --secret API_KEY -- sh -c 'echo "in step: $API_KEY"'
""")
    run_id = submit(stack, wf)
    done = stack.cli("logs", run_id, "--follow")
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout and SECRET[:6] not in done.stdout.replace("[secret]", "")
    assert done.stdout.count("[secret]") == 3, done.stdout
    assert "in step: [secret]" in done.stdout
    assert stack.cli("secret", "delete", "API_KEY").returncode == 0
    assert stack.cli("secret", "list").stdout.strip() == ""


def test_untrusted_run_gets_no_secret_and_a_step_needing_one_fails(stack: Any) -> None:
    _set_secret(stack, "API_KEY", SECRET)
    charged = stack.dir / "charged"
    wf = script(stack.dir, "u.sh", f"""\
echo "env: [${{API_KEY:-none}}]"
cryopg step charge --secret API_KEY -- sh -c 'echo x >> {charged}'
echo "after the step"
""")
    run_id = submit(stack, wf, "--untrusted")
    done = stack.cli("logs", run_id, "--follow")
    assert done.returncode == 1
    assert "env: [none]" in done.stdout and "after the step" not in done.stdout
    run = show(stack, run_id)
    assert run["status"] == "failed" and "withheld" in run["error"], run
    assert not charged.exists()


def _wait_status(dsn: str, run_id: str, want: str, timeout: float = 60) -> None:
    seen: list[Any] = []

    def probe() -> bool:
        with psycopg.connect(dsn, autocommit=True) as db:
            got = db.execute("SELECT status, error FROM cryo.get_run(%s)", (run_id,)).fetchone()
        seen[:] = [got]
        return got[0] == want
    try:
        wait_for(f"run {run_id} to be {want}", probe, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None


PARKING = """\
cryopg step charge -- sh -c 'echo x >> {calls}; echo charged'
cryopg sleep 1s
echo resumed
"""


def test_a_corrupt_memo_ends_the_run_unreadable(stack: Any, dsn: str) -> None:
    calls = stack.dir / "calls"
    run_id = submit(stack, script(stack.dir, "c.sh", PARKING.format(calls=calls)))
    _wait_status(dsn, run_id, "parked")
    with psycopg.connect(dsn, autocommit=True) as db:  # the test plays an attacker on disk
        db.execute("UPDATE cryo.journal SET result = overlay(result placing '\\xff'::bytea "
                   "from length(result) - 3) WHERE run_id = %s AND key_family = 'step'", (run_id,))
    _wait_status(dsn, run_id, "unreadable")
    assert lines(calls) == ["x"]  # the step was not charged again
    assert "unreadable" in show(stack, run_id)["error"]


def _stop_stack(stack: Any) -> None:
    stack.proc.send_signal(signal.SIGINT)
    stack.proc.wait(15)


def _server_and_agent(stack: Any, dsn: str, master_key: str) -> list[subprocess.Popen[bytes]]:
    env = dict(stack.env, CRYOPG_MASTER_KEY=master_key)
    port = _free_tcp_port()
    url = f"http://127.0.0.1:{port}"
    log = open(stack.dir / f"split-{port}.log", "wb")
    procs = [subprocess.Popen([*CLI, "server", "--database-url", dsn, "--port", str(port),
                               "--tick-interval", "0.2"], env=env, stdout=log, stderr=log,
                              start_new_session=True)]
    wait_for("the server", lambda: _healthy(url), timeout=30)
    procs.append(subprocess.Popen([*CLI, "agent", "--url", url, "--token",
                                   stack.info["agent_token"]], env=env, cwd=stack.dir,
                                  stdout=log, stderr=log, start_new_session=True))
    return procs


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_wrong_master_key_ends_runs_unreadable_and_rotation_keeps_them_readable(
        stack: Any, dsn: str) -> None:
    calls = stack.dir / "calls"
    wrong = submit(stack, script(stack.dir, "w.sh", PARKING.format(calls=calls)))
    kept = submit(stack, script(stack.dir, "k.sh", PARKING.format(calls=calls).replace(
        "1s", "5s")))
    _wait_status(dsn, wrong, "parked")
    _wait_status(dsn, kept, "parked")
    _stop_stack(stack)
    old = (stack.dir / ".cryopg" / "master.key").read_text().strip()
    # A server with a key that never wrapped this org: the due run ends unreadable.
    procs = _server_and_agent(stack, dsn, generate_master_key())
    try:
        _wait_status(dsn, wrong, "unreadable")
    finally:
        _kill(procs)
    # Rotate to a new key; the other run then resumes under it, its step not re-run.
    new = generate_master_key()
    env = dict(stack.env, CRYOPG_MASTER_KEY=old)
    done = subprocess.run([*CLI, "master-key", "rotate", "--database-url", dsn], input=new + "\n",
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    procs = _server_and_agent(stack, dsn, new)
    try:
        _wait_status(dsn, kept, "succeeded")
    finally:
        _kill(procs)
    assert lines(calls) == ["x", "x"]  # one charge per run, none repeated
    with psycopg.connect(dsn, autocommit=True) as db:
        wrapped = db.execute("SELECT wrapped_key FROM cryo.get_org_key('dev')").fetchone()[0]
    assert base64.b64decode(new) not in bytes(wrapped)  # the key itself is never stored
