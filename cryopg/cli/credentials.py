"""The CLI's stored sign-in (`cryopg login`): one entry per server, in a file only its
user can read (0600, in a 0700 directory under $XDG_CONFIG_HOME/cryopg, or
$CRYOPG_CONFIG_DIR).

An entry holds the cryopg session (a bearer secret that expires) and the issuer's
refresh token: a session near its end is renewed by getting a fresh ID token from the
issuer with the refresh token and trading it at the server again. Stdlib only, like
the rest of what a CLI command imports.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import click

FILE = "credentials.json"
RENEW_BEFORE = 120.0  # seconds: a session this close to its end is renewed first


def config_dir() -> Path:
    if os.environ.get("CRYOPG_CONFIG_DIR"):
        return Path(os.environ["CRYOPG_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "cryopg"


def path() -> Path:
    return config_dir() / FILE


def load() -> dict[str, Any]:
    p = path()
    try:
        raw = p.read_text()
    except FileNotFoundError:
        return {"current": None, "servers": {}}
    except OSError as exc:
        raise click.ClickException(f"cannot read {p}: {exc}") from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
            raise ValueError("not a credentials file")
    except ValueError as exc:
        raise click.ClickException(f"{p} is not a valid credentials file ({exc}); delete it "
                                   "and run `cryopg login` again") from None
    return data


def save(data: dict[str, Any]) -> None:
    """Written whole to a private temporary file and renamed over the old one, so the
    file is never readable by others, even for a moment, nor ever half written."""
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".credentials.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, folder / FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remember(entry: dict[str, Any]) -> None:
    data = load()
    data["servers"][entry["url"]] = entry
    data["current"] = entry["url"]
    save(data)


def forget(url: str) -> dict[str, Any] | None:
    data = load()
    entry = data["servers"].pop(url, None)
    if data.get("current") == url:
        data["current"] = next(iter(data["servers"]), None)
    save(data)
    return entry


def entry_for(url: str | None) -> dict[str, Any] | None:
    """The usable entry for `url` (None: the last server signed in to), renewed first
    when its session is about to end; None when there is none."""
    data = load()
    key = (url or "").rstrip("/") or data.get("current")
    entry = data["servers"].get(key) if key else None
    if entry is None:
        return None
    if _seconds_left(entry) < RENEW_BEFORE:
        entry = renew(entry)
        data["servers"][key] = entry
        save(data)
    return entry


def _seconds_left(entry: dict[str, Any]) -> float:
    try:
        ends = dt.datetime.fromisoformat(entry["expires_at"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return (ends - dt.datetime.now(dt.UTC)).total_seconds()


def post_form(url: str, form: dict[str, str], what: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(),
                                 headers={"Accept": "application/json",
                                          "Content-Type": "application/x-www-form-urlencoded"})
    return _json_answer(req, what)


def post_json(url: str, body: Any, what: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers,
                                 method="POST")
    return _json_answer(req, what)


def get_json(url: str, what: str) -> Any:
    status, body = _json_answer(urllib.request.Request(url, headers={
        "Accept": "application/json"}), what)
    if status != 200:
        raise click.ClickException(f"{what} answered HTTP {status}")
    return body


def _json_answer(req: urllib.request.Request, what: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"cannot reach {what}: {getattr(exc, 'reason', exc)}"
                                   ) from None
    try:
        return status, json.loads(raw) if raw else {}
    except ValueError:
        return status, {}


def cli_nonce(url: str, org: str) -> str:
    """The single-use nonce the server wants the CLI sign-in's ID token to carry."""
    status, got = post_json(f"{url}/api/v1/auth/oidc/cli/nonce", {"org": org},
                            f"the cryopg server at {url}")
    if status != 200 or not isinstance(got, dict) or not isinstance(got.get("nonce"), str):
        err = got.get("error", {}) if isinstance(got, dict) else {}
        raise click.ClickException(err.get("message") or f"the server answered HTTP {status}")
    return got["nonce"]


def trade_id_token(url: str, tokens: dict[str, Any], org: str, nonce: str | None,
                   renewing: str | None = None) -> dict[str, Any]:
    """The cryopg session the server gives for the issuer's tokens: the ID token with
    the nonce the server gave, or (renewing) with the session it replaces; the access
    token lets the server read claims the ID token lacks from the userinfo endpoint."""
    body: dict[str, Any] = {"id_token": tokens["id_token"], "org": org}
    if nonce:
        body["nonce"] = nonce
    if isinstance(tokens.get("access_token"), str):
        body["access_token"] = tokens["access_token"]
    status, got = post_json(f"{url}/api/v1/auth/oidc/cli", body, f"the cryopg server at {url}",
                            token=renewing)
    if status != 200 or not isinstance(got, dict) or "session" not in got:
        err = got.get("error", {}) if isinstance(got, dict) else {}
        raise click.ClickException(err.get("message") or f"the server answered HTTP {status}")
    return got


def renew(entry: dict[str, Any]) -> dict[str, Any]:
    url = entry["url"]
    again = f"run `cryopg login --url {url}` again"
    if not entry.get("refresh_token"):
        raise click.ClickException(f"your sign-in to {url} has expired; {again}")
    form = {"grant_type": "refresh_token", "refresh_token": entry["refresh_token"],
            "client_id": entry["client_id"]}
    if entry.get("client_secret"):
        form["client_secret"] = entry["client_secret"]
    status, tokens = post_form(entry["token_endpoint"], form, "the issuer's token endpoint")
    if status != 200 or not isinstance(tokens.get("id_token"), str):
        why = tokens.get("error") or f"HTTP {status}"
        if status == 200:
            why = "the issuer gives no ID token on refresh"
        raise click.ClickException(f"your sign-in to {url} has expired and could not be "
                                   f"renewed ({why}); {again}")
    got = trade_id_token(url, tokens, entry["org"], None, renewing=entry["session"])
    return {**entry, "session": got["session"], "expires_at": got["expires_at"],
            "login": got["login"], "role": got["role"],
            "refresh_token": tokens.get("refresh_token") or entry["refresh_token"]}
