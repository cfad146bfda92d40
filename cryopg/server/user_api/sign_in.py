"""Signing people in through the OIDC issuer: `/api/v1/auth/…`.

The browser: `oidc/login?org=O` records a sign-in (state, nonce, PKCE verifier) under a
random id the browser keeps in a short-lived cookie and sends the browser to the
issuer; the issuer sends it back to `oidc/callback`, which uses that sign-in up (its
state must match), redeems the code, verifies the ID token (nonce included) and asks
cryo.oidc_sign_in for a session, set as an HttpOnly, SameSite=Lax cookie (Secure off
loopback). Anything that does not hold up ends on a page saying why, with no cookie.
`session` tells the page who is signed in (and its anti-forgery value); `logout` ends
the session. The CLI (`cryopg login`) asks `oidc/cli/nonce` for a nonce, gets its ID
token (carrying it) from the issuer itself and trades it at `oidc/cli` for a session it
presents as a bearer token. Each ID token is traded once (cryo.spend_id_token); claims
the ID token lacks (email, groups) are read from the issuer's userinfo endpoint.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
from aiohttp import web
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, InvalidArgument, NotFound, SignInRefused, Unauthorized
from cryopg.server.app_state import CONFIG, POOL
from cryopg.server.auth import (
    SESSION_COOKIES,
    _bearer,
    csrf_of,
    secret_hash,
    session_cookie,
    user_secret_hash,
)
from cryopg.server.bodies import json_body, optional_str_field, str_field
from cryopg.server.oidc import LEEWAY, MAX_TOKEN_AGE, Issuer, OidcSettings
from cryopg.server.render import iso

ISSUER = web.AppKey("oidc_issuer", Issuer)
AUTH = "/api/v1/auth"
CALLBACK = f"{AUTH}/oidc/callback"
LOGIN_COOKIE = "cryo_oidc_login"
LOGIN_SECONDS = 600  # to sign in at the issuer and come back
MAX_ID_TOKEN = 16384
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


async def issuer_ctx(app: web.Application) -> AsyncIterator[None]:
    """The issuer's HTTP client, when sign-in is configured."""
    settings = app[CONFIG].oidc
    if settings is None:
        yield
        return
    async with aiohttp.ClientSession() as http:
        app[ISSUER] = Issuer(settings, http)
        yield


def _settings(request: web.Request) -> OidcSettings:
    settings = request.app[CONFIG].oidc
    if settings is None:
        raise NotFound("sign-in through an OIDC issuer is not configured on this server "
                       "(CRYOPG_OIDC_ISSUER, CRYOPG_OIDC_CLIENT_ID)")
    return settings


def _base_url(request: web.Request, settings: OidcSettings) -> str:
    return settings.public_url or f"{request.scheme}://{request.host}"


def _secure(request: web.Request, settings: OidcSettings) -> bool:
    url = urlsplit(_base_url(request, settings))
    return url.scheme == "https" or (url.hostname or "") not in LOOPBACK


def _org_param(value: str | None) -> str:
    org = (value or "").strip()
    if not org or len(org) > 63 or not all(c.isascii() and (c.isalnum() or c == "-")
                                           for c in org) or org != org.lower():
        raise InvalidArgument("org must be an org's slug (lower-case letters, digits and -)")
    return org


# -- pages a browser lands on ------------------------------------------------------------

def _page(status: int, title: str, text: str) -> web.Response:
    body = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
            f"{html.escape(title)}</title></head><body><main id=\"sign-in-result\">"
            f"<h1>{html.escape(title)}</h1><p id=\"sign-in-message\">{html.escape(text)}</p>"
            f"<p><a href=\"/\">Back to cryopg</a></p></main></body></html>")
    resp = web.Response(status=status, text=body, content_type="text/html")
    resp.headers["Content-Security-Policy"] = "default-src 'none'; frame-ancestors 'none'"
    resp.headers["Cache-Control"] = "no-store"
    return resp


def _refusal_page(exc: CryoError) -> web.Response:
    if exc.code == "not_a_member":
        return _page(403, "Not a member",
                     f"{exc} Ask an admin of the org to add you, then sign in again.")
    return _page(exc.http_status if 400 <= exc.http_status < 500 else 400,
                 "Sign-in refused", str(exc))


# -- routes ------------------------------------------------------------------------------

async def auth_config(request: web.Request) -> web.Response:
    """What a client needs to sign in: the issuer and the client id (the CLI's)."""
    settings = request.app[CONFIG].oidc
    if settings is None:
        return web.json_response({"oidc": None})
    oidc: dict[str, str] = {"issuer": settings.issuer,
                            "client_id": settings.cli_client_id or settings.client_id,
                            "scopes": settings.scopes}
    if settings.cli_client_id and settings.cli_client_secret:
        oidc["client_secret"] = settings.cli_client_secret  # an installed app's, not secret
    return web.json_response({"oidc": oidc})


async def oidc_login(request: web.Request) -> web.Response:
    settings = _settings(request)
    org = _org_param(request.query.get("org"))
    issuer = request.app[ISSUER]
    meta = await issuer.metadata()
    login_id, state, nonce = (secrets.token_urlsafe(32) for _ in range(3))
    verifier = secrets.token_urlsafe(48)
    async with connection(request.app[POOL]) as conn:
        await engine.begin_oidc_login(conn, secret_hash(login_id), state, nonce, verifier, org,
                                      LOGIN_SECONDS)
    query = urlencode({
        "response_type": "code", "client_id": settings.client_id,
        "redirect_uri": _base_url(request, settings) + CALLBACK, "scope": settings.scopes,
        "state": state, "nonce": nonce, "code_challenge_method": "S256",
        "code_challenge": create_s256_code_challenge(verifier)})
    endpoint = meta["authorization_endpoint"]
    resp = web.HTTPFound(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}")
    # Lax: the issuer's redirect back is a top-level GET, which carries it.
    resp.set_cookie(LOGIN_COOKIE, login_id, max_age=LOGIN_SECONDS, path=f"{AUTH}/oidc",
                    httponly=True, secure=_secure(request, settings), samesite="Lax")
    resp.headers["Cache-Control"] = "no-store"
    raise resp


async def oidc_callback(request: web.Request) -> web.Response:
    settings = _settings(request)
    q = request.query
    if "error" in q:
        what = q.get("error_description") or q["error"]
        return _page(400, "Sign-in refused", f"The issuer answered: {what[:300]}")
    login_id, state, code = request.cookies.get(LOGIN_COOKIE), q.get("state"), q.get("code")
    if not login_id or not state or not code:
        return _page(400, "Sign-in refused",
                     "This sign-in was not started in this browser (or it expired); start "
                     "again from the sign-in page.")
    issuer = request.app[ISSUER]
    session = secrets.token_urlsafe(32)
    try:
        async with connection(request.app[POOL]) as conn:
            pending = await engine.take_oidc_login(conn, secret_hash(login_id), state)
        tokens = await issuer.redeem_code(code, pending.code_verifier,
                                          _base_url(request, settings) + CALLBACK)
        claims = await issuer.verify_id_token(tokens.id_token, nonce=pending.nonce)
        claims = await issuer.with_userinfo(claims, tokens.access_token)
        async with connection(request.app[POOL]) as conn, conn.transaction():
            await engine.spend_id_token(conn, _token_hash(tokens.id_token),
                                        _spent_until(claims))
            signed = await _sign_in(conn, settings, pending.org, claims, session, "web")
    except CryoError as exc:
        return _refusal_page(exc)
    resp = web.HTTPFound("/#/runs")
    secure = _secure(request, settings)
    resp.set_cookie(SESSION_COOKIES[0] if secure else SESSION_COOKIES[1], session,
                    max_age=max(60, int((signed.expires_at - dt.datetime.now(dt.UTC))
                                        .total_seconds())),
                    path="/", httponly=True, secure=secure, samesite="Lax")
    resp.del_cookie(LOGIN_COOKIE, path=f"{AUTH}/oidc")
    resp.headers["Cache-Control"] = "no-store"
    raise resp


async def _sign_in(conn: Any, settings: OidcSettings, org: str, claims: dict[str, Any],
                   session: str, kind: str) -> engine.SignedIn:
    # An email the issuer says it has not verified names nobody.
    email = claims.get("email")
    if not isinstance(email, str) or claims.get("email_verified") is False or len(email) > 320:
        email = None
    return await engine.oidc_sign_in(conn, org, settings.issuer, claims["sub"], email,
                                     _claims_for_roles(claims), secret_hash(session), kind,
                                     settings.session_hours * 3600)


def _claims_for_roles(claims: dict[str, Any]) -> dict[str, Any]:
    """What SQL may match the org's role map against: the claims that are a string or a
    list of strings (the token's own fields left out)."""
    out: dict[str, Any] = {}
    for name, value in claims.items():
        if name in {"iss", "aud", "exp", "iat", "nbf", "nonce", "at_hash", "c_hash", "azp",
                    "auth_time", "sid", "jti"} or len(name) > 128:
            continue
        if isinstance(value, str) and len(value) <= 256:
            out[name] = value
        elif isinstance(value, list):
            out[name] = [v for v in value[:500] if isinstance(v, str) and len(v) <= 256]
    return out


def _token_hash(id_token: str) -> bytes:
    return hashlib.sha256(id_token.encode()).digest()


def _spent_until(claims: dict[str, Any]) -> dt.datetime:
    """How long a traded ID token's hash is kept: until the token itself has expired."""
    return dt.datetime.fromtimestamp(float(claims["exp"]) + LEEWAY, dt.UTC)


async def cli_nonce(request: web.Request) -> web.Response:
    """`cryopg login`, before it goes to the issuer: the nonce its ID token must carry.
    Single use, for this org, for LOGIN_SECONDS; a browser sign-in's nonce never is one."""
    _settings(request)
    body = await json_body(request)
    org = _org_param(str_field(body, "org"))
    nonce = secrets.token_urlsafe(32)
    async with connection(request.app[POOL]) as conn:
        expires = await engine.begin_cli_sign_in(conn, _token_hash(nonce), org, LOGIN_SECONDS)
    return web.json_response({"nonce": nonce, "expires_at": iso(expires)},
                             headers={"Cache-Control": "no-store"})


async def cli_session(request: web.Request) -> web.Response:
    """`cryopg login`: an ID token the CLI got from the issuer, for a session. It must
    carry a nonce `oidc/cli/nonce` handed out (used up here), or, renewing, come with
    the CLI's session as the bearer (the same person at the same issuer; that session
    ends). Each ID token is traded once."""
    settings = _settings(request)
    body = await json_body(request)
    id_token = str_field(body, "id_token", MAX_ID_TOKEN)
    org = _org_param(str_field(body, "org"))
    nonce = optional_str_field(body, "nonce")
    access_token = optional_str_field(body, "access_token", MAX_ID_TOKEN)
    renewing = _bearer(request) if request.headers.get("Authorization") else None
    if nonce is None and renewing is None:
        raise SignInRefused("a CLI sign-in needs the nonce this server gave it "
                            "(POST /api/v1/auth/oidc/cli/nonce); update cryopg and sign in again")
    issuer = request.app[ISSUER]
    claims = await issuer.verify_id_token(id_token, nonce=nonce,
                                          max_age=MAX_TOKEN_AGE if nonce else None)
    claims = await issuer.with_userinfo(claims, access_token)
    session = "cryo_s_" + secrets.token_urlsafe(32)
    async with connection(request.app[POOL]) as conn, conn.transaction():
        await engine.spend_id_token(conn, _token_hash(id_token), _spent_until(claims),
                                    _token_hash(nonce) if nonce else None, org,
                                    None if nonce else renewing, settings.issuer,
                                    claims["sub"])
        signed = await _sign_in(conn, settings, org, claims, session, "cli")
    return web.json_response({"session": session, "expires_at": iso(signed.expires_at),
                              "org": org, "login": signed.member, "role": signed.role},
                             headers={"Cache-Control": "no-store"})


async def session_info(request: web.Request) -> web.Response:
    """Who the browser's session cookie signs in, and the value its page must send in
    X-Cryo-CSRF with anything that changes something. With `?optional=1` (the web UI's
    first look, which most often finds no cookie) no cookie is `{"signed_in": false}`,
    not a 401 the browser would log as an error on every token sign-in."""
    cookie = session_cookie(request)
    if cookie is None:
        if request.query.get("optional") == "1":
            return web.json_response({"signed_in": False}, headers={"Cache-Control": "no-store"})
        raise Unauthorized("not signed in")
    async with connection(request.app[POOL]) as conn:
        info = await engine.session_info(conn, secret_hash(cookie))
    return web.json_response({"org": info.org, "login": info.member, "role": info.role,
                              "expires_at": iso(info.expires_at), "csrf": csrf_of(cookie)},
                             headers={"Cache-Control": "no-store"})


async def logout(request: web.Request) -> web.Response:
    """Ends the caller's session (the cookie's, with its CSRF header, or a CLI's bearer)."""
    hashed = _bearer(request) if request.headers.get("Authorization") else (
        user_secret_hash(request))
    async with connection(request.app[POOL]) as conn:
        ended = await engine.end_session(conn, hashed)
    resp = web.json_response({"signed_out": ended})
    for name in SESSION_COOKIES:
        if name in request.cookies:  # a __Host- cookie is only replaced by a Secure one
            resp.del_cookie(name, path="/", secure=name.startswith("__Host-") or None)
    return resp


def add_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(issuer_ctx)
    app.router.add_get(f"{AUTH}/config", auth_config)
    app.router.add_get(f"{AUTH}/oidc/login", oidc_login)
    app.router.add_get(CALLBACK, oidc_callback)
    app.router.add_post(f"{AUTH}/oidc/cli/nonce", cli_nonce)
    app.router.add_post(f"{AUTH}/oidc/cli", cli_session)
    app.router.add_get(f"{AUTH}/session", session_info)
    app.router.add_post(f"{AUTH}/logout", logout)

