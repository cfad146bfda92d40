"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import psycopg

from cryopg.server.auth import new_secret

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 90, every: float = 0.1) -> T:
    """`probe()` as soon as it is truthy; an AssertionError naming `what` after `timeout`
    seconds. The deadline is generous (a loaded machine is slow), never a pause: the
    wait ends at the first poll that sees the condition."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def script(dir: Path, name: str, body: str) -> Path:
    path = dir / name
    path.write_text(body)
    return path


def target(stack: Any) -> tuple[str, str, str, str]:
    """(url, user token, org, project) the CLI of `stack` (a `stack`, a `split`) talks to,
    found as the CLI finds them: CRYOPG_URL and CRYOPG_TOKEN in its environment, else the
    dev.json of its directory."""
    env = getattr(stack, "env", None) or os.environ
    org, project = env.get("CRYOPG_ORG"), env.get("CRYOPG_PROJECT")
    if env.get("CRYOPG_URL") and env.get("CRYOPG_TOKEN"):
        return (env["CRYOPG_URL"].rstrip("/"), env["CRYOPG_TOKEN"], org or "dev",
                project or "default")
    dev = json.loads((Path(stack.dir) / ".cryopg" / "dev.json").read_text())
    return dev["url"], dev["user_token"], org or dev["org"], project or dev["project"]


def api(stack: Any, path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    """One request to the project API of `stack` (`path` after
    /api/v1/orgs/{org}/projects/{project}) with its user token: (status, JSON or bytes).
    What a wait polls, instead of starting the CLI each time."""
    url, token, org, project = target(stack)
    return http(f"{url}/api/v1/orgs/{quote(org)}/projects/{quote(project)}"
                f"{quote(path, safe='/:?&=%+,')}", token, method, body)


def show(stack: Any, run_id: str) -> dict[str, Any]:
    """What `cryopg runs show RUN --json` prints, read over HTTP; AssertionError when the
    server does not answer it."""
    if run_id.startswith("run-"):  # a bare id is of the active project, as for the CLI
        _, _, org, project = target(stack)
        run_id = f"{org}:{project}:{run_id}"
    try:
        status, got = api(stack, f"/runs/{run_id}")
    except OSError as exc:  # the server is not up (yet, or again)
        raise AssertionError(f"cannot reach the server: {exc}") from None
    assert status == 200, (status, got)
    return got  # type: ignore[no-any-return]


def status(stack: Any, run_id: str) -> str:
    return str(show(stack, run_id)["status"])


def finished(stack: Any, run_id: str, timeout: float = 120) -> dict[str, Any]:
    """The run once it has ended (whatever the outcome)."""
    return wait_for(f"{run_id} to end",
                    lambda: (r := show(stack, run_id))["finished_at"] and r, timeout=timeout)


def submit(stack: Any, path: Path, *args: str) -> str:
    done = stack.cli("submit", str(path), *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    _, _, org, project = target(stack)
    assert run_id.startswith(f"{org}:{project}:run-"), done.stdout
    return run_id


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def http(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw and raw[:1] in b"{[" else raw)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, (json.loads(raw) if raw[:1] == b"{" else raw)


def token(dsn: str, kind: str, *, org: str = "dev", member: str | None = None,
           role: str = "owner", caps: list[str] | None = None,
           expires: str | None = None) -> str:
    secret = new_secret(kind)
    with psycopg.connect(dsn, autocommit=True) as db:
        if member:
            db.execute("SELECT cryo.put_member(%s, %s, %s)", (org, member, role))
        db.execute("SELECT cryo.create_token(%s, %s, 't', %s, %s, %s::timestamptz, %s)",
                   (kind, org, hashlib.sha256(secret.encode()).digest(), caps or [], expires,
                    member))
    return secret
