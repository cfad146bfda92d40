"""`cryopg login --url U` and `cryopg logout`: a person signs the CLI in through the
server's OIDC issuer.

The server says which issuer and client id (GET /api/v1/auth/config). Where the issuer
offers the device authorization grant, the CLI shows a code to enter in any browser;
otherwise (or with --loopback) it listens on 127.0.0.1 for the issuer's redirect, with
PKCE, a state and a nonce. The nonce is the server's (single use, for this org), so the
ID token is good for this sign-in alone. Where the issuer lists `offline_access`, the
loopback sign-in asks it with `prompt=consent` (most issuers grant a refresh token only
so). The ID token it gets is traded at the server for a cryopg session, stored with the
refresh token by credentials.py.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
import urllib.parse
import webbrowser
from base64 import urlsafe_b64encode
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import click

from cryopg.cli import credentials
from cryopg.cli.target import refuse_inside_run

LOOPBACK_WAIT = 300.0  # seconds to finish signing in at the issuer
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class Refused(click.ClickException):
    """A refusal (no issuer on that server, a sign-in that does not hold): exit 2."""

    exit_code = 2


def _issuer_config(url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    got = credentials.get_json(f"{url}/api/v1/auth/config", f"the cryopg server at {url}")
    oidc = got.get("oidc") if isinstance(got, dict) else None
    if not isinstance(oidc, dict):
        raise Refused(f"the server at {url} has no OIDC issuer configured (its admin sets "
                      "CRYOPG_OIDC_ISSUER); use an API token (CRYOPG_TOKEN) instead")
    issuer = str(oidc["issuer"]).rstrip("/")
    host = urllib.parse.urlsplit(issuer).hostname or ""
    if not issuer.startswith("https://") and not (
            issuer.startswith("http://") and (host in ("localhost", "::1")
                                              or host.startswith("127."))):
        raise Refused(f"the server's issuer {issuer!r} is not https:// (http:// is only for "
                      "an issuer on this machine)")
    meta = credentials.get_json(f"{issuer}/.well-known/openid-configuration",
                                f"the issuer {issuer}")
    if str(meta.get("issuer", "")).rstrip("/") != issuer:
        raise Refused(f"the issuer's discovery document names {meta.get('issuer')!r}, "
                      f"not {issuer!r}")
    return oidc, meta


def _client(oidc: dict[str, Any], form: dict[str, str]) -> dict[str, str]:
    """A public client's form: its id, and the installed-app secret where the server
    hands one out (client_secret_post)."""
    out = {**form, "client_id": oidc["client_id"]}
    if oidc.get("client_secret"):
        out["client_secret"] = oidc["client_secret"]
    return out


def _tokens(status: int, body: dict[str, Any]) -> dict[str, Any]:
    if status != 200 or not isinstance(body.get("id_token"), str):
        why = body.get("error_description") or body.get("error") or f"HTTP {status}"
        raise Refused(f"the issuer gave no ID token ({why})")
    return body


def _scopes(oidc: dict[str, Any], meta: dict[str, Any]) -> tuple[str, bool]:
    """The scopes to ask, and whether `offline_access` (a refresh token) is among them:
    asked when the issuer lists it (most grant it only with prompt=consent)."""
    scopes = str(oidc["scopes"]).split()
    offline = "offline_access" in (meta.get("scopes_supported") or [])
    if offline and "offline_access" not in scopes:
        scopes.append("offline_access")
    return " ".join(scopes), offline


def _device_flow(oidc: dict[str, Any], meta: dict[str, Any], nonce: str) -> dict[str, Any]:
    # The nonce rides along; an issuer that does not echo it in the ID token gets the
    # trade refused, and `--loopback` (where the nonce is standard) is the way.
    status, start = credentials.post_form(meta["device_authorization_endpoint"], _client(oidc, {
        "scope": _scopes(oidc, meta)[0], "nonce": nonce}), "the issuer's device endpoint")
    if status != 200 or "device_code" not in start:
        raise Refused(f"the issuer refused the device sign-in ({start.get('error', status)})")
    where = start.get("verification_uri_complete") or start.get("verification_uri")
    click.echo(f"To sign in, open {where} and enter the code {start.get('user_code')}",
               err=True)
    interval = float(start.get("interval") or 5)
    deadline = time.monotonic() + float(start.get("expires_in") or 600)
    while time.monotonic() < deadline:
        time.sleep(interval)
        status, got = credentials.post_form(meta["token_endpoint"], _client(oidc, {
            "grant_type": DEVICE_GRANT, "device_code": start["device_code"]}),
            "the issuer's token endpoint")
        if status == 200:
            return _tokens(status, got)
        error = got.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5
            continue
        raise Refused(f"the device sign-in ended: {error or f'HTTP {status}'}")
    raise Refused("the device sign-in was not finished in time")


class _Callback(BaseHTTPRequestHandler):
    got: dict[str, str] | None = None

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.path != "/callback":
            self.send_error(404)
            return
        type(self).got = dict(urllib.parse.parse_qsl(parsed.query))
        page = b"<!doctype html><title>cryopg</title><p>Signed in; you may close this tab.</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass


def _loopback_flow(oidc: dict[str, Any], meta: dict[str, Any], nonce: str,
                   open_browser: bool) -> dict[str, Any]:
    handler = type("Callback", (_Callback,), {"got": None})
    server = HTTPServer(("127.0.0.1", 0), handler)
    redirect = f"http://127.0.0.1:{server.server_port}/callback"
    state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
    challenge = urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    scope, offline = _scopes(oidc, meta)
    params = {
        "response_type": "code", "client_id": oidc["client_id"], "redirect_uri": redirect,
        "scope": scope, "state": state, "nonce": nonce,
        "code_challenge": challenge, "code_challenge_method": "S256"}
    if offline:  # without consent asked, most issuers leave offline_access out
        params["prompt"] = "consent"
    query = urllib.parse.urlencode(params)
    endpoint = meta["authorization_endpoint"]
    address = f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
    click.echo(f"To sign in, open this address in a browser:\n{address}", err=True)
    if open_browser:
        threading.Thread(target=webbrowser.open, args=(address,), daemon=True).start()
    server.timeout = 0.5
    deadline = time.monotonic() + LOOPBACK_WAIT
    try:
        while handler.got is None and time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    got = handler.got
    if got is None:
        raise Refused("the sign-in was not finished in time")
    if "error" in got:
        raise Refused(f"the issuer refused: {got.get('error_description') or got['error']}")
    if not hmac.compare_digest(got.get("state", "").encode(), state.encode()):
        raise Refused("the issuer's answer carries another state: not this sign-in")
    status, tokens = credentials.post_form(meta["token_endpoint"], _client(oidc, {
        "grant_type": "authorization_code", "code": got.get("code", ""),
        "redirect_uri": redirect, "code_verifier": verifier}), "the issuer's token endpoint")
    return _tokens(status, tokens)


@click.command("login")
@click.option("--url", required=True, metavar="URL", help="The cryopg server.")
@click.option("--org", envvar="CRYOPG_ORG", default="dev", show_default=True,
              help="The org to sign in to [env CRYOPG_ORG].")
@click.option("--project", envvar="CRYOPG_PROJECT", default="default", show_default=True,
              help="The project commands act on [env CRYOPG_PROJECT].")
@click.option("--loopback", is_flag=True,
              help="Sign in through a browser redirect to 127.0.0.1 even where the issuer "
                   "offers a device code.")
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
def login(url: str, org: str, project: str, loopback: bool, no_browser: bool) -> None:
    """Sign the CLI in to the server at URL through its OIDC issuer."""
    refuse_inside_run()
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise Refused(f"--url must be an http:// or https:// address, not {url!r}")
    oidc, meta = _issuer_config(url)
    try:
        nonce = credentials.cli_nonce(url, org)
    except click.ClickException as exc:
        raise Refused(exc.message) from None
    if meta.get("device_authorization_endpoint") and not loopback:
        tokens = _device_flow(oidc, meta, nonce)
    else:
        tokens = _loopback_flow(oidc, meta, nonce, not no_browser)
    try:
        got = credentials.trade_id_token(url, tokens, org, nonce)
    except click.ClickException as exc:
        raise Refused(exc.message) from None
    credentials.remember({
        "url": url, "org": org, "project": project, "login": got["login"],
        "role": got["role"], "session": got["session"], "expires_at": got["expires_at"],
        "issuer": oidc["issuer"], "client_id": oidc["client_id"],
        "client_secret": oidc.get("client_secret"),
        "token_endpoint": meta["token_endpoint"],
        "refresh_token": tokens.get("refresh_token")})
    click.echo(f"signed in to {url} as {got['login']} ({got['role']}) in {org}/{project}")


@click.command("logout")
@click.option("--url", metavar="URL", help="The server (default: the last one signed in to).")
def logout(url: str | None) -> None:
    """End the CLI's sign-in (at the server too) and forget it."""
    data = credentials.load()
    key = (url or "").rstrip("/") or data.get("current")
    if not key or key not in data["servers"]:
        raise Refused(f"not signed in to {key}" if key else "not signed in anywhere")
    entry = credentials.forget(key)
    assert entry is not None
    try:
        status, _ = credentials.post_json(f"{key}/api/v1/auth/logout", {},
                                          f"the cryopg server at {key}", token=entry["session"])
        why = f"the server answered HTTP {status}"
    except click.ClickException as exc:
        status, why = 0, exc.message
    ended = "" if status == 200 else f" ({why}; the session ends when it expires)"
    click.echo(f"signed out of {key}{ended}")


COMMANDS = [login, logout]
