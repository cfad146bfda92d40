"""Browser sign-in through an OIDC issuer, against the in-process server and a loopback
issuer whose ID tokens the test mints (tests/server/oidc_issuer.py): the session cookie
on success, and no session for a bad state, a wrong nonce, an expired, wrongly signed or
wrongly addressed ID token, or a person the org does not know; CSRF on cookie requests;
key rotation; the claim map; sign-out; the CLI's token trade."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server.app import build_app
from cryopg.server.config import ServerConfig
from cryopg.server.oidc import OidcSettings
from cryopg.server.user_api.sign_in import ISSUER
from tests.server.conftest import _bootstrap
from tests.server.oidc_issuer import CLIENT, SECRET, TestIssuer, running_issuer

LOGIN = "/api/v1/auth/oidc/login?org=dev"
CALLBACK = "/api/v1/auth/oidc/callback"
ME = "/api/v1/orgs/dev/me"


@dataclass
class Site:
    client: TestClient
    issuer: TestIssuer
    dsn: str

    async def start(self) -> dict[str, str]:
        """The server's redirect to the issuer: its state and nonce."""
        async with self.client.get(LOGIN, allow_redirects=False) as resp:
            assert resp.status == 302, await resp.text()
            assert resp.cookies["cryo_oidc_login"]["httponly"]
            return self.issuer.saw_authorize(resp.headers["Location"])

    async def back(self, state: str, code: str = "the-code") -> tuple[int, str, str]:
        """The issuer's redirect back: (status, Location or page text, session cookie)."""
        async with self.client.get(CALLBACK, params={"code": code, "state": state},
                                   allow_redirects=False) as resp:
            text = resp.headers.get("Location") or await resp.text()
            morsel = resp.cookies.get("cryo_session")
            if morsel is not None:
                assert morsel["httponly"] and morsel["samesite"] == "Lax"
                assert morsel["path"] == "/" and int(morsel["max-age"]) > 0
            return resp.status, text, morsel.value if morsel is not None else ""

    async def sign_in(self, **claims: Any) -> str:
        query = await self.start()
        self.issuer.next_claims = {"nonce": query["nonce"], **claims}
        status, where, cookie = await self.back(query["state"])
        assert (status, where) == (302, "/#/runs"), where
        assert cookie
        return cookie

    async def refused(self, **claims: Any) -> str:
        query = await self.start()
        self.issuer.next_claims = {"nonce": query["nonce"], **claims}
        status, page, cookie = await self.back(query["state"])
        assert status in (400, 401, 403) and not cookie, (status, page)
        assert "cryo_session" not in {c.key for c in self.client.session.cookie_jar}
        return page

    async def json(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.client.request(method, path, **kw) as resp:
            return resp.status, await resp.json()


@pytest.fixture
async def site(dsn: str) -> AsyncIterator[Site]:
    await _bootstrap(dsn)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT cryo.put_member('dev', 'alice@example.com', 'member')")
    async with running_issuer() as issuer:
        config = ServerConfig(dsn, MasterKey(parse_master_key(generate_master_key())),
                              tick_interval=3600.0, pool_size=4,
                              oidc=OidcSettings(issuer=issuer.url, client_id=CLIENT,
                                                client_secret=SECRET, session_hours=1))
        async with TestClient(TestServer(build_app(config))) as client:
            client.app[ISSUER].refresh_floor = 0.0
            yield Site(client, issuer, dsn)


async def test_a_member_signs_in_and_the_cookie_acts_for_them(site: Site) -> None:
    cookie = await site.sign_in()
    status, me = await site.json("GET", ME)
    assert status == 200 and me["login"] == "alice@example.com" and me["role"] == "member"
    status, info = await site.json("GET", "/api/v1/auth/session")
    assert status == 200 and info["org"] == "dev" and info["csrf"]
    assert cookie not in info.values()  # the page never learns the cookie itself

    # A change made with the cookie alone (as a form on another site would) is refused;
    # with the page's anti-forgery header it goes through.
    body = {"name": "p1", "payload": {}}
    status, err = await site.json("POST", "/api/v1/orgs/dev/projects/default/events/ping",
                                  json=body)
    assert status == 403 and err["error"]["code"] == "csrf_refused"
    status, err = await site.json("POST", "/api/v1/orgs/dev/projects/default/events/ping",
                                  json=body, headers={"X-Cryo-CSRF": "forged"})
    assert status == 403 and err["error"]["code"] == "csrf_refused"
    status, _ = await site.json("POST", "/api/v1/orgs/dev/projects/default/events/ping",
                                json=body, headers={"X-Cryo-CSRF": info["csrf"]})
    assert status in (200, 201)

    # Signing out ends the session at the server, not just in this browser.
    status, _ = await site.json("POST", "/api/v1/auth/logout")
    assert status == 403
    status, out = await site.json("POST", "/api/v1/auth/logout",
                                  headers={"X-Cryo-CSRF": info["csrf"]})
    assert status == 200 and out == {"signed_out": True}
    status, err = await site.json("GET", ME, headers={"Cookie": f"cryo_session={cookie}"})
    assert status == 401 and err["error"]["code"] == "unauthorized"


async def test_a_forged_or_replayed_state_gets_no_session(site: Site) -> None:
    query = await site.start()
    site.issuer.next_claims = {"nonce": query["nonce"]}
    status, page, cookie = await site.back("forged-" + query["state"])
    assert status == 400 and not cookie and "Sign-in refused" in page
    status, where, cookie = await site.back(query["state"])  # the real one still works
    assert (status, where) == (302, "/#/runs") and cookie
    status, page, cookie = await site.back(query["state"])  # once
    assert status == 400 and not cookie


@pytest.mark.parametrize("case", ["wrong nonce", "expired", "wrong audience", "other issuer",
                                  "no nonce", "issued long ago"])
async def test_an_id_token_wrong_in_one_way_gets_no_session(site: Site, case: str) -> None:
    now = int(time.time())
    claims = {"wrong nonce": {"nonce": "not-the-one"},
              "expired": {"exp": now - 3600, "iat": now - 4000},
              "wrong audience": {"aud": "someone-else"},
              "other issuer": {"iss": "https://evil.example"},
              "no nonce": {"nonce": None},
              "issued long ago": {"iat": now - 7200, "exp": now + 600}}[case]
    page = await site.refused(**claims)
    assert "Sign-in refused" in page


async def test_a_token_signed_by_another_key_gets_no_session(site: Site) -> None:
    stranger = TestIssuer._new_key()
    query = await site.start()
    site.issuer.next_token = site.issuer.mint(stranger, nonce=query["nonce"])
    status, page, cookie = await site.back(query["state"])
    assert status == 401 and not cookie and "signature" in page
    # An unsigned ("none") token is no better.
    query = await site.start()
    good = site.issuer.mint(nonce=query["nonce"])
    head, body, _ = good.split(".")
    site.issuer.next_token = f"{head}.{body}."
    status, page, cookie = await site.back(query["state"])
    assert status == 401 and not cookie


async def test_someone_the_org_does_not_know_gets_the_not_a_member_page(site: Site) -> None:
    page = await site.refused(sub="sub-mallory", email="mallory@example.com")
    assert "Not a member" in page and "mallory@example.com" in page
    # An email the issuer has not verified does not match the member who has it.
    page = await site.refused(sub="sub-x", email="alice@example.com", email_verified=False)
    assert "Not a member" in page


async def test_the_issuer_rotates_its_keys(site: Site) -> None:
    await site.sign_in()
    reads = site.issuer.jwks_reads
    site.issuer.rotate()
    await site.sign_in()  # a kid never seen: the keys are read again, once
    assert site.issuer.jwks_reads == reads + 1
    await site.sign_in()
    assert site.issuer.jwks_reads == reads + 1  # and cached again


async def test_the_claim_map_gives_roles(site: Site) -> None:
    admin = {"Authorization": "Bearer " + (await _owner_token(site))}
    status, _ = await site.json("PUT", "/api/v1/orgs/dev/role-maps/groups/ops",
                                json={"role": "admin"}, headers=admin)
    assert status == 201
    status, maps = await site.json("GET", "/api/v1/orgs/dev/role-maps", headers=admin)
    assert [(m["claim"], m["value"], m["role"]) for m in maps["role_maps"]] == [
        ("groups", "ops", "admin")]
    await site.sign_in(sub="sub-olga", email="olga@example.com", groups=["ops", "x"])
    status, me = await site.json("GET", ME)
    assert (me["login"], me["role"]) == ("olga@example.com", "admin")
    status, listed = await site.json("GET", "/api/v1/orgs/dev/sessions", headers=admin)
    ours = [s for s in listed["sessions"] if s["member"] == "olga@example.com"]
    assert len(ours) == 1 and ours[0]["kind"] == "web"
    # An admin ends it: the cookie stops working at once.
    status, got = await site.json("DELETE", f"/api/v1/orgs/dev/sessions/{ours[0]['id']}",
                                  headers=admin)
    assert status == 200 and got == {"revoked": True}
    status, _ = await site.json("GET", ME)
    assert status == 401


async def _cli_nonce(site: Site, org: str = "dev") -> str:
    status, got = await site.json("POST", "/api/v1/auth/oidc/cli/nonce", json={"org": org})
    assert status == 200 and len(got["nonce"]) >= 32, got
    return str(got["nonce"])


async def _trade(site: Site, token: str, **extra: Any) -> tuple[int, Any]:
    return await site.json("POST", "/api/v1/auth/oidc/cli",
                           json={"id_token": token, "org": "dev", **extra})


async def test_the_cli_trades_an_id_token_for_a_bearer_session(site: Site) -> None:
    nonce = await _cli_nonce(site)
    token = site.issuer.mint(nonce=nonce)
    status, got = await _trade(site, token, nonce=nonce)
    assert status == 200 and got["login"] == "alice@example.com", got
    bearer = {"Authorization": f"Bearer {got['session']}"}
    status, me = await site.json("GET", ME, headers=bearer)
    assert status == 200 and me["role"] == "member"
    nonce = await _cli_nonce(site)
    status, err = await _trade(site, site.issuer.mint(aud="other", nonce=nonce), nonce=nonce)
    assert status == 401 and err["error"]["code"] == "sign_in_refused"
    nonce = await _cli_nonce(site)
    status, err = await _trade(site, site.issuer.mint(sub="s", email="z@x.io", nonce=nonce),
                               nonce=nonce)
    assert status == 403 and err["error"]["code"] == "not_a_member"
    status, _ = await site.json("POST", "/api/v1/auth/logout", headers=bearer)
    assert status == 200
    status, _ = await site.json("GET", ME, headers=bearer)
    assert status == 401


async def test_the_cli_trade_needs_its_own_nonce_and_each_token_goes_once(site: Site) -> None:
    # No nonce at all: neither in the token nor in the request.
    status, err = await _trade(site, site.issuer.mint())
    assert status == 401 and err["error"]["code"] == "sign_in_refused", err
    # A nonce in the request that the token does not carry.
    nonce = await _cli_nonce(site)
    status, err = await _trade(site, site.issuer.mint(), nonce=nonce)
    assert status == 401 and err["error"]["code"] == "sign_in_refused", err
    # A nonce the server never handed out (made up by whoever holds the token).
    status, err = await _trade(site, site.issuer.mint(nonce="n" * 32), nonce="n" * 32)
    assert status == 401 and "nonce" in err["error"]["message"], err
    # A browser sign-in's nonce: its ID token is not a CLI's.
    web = await site.start()
    status, err = await _trade(site, site.issuer.mint(nonce=web["nonce"]), nonce=web["nonce"])
    assert status == 401 and "nonce" in err["error"]["message"], err
    # A nonce handed out for another org.
    other = await _cli_nonce(site, "acme")
    status, err = await _trade(site, site.issuer.mint(nonce=other), nonce=other)
    assert status == 401 and "nonce" in err["error"]["message"], err
    # The same token twice: the first gets a session, the second nothing; and a second
    # token with the used nonce is refused too.
    nonce = await _cli_nonce(site)
    token = site.issuer.mint(nonce=nonce)
    assert (await _trade(site, token, nonce=nonce))[0] == 200
    status, err = await _trade(site, token, nonce=nonce)
    assert status == 401 and err["error"]["code"] == "sign_in_refused", err
    status, err = await _trade(site, site.issuer.mint(nonce=nonce, sub="sub-alice", jti="2"),
                               nonce=nonce)
    assert status == 401, err
    async with await psycopg.AsyncConnection.connect(site.dsn, autocommit=True) as conn:
        spent = await (await conn.execute("SELECT count(*) FROM cryo.oidc_spent_tokens")
                       ).fetchone()
    assert spent is not None and spent[0] >= 1


async def test_a_browser_sign_ins_id_token_is_not_traded_again(site: Site) -> None:
    query = await site.start()
    site.issuer.next_claims = {"nonce": query["nonce"]}
    token = site.issuer.mint(nonce=query["nonce"])
    site.issuer.next_token = token
    status, where, cookie = await site.back(query["state"])
    assert (status, where) == (302, "/#/runs") and cookie
    # The same token at the CLI route, with the browser's nonce: refused.
    status, err = await _trade(site, token, nonce=query["nonce"])
    assert status == 401, err
    # ... and through a second browser sign-in whose nonce it cannot match anyway
    query = await site.start()
    status, page, cookie = await site.back(query["state"])
    assert status in (400, 401) and not cookie, page


async def test_a_renewal_trades_a_refreshed_token_with_the_old_session(site: Site) -> None:
    nonce = await _cli_nonce(site)
    status, got = await _trade(site, site.issuer.mint(nonce=nonce), nonce=nonce)
    assert status == 200
    old = {"Authorization": f"Bearer {got['session']}"}
    # A refreshed ID token has no fresh nonce: the old session stands in for it.
    status, renewed = await site.json("POST", "/api/v1/auth/oidc/cli", headers=old,
                                      json={"id_token": site.issuer.mint(jti="r1"),
                                            "org": "dev"})
    assert status == 200 and renewed["session"] != got["session"], renewed
    assert (await site.json("GET", ME, headers=old))[0] == 401  # the old one ended
    # Someone else's session does not renew for alice.
    again = {"Authorization": f"Bearer {renewed['session']}"}
    status, err = await site.json("POST", "/api/v1/auth/oidc/cli", headers=again,
                                  json={"id_token": site.issuer.mint(sub="mallory", jti="r2"),
                                        "org": "dev"})
    assert status == 401, err


@pytest.mark.parametrize("url", ["http://example.com", "http://10.0.0.5:8080",
                                 "http://127.example.com", "ftp://127.0.0.1"])
def test_an_issuer_off_loopback_must_be_https(url: str) -> None:
    with pytest.raises(ValueError, match="https"):
        OidcSettings.from_env({"CRYOPG_OIDC_ISSUER": url, "CRYOPG_OIDC_CLIENT_ID": "c"})


@pytest.mark.parametrize("url", ["https://id.example.com", "http://127.0.0.1:9000",
                                 "http://127.3.4.5", "http://[::1]:8080", "http://localhost:1"])
def test_https_or_loopback_issuers_are_accepted(url: str) -> None:
    settings = OidcSettings.from_env({"CRYOPG_OIDC_ISSUER": url, "CRYOPG_OIDC_CLIENT_ID": "c"})
    assert settings is not None and settings.issuer == url


async def test_endpoints_the_discovery_names_over_http_off_loopback_are_refused(
        site: Site) -> None:
    site.issuer.extra_meta = {"userinfo_endpoint": "http://userinfo.example.com/u"}
    site.client.app[ISSUER]._meta = None
    async with site.client.get(LOGIN, allow_redirects=False) as resp:
        assert resp.status == 401, await resp.text()
        assert "https" in (await resp.json())["error"]["message"]


async def test_claims_only_the_userinfo_endpoint_holds_sign_people_in(site: Site) -> None:
    # A provider in its default settings: the ID token names the subject alone.
    site.issuer.userinfo = {"sub": "sub-olga", "email": "olga@example.com",
                            "email_verified": True, "groups": ["ops"]}
    site.client.app[ISSUER]._meta = None  # the discovery now lists userinfo_endpoint
    async with await psycopg.AsyncConnection.connect(site.dsn, autocommit=True) as conn:
        await conn.execute("SELECT cryo.put_role_map('dev', 'groups', 'ops', 'admin')")
    await site.sign_in(sub="sub-olga", email=None, email_verified=None)
    status, me = await site.json("GET", ME)
    assert status == 200 and me["login"] == "olga@example.com" and me["role"] == "admin", me
    assert site.issuer.userinfo_reads == 1
    # The CLI hands its access token over for the same read.
    nonce = await _cli_nonce(site)
    status, got = await _trade(site, site.issuer.mint(sub="sub-olga", email=None,
                                                      email_verified=None, nonce=nonce),
                               nonce=nonce, access_token="at")
    assert status == 200 and got["login"] == "olga@example.com", got
    # A userinfo answer about another subject is not believed.
    site.issuer.userinfo = {"sub": "sub-someone", "email": "alice@example.com"}
    site.client.session.cookie_jar.clear()
    page = await site.refused(sub="sub-olga", email=None, email_verified=None)
    assert "another subject" in page, page


async def test_without_an_issuer_the_routes_say_so(srv: Any) -> None:
    assert (await srv.request("GET", "/api/v1/auth/config", token=None)).ok() == {"oidc": None}
    (await srv.request("GET", LOGIN, token=None)).refused(404, "not_found")
    (await srv.request("POST", "/api/v1/auth/oidc/cli", {"id_token": "x", "org": "dev"},
                       token=None)).refused(404, "not_found")
    (await srv.request("GET", "/api/v1/auth/session", token=None)).refused(401, "unauthorized")


async def _owner_token(site: Site) -> str:
    import hashlib
    import secrets

    secret = "cryo_u_" + secrets.token_urlsafe(24)
    async with await psycopg.AsyncConnection.connect(site.dsn, autocommit=True) as conn:
        await conn.execute("SELECT cryo.create_token('user', 'dev', 't', %s, '{}', NULL, 'dev')",
                           (hashlib.sha256(secret.encode()).digest(),))
    return secret
