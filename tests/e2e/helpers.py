"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from cryopg.server.auth import new_secret

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 20, every: float = 0.1) -> T:
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


def show(stack: Any, run_id: str) -> dict[str, Any]:
    done = stack.cli("runs", "show", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def submit(stack: Any, path: Path, *args: str) -> str:
    done = stack.cli("submit", str(path), *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert run_id.startswith("dev:default:run-"), done.stdout
    return run_id


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def http(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
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
