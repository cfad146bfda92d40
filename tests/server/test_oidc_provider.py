"""Sign-in against a real OpenID provider on loopback (oidc-provider-mock): the browser's
round trip through the provider's page, the provider rotating its signing key, the
claim map, and `cryopg login` with a loopback redirect, its stored credential and
`cryopg logout`."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from oidc_provider_mock import User

from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from cryopg.server.oidc import OidcSettings
from cryopg.server.user_api.sign_in import ISSUER
from tests.oidc_mock import Provider, running_provider
from tests.server.conftest import _bootstrap

ME = "/api/v1/orgs/dev/me"
USERS = [User(sub="alice", claims={"email": "alice@example.com", "email_verified": True}),
         User(sub="olga", claims={"email": "olga@example.com", "groups": ["ops"]})]


@pytest.fixture
def provider(request: pytest.FixtureRequest) -> Iterator[Provider]:
    # `@pytest.mark.consent_for_refresh`: a provider that grants a refresh token only to
    # a sign-in asking offline_access with prompt=consent (as many real ones do).
    consent = request.node.get_closest_marker("consent_for_refresh") is not None
    with running_provider(USERS, consent_for_refresh=consent) as p:
        yield p


@pytest.fixture
async def client(dsn: str, provider: Provider) -> AsyncIterator[TestClient]:
    await _bootstrap(dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT cryo.put_member('dev', 'alice@example.com', 'member'),"
                           " cryo.put_role_map('dev', 'groups', 'ops', 'admin')")
    config = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                          tick_interval=3600.0, pool_size=4,
                          oidc=OidcSettings.from_env(provider.env()))
    async with TestClient(TestServer(build_app(config))) as c:
        c.app[ISSUER].refresh_floor = 0.0
        yield c


async def _browser_sign_in(client: TestClient, provider: Provider, sub: str) -> None:
    async with client.get("/api/v1/auth/oidc/login?org=dev", allow_redirects=False) as resp:
        assert resp.status == 302
        at_provider = resp.headers["Location"]
    assert at_provider.startswith(provider.issuer)
    back = await asyncio.to_thread(provider.authorize, at_provider, sub)
    callback = str(client.make_url("/api/v1/auth/oidc/callback"))
    assert back.startswith(callback)
    async with client.get(back[back.index("/api/"):], allow_redirects=False) as resp:
        assert resp.status == 302, await resp.text()
        assert resp.headers["Location"] == "/#/runs"
        assert resp.cookies["cryo_session"]["httponly"]


async def _me(client: TestClient) -> tuple[int, dict[str, str]]:
    async with client.get(ME) as resp:
        return resp.status, await resp.json()


async def test_sign_in_through_the_provider_and_its_key_rotation(
        client: TestClient, provider: Provider) -> None:
    await _browser_sign_in(client, provider, "alice")
    assert await _me(client) == (200, {"org": "dev", "login": "alice@example.com",
                                       "role": "member"})
    provider.rotate()  # tokens from now on are signed by a key the server never saw
    client.session.cookie_jar.clear()
    await _browser_sign_in(client, provider, "alice")
    assert (await _me(client))[0] == 200
    # The claim map admits somebody the org did not list, with the mapped role.
    client.session.cookie_jar.clear()
    await _browser_sign_in(client, provider, "olga")
    assert await _me(client) == (200, {"org": "dev", "login": "olga@example.com",
                                       "role": "admin"})
    # A stranger the provider vouches for ends on the not-a-member page, signed in nowhere.
    client.session.cookie_jar.clear()
    async with client.get("/api/v1/auth/oidc/login?org=dev", allow_redirects=False) as resp:
        at_provider = resp.headers["Location"]
    back = await asyncio.to_thread(provider.authorize, at_provider, "mallory@example.com")
    async with client.get(back[back.index("/api/"):], allow_redirects=False) as resp:
        assert resp.status == 403 and "Not a member" in await resp.text()
        assert "cryo_session" not in resp.cookies
    assert (await _me(client))[0] == 401


async def _cli(client: TestClient, home: Path, *args: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYOPG_")}
    env["XDG_CONFIG_HOME"] = str(home)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cryopg.cli.entry", *args, cwd=home, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _done(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cryopg_login_signs_the_cli_in_and_logout_ends_it(
        client: TestClient, provider: Provider, tmp_path: Path) -> None:
    url = str(client.make_url("")).rstrip("/")
    proc = await _cli(client, tmp_path, "login", "--url", url, "--loopback", "--no-browser")
    assert proc.stderr is not None
    address = ""
    while not address.startswith(provider.issuer):
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, "the CLI ended without printing the provider's address"
        address = line.decode().strip()
    back = await asyncio.to_thread(provider.authorize, address, "alice")
    assert back.startswith("http://127.0.0.1:")
    await asyncio.to_thread(lambda: urllib.request.urlopen(back, timeout=10).read())
    code, out, err = await _done(proc)
    assert code == 0, err
    assert "signed in" in out and "alice@example.com (member)" in out

    stored = tmp_path / "cryopg" / "credentials.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700

    # No CRYOPG_URL, CRYOPG_TOKEN or dev stack: the stored sign-in is what the CLI uses.
    code, out, err = await _done(await _cli(client, tmp_path, "member", "list"))
    assert code == 0, err
    assert "alice@example.com" in out

    code, out, err = await _done(await _cli(client, tmp_path, "logout"))
    assert code == 0 and "signed out" in out, err
    code, out, err = await _done(await _cli(client, tmp_path, "member", "list"))
    assert code != 0 and "cryopg login" in err


@pytest.mark.consent_for_refresh
async def test_cryopg_login_loopback_asks_offline_access_and_keeps_the_refresh_token(
        client: TestClient, provider: Provider, tmp_path: Path) -> None:
    url = str(client.make_url("")).rstrip("/")
    proc = await _cli(client, tmp_path, "login", "--url", url, "--loopback", "--no-browser")
    assert proc.stderr is not None
    address = ""
    while not address.startswith(provider.issuer):
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert line, "the CLI ended without printing the provider's address"
        address = line.decode().strip()
    back = await asyncio.to_thread(provider.authorize, address, "alice")
    await asyncio.to_thread(lambda: urllib.request.urlopen(back, timeout=10).read())
    code, out, err = await _done(proc)
    assert code == 0, err
    asked = provider.authorized[-1]
    assert asked.get("prompt") == "consent" and "offline_access" in asked["scope"].split()
    stored = json.loads((tmp_path / "cryopg" / "credentials.json").read_text())
    entry = stored["servers"][url]
    assert entry.get("refresh_token"), entry


async def test_cryopg_login_refuses_a_server_without_an_issuer(srv: object,
                                                               tmp_path: Path) -> None:
    url = srv.url  # type: ignore[attr-defined]
    code, _, err = await _done(await _cli(None, tmp_path, "login", "--url", url))  # type: ignore[arg-type]
    assert code == 2 and "no OIDC issuer" in err and "Traceback" not in err
