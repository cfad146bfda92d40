"""The aiohttp app in process, on this test's fresh database, driven through aiohttp's
TestClient.

`srv` bootstraps what `cryopg dev` and `cryopg token` do (the dev org and its default
project, an owner member, an agent token with the dev ceiling) plus one user token per
role, builds the app with `build_app(ServerConfig(...))` and hands the test a `Server`:
JSON in and out with the right bearer token, the agent half driven by hand the way
agent/api.py drives it, and `tick()` to run the sweeper (the app's own ticker waits an
hour between rounds, so nothing moves unless a test says so). `tick(later=…)` runs it
with `cryo.fake_now` set ahead, which is how leases lapse and sleeps end here.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from cryopg import engine
from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig

ORG, PROJECT = "dev", "default"
ORG_PATH = f"/api/v1/orgs/{ORG}"
PROJECT_PATH = f"{ORG_PATH}/projects/{PROJECT}"
AGENT_PATH = "/api/v1/agent"
ROLES = ("owner", "admin", "member", "viewer")
AGENT_CAPS = ["shell", "polyglot"]  # what `cryopg dev` gives its agent token
CLAIM_SECONDS = 30.0
_NO_BODY: Any = object()


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, the JSON body (None when not JSON) and the raw text."""

    status: int
    body: Any
    text: str

    def ok(self, status: int = 200) -> Any:
        assert self.status == status, f"wanted {status}, got {self.status}: {self.text}"
        return self.body

    def refused(self, status: int, code: str) -> str:
        """Asserts the error shape every refusal must have; returns its message."""
        assert self.status == status, f"wanted {status} {code}, got {self.status}: {self.text}"
        assert isinstance(self.body, dict) and set(self.body) == {"error"}, self.text
        error = self.body["error"]
        # a refused source may also say its line (`line`, for an editor to mark it)
        assert {"code", "message"} <= set(error) <= {"code", "message", "line"}, self.text
        assert error["code"] == code, self.text
        assert isinstance(error["message"], str) and error["message"], self.text
        return error["message"]


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _secret(kind: str) -> str:
    return f"cryo_{kind[0]}_{secrets.token_urlsafe(24)}"


class Server:
    """A client of the in-process app, logged in as whichever role a call names."""

    def __init__(self, client: TestClient, dsn: str, tokens: dict[str, str], tmp: Path) -> None:
        self.client, self.dsn, self.tokens, self.tmp = client, dsn, tokens, tmp

    @property
    def app(self) -> web.Application:
        return self.client.app  # type: ignore[return-value]

    @property
    def url(self) -> str:
        return str(self.client.make_url("")).rstrip("/")

    # -- plain HTTP ------------------------------------------------------------------------

    async def request(self, method: str, path: str, body: Any = _NO_BODY, *,
                      token: str | None, data: bytes | None = None) -> Reply:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        kwargs: dict[str, Any] = {}
        if data is not None:
            kwargs["data"] = data
            headers["Content-Type"] = "application/json"
        elif body is not _NO_BODY:
            kwargs["json"] = body
        async with self.client.request(method, path, headers=headers, **kwargs) as resp:
            raw = await resp.read()
            is_json = resp.content_type == "application/json"
        text = raw.decode(errors="replace")
        return Reply(resp.status, json.loads(raw) if is_json and raw else None, text)

    async def user(self, method: str, path: str, body: Any = _NO_BODY, *, role: str = "owner",
                   token: str | None = None, data: bytes | None = None) -> Reply:
        """A user route; a path not starting with /api/ is under the default project."""
        full = path if path.startswith("/api/") else PROJECT_PATH + path
        return await self.request(method, full, body, token=token or self.tokens[role], data=data)

    async def org(self, method: str, path: str, body: Any = _NO_BODY, *, role: str = "owner",
                  token: str | None = None) -> Reply:
        """An org-level route of the dev org (members, projects)."""
        return await self.request(method, ORG_PATH + path, body, token=token or self.tokens[role])

    async def agent(self, path: str, body: Any = _NO_BODY, *, token: str | None = None,
                    data: bytes | None = None) -> Reply:
        return await self.request("POST", AGENT_PATH + path, body,
                                  token=token or self.tokens["agent"], data=data)

    # -- the user's side -------------------------------------------------------------------

    async def submit(self, source: str = "echo hi\n", filename: str = "job.sh",
                     **fields: Any) -> str:
        got = (await self.user("POST", "/runs", {"source": source, "filename": filename,
                                                 **fields})).ok(201)
        assert got["created"] is True
        return str(got["run_id"])

    async def show(self, run_id: str) -> dict[str, Any]:
        return (await self.user("GET", f"/runs/{run_id}")).ok()  # type: ignore[no-any-return]

    async def status(self, run_id: str) -> str:
        return str((await self.show(run_id))["status"])

    # -- the agent's side, by hand ---------------------------------------------------------

    async def claim(self, *, caps: list[str] | None = None, agent_id: str = "agent-1",
                    token: str | None = None) -> dict[str, Any] | None:
        """One claim that does not wait: the grant, or None when nothing was handed out."""
        reply = await self.agent("/claim", {"agent_id": agent_id,
                                            "capabilities": caps or AGENT_CAPS, "wait": 0},
                                 token=token)
        if reply.status == 204:
            return None
        return reply.ok()  # type: ignore[no-any-return]

    async def claim_run(self, run_id: str, **kwargs: Any) -> dict[str, Any]:
        grant = await self.claim(**kwargs)
        assert grant is not None and grant["run_id"] == run_id, grant
        return grant

    async def in_run(self, grant: dict[str, Any], what: str, /, *, token: str | None = None,
                     **fields: Any) -> Reply:
        """An agent call on the granted run, echoing its claim token as the agent does."""
        body = {"claim_token": grant["claim_token"], **fields}
        return await self.agent(f"/runs/{grant['run_id']}/{what}", body, token=token)

    async def log(self, grant: dict[str, Any], data: bytes) -> bool:
        """Appends log bytes (renewing the lease); returns the cancel flag."""
        got = (await self.in_run(grant, "logs", data=base64.b64encode(data).decode())).ok()
        return bool(got["cancel"])

    async def finish(self, grant: dict[str, Any], outcome: str = "succeeded",
                     exit_code: int | None = 0, error: str | None = None) -> None:
        (await self.in_run(grant, "finish", outcome=outcome, exit_code=exit_code,
                           error=error)).ok()

    async def run_to_end(self, source: str = "echo hi\n", outcome: str = "succeeded",
                         **fields: Any) -> str:
        run_id = await self.submit(source, **fields)
        await self.finish(await self.claim_run(run_id), outcome,
                          0 if outcome == "succeeded" else 1)
        return run_id

    # -- the operator's side ---------------------------------------------------------------

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def tick(self, later: float = 0.0) -> tuple[int, int]:
        """One round of the sweeper, `later` seconds in the future (cryo.fake_now)."""
        async with await self.connect() as conn:
            if later:
                await conn.execute(
                    "SELECT set_config('cryo.fake_now', "
                    "(now() + make_interval(secs => %s))::text, false)", (later,))
            return await engine.tick(conn)

    async def make_token(self, role: str = "member", *, login: str | None = None,
                         org: str = ORG, kind: str = "user", caps: list[str] | None = None,
                         expires_at: dt.datetime | None = None,
                         fake_now: dt.datetime | None = None) -> str:
        """What `cryopg token --kind … --member … --role …` does: the member is created
        with the role when missing, then a token is made for it. `fake_now` makes it as
        of another moment (so a token can be born already expired)."""
        secret = _secret(kind)
        async with await self.connect() as conn:
            if fake_now is not None:
                await conn.execute("SELECT set_config('cryo.fake_now', %s, false)",
                                   (fake_now.isoformat(),))
            member = None
            if kind == "user":
                member = login or f"{role}-{secrets.token_hex(3)}"
                await engine.ensure_member(conn, org, member, role)
            await engine.create_token(conn, kind, org, "test", _hash(secret), caps,
                                      expires_at=expires_at, member=member)
        return secret

    async def add_org(self, org: str, project: str = "web") -> str:
        """Another tenant with one project; returns its owner's user token."""
        async with await self.connect() as conn:
            await engine.ensure_org(conn, org, org.title())
            await engine.ensure_project(conn, org, project, project.title())
        return await self.make_token("owner", login="boss", org=org)

    async def cli(self, *args: str, input: str | None = None,
                  token: str | None = None, launcher: tuple[str, ...] = ()) -> Done:
        """The `cryopg` CLI as a user runs it, pointed at this in-process server (through
        `launcher`, a command that runs the rest of its argv, when given)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRYOPG_")}
        env.update(CRYOPG_URL=self.url, CRYOPG_TOKEN=token or self.tokens["owner"],
                   CRYOPG_DATABASE_URL=self.dsn)
        proc = await asyncio.create_subprocess_exec(
            *launcher, sys.executable, "-m", "cryopg.cli.entry", *args, cwd=self.tmp, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(
            proc.communicate(None if input is None else input.encode()), 60)
        assert proc.returncode is not None
        return Done(proc.returncode, out.decode(), err.decode())


async def _bootstrap(dsn: str) -> dict[str, str]:
    """The dev org, project and owner, as `cryopg dev` makes them, and a token per role."""
    tokens = {kind: _secret(kind) for kind in ("agent", *ROLES)}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await engine.ensure_org(conn, ORG, "Development")
        await engine.ensure_project(conn, ORG, PROJECT, "Default")
        await engine.create_token(conn, "agent", ORG, "dev agent", _hash(tokens["agent"]),
                                  AGENT_CAPS)
        for role in ROLES:
            login = "dev" if role == "owner" else role
            await engine.ensure_member(conn, ORG, login, role)
            await engine.create_token(conn, "user", ORG, f"dev {role}", _hash(tokens[role]),
                                      member=login)
    return tokens


@pytest.fixture
async def srv(dsn: str, tmp_path: Path) -> AsyncIterator[Server]:
    tokens = await _bootstrap(dsn)
    config = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                          claim_seconds=CLAIM_SECONDS, tick_interval=3600.0,
                          claim_wait_max=2.0, pool_size=4)
    async with TestClient(TestServer(build_app(config))) as client:
        yield Server(client, dsn, tokens, tmp_path)
