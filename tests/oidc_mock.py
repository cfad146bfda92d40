"""A real OpenID provider on loopback for the sign-in tests: oidc-provider-mock (PyPI) in
a thread, with one route added to rotate its signing key the way an issuer does."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import flask
import werkzeug.serving
from oidc_provider_mock import User
from oidc_provider_mock import app as provider_app

CLIENT = "cryopg-ui"
SECRET = "mock-secret"


@dataclass(frozen=True)
class Provider:
    issuer: str
    # The query of each authorization request the provider saw, oldest first.
    authorized: list[dict[str, str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """What a cryopg server is started with to sign people in here."""
        return {"CRYOPG_OIDC_ISSUER": self.issuer, "CRYOPG_OIDC_CLIENT_ID": CLIENT,
                "CRYOPG_OIDC_CLIENT_SECRET": SECRET,
                # the CLI's client, with an installed app's published secret (as Google's)
                "CRYOPG_OIDC_CLI_CLIENT_ID": "cryopg-cli",
                "CRYOPG_OIDC_CLI_CLIENT_SECRET": "installed-app"}

    def rotate(self) -> None:
        """A new signing key: later ID tokens are signed with it, and the JWKS holds it
        alone."""
        req = urllib.request.Request(f"{self.issuer}/test/rotate", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 204

    def authorize(self, address: str, sub: str) -> str:
        """What a person does at the provider's page: sign in as `sub`. Returns where the
        provider redirects the browser (the client's redirect URI, with code and state)."""

        class Keep(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any) -> None:
                return None

        opener = urllib.request.build_opener(Keep)
        req = urllib.request.Request(address, data=f"sub={sub}".encode(), method="POST")
        try:
            opener.open(req, timeout=10)
        except urllib.error.HTTPError as exc:
            if exc.code in (302, 303):
                return str(exc.headers["Location"])
            raise
        raise AssertionError("the provider did not redirect")


def _rotate() -> tuple[str, int]:
    storage = flask.g.oidc_provider_mock_storage
    storage.jwk = type(storage.jwk).generate_key(is_private=True)
    return "", 204


@contextmanager
def running_provider(users: list[User] | None = None, *,
                     consent_for_refresh: bool = False) -> Iterator[Provider]:
    """With `consent_for_refresh`, the provider behaves as many real ones do: it lists
    `offline_access`, and its token answer holds a refresh token only when the sign-in
    asked that scope with prompt=consent."""
    app = provider_app(require_nonce=True, user_claims=users or [])
    app.add_url_rule("/test/rotate", "rotate", _rotate, methods=["POST"])
    authorized: list[dict[str, str]] = []

    @app.before_request
    def _seen() -> None:
        if flask.request.path == "/oauth2/authorize" and flask.request.args:
            authorized.append(dict(flask.request.args))

    @app.after_request
    def _offline(resp: flask.Response) -> flask.Response:
        if not consent_for_refresh:
            return resp
        if flask.request.path == "/.well-known/openid-configuration":
            meta = resp.get_json()
            meta["scopes_supported"] = [*meta.get("scopes_supported", []), "offline_access"]
            resp.set_data(flask.json.dumps(meta))
        elif flask.request.path == "/oauth2/token" and resp.status_code == 200:
            asked = authorized[-1] if authorized else {}
            body = resp.get_json()
            if flask.request.form.get("grant_type") == "authorization_code" and not (
                    asked.get("prompt") == "consent"
                    and "offline_access" in asked.get("scope", "").split()):
                body.pop("refresh_token", None)
            resp.set_data(flask.json.dumps(body))
        return resp

    server = werkzeug.serving.make_server("localhost", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    try:
        yield Provider(f"http://localhost:{server.server_port}", authorized)
    finally:
        server.shutdown()
        thread.join(5)
        server.server_close()
