"""A small OpenID issuer on loopback whose ID tokens the test mints with joserfc: a
discovery document, a JWKS that can rotate, and a token endpoint that answers a code
with whichever ID token the test set, after checking the PKCE verifier. It lets a test
hand the server tokens that are wrong in exactly one way."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aiohttp import web
from aiohttp.test_utils import TestServer
from joserfc import jwt
from joserfc.jwk import RSAKey

CLIENT = "cryopg-web"
SECRET = "s3cret"


class TestIssuer:
    __test__ = False  # not a pytest class

    def __init__(self) -> None:
        self.url = ""
        self.key = self._new_key()
        self.published: list[RSAKey] = [self.key]
        self.challenge: str | None = None  # from the authorize redirect, for PKCE
        self.next_claims: dict[str, Any] = {}
        self.next_token: str | None = None  # overrides the minted one
        self.jwks_reads = 0
        # What /userinfo answers the access token "at" with (None: no such endpoint).
        self.userinfo: dict[str, Any] | None = None
        self.userinfo_reads = 0
        self.extra_meta: dict[str, Any] = {}  # added to (or replacing) the discovery's

    @staticmethod
    def _new_key() -> RSAKey:
        return RSAKey.generate_key(2048, parameters={"use": "sig"}, auto_kid=True)

    def rotate(self, *, keep_old: bool = False) -> None:
        self.key = self._new_key()
        self.published = [self.key, *(self.published if keep_old else [])]

    def mint(self, key: RSAKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": CLIENT, "sub": "sub-alice", "iat": now,
                "exp": now + 300, "email": "alice@example.com", "email_verified": True,
                **claims}
        body = {k: v for k, v in body.items() if v is not None}
        signer = key or self.key
        return jwt.encode({"alg": "RS256", "kid": signer.kid}, body, signer)

    # -- the issuer's endpoints ---------------------------------------------------------

    async def discovery(self, request: web.Request) -> web.Response:
        return web.json_response({
            "issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token", "jwks_uri": f"{self.url}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"],
            **({"userinfo_endpoint": f"{self.url}/userinfo"} if self.userinfo is not None
               else {}), **self.extra_meta})

    async def userinfo_answer(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer at" or self.userinfo is None:
            return web.json_response({"error": "invalid_token"}, status=401)
        self.userinfo_reads += 1
        return web.json_response(self.userinfo)

    async def jwks(self, request: web.Request) -> web.Response:
        self.jwks_reads += 1
        return web.json_response({"keys": [k.as_dict(private=False) for k in self.published]})

    async def token(self, request: web.Request) -> web.Response:
        form = await request.post()
        expected = "Basic " + base64.b64encode(f"{CLIENT}:{SECRET}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.json_response({"error": "invalid_client"}, status=401)
        verifier = str(form.get("code_verifier", ""))
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if self.challenge is None or digest.decode().rstrip("=") != self.challenge:
            return web.json_response({"error": "invalid_grant"}, status=400)
        token = self.next_token or self.mint(**self.next_claims)
        return web.json_response({"access_token": "at", "token_type": "Bearer",
                                  "id_token": token})

    def saw_authorize(self, location: str) -> dict[str, str]:
        """The query of the server's redirect to /authorize (state, nonce, challenge)."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        self.challenge = query["code_challenge"]
        return query


@asynccontextmanager
async def running_issuer() -> AsyncIterator[TestIssuer]:
    issuer = TestIssuer()
    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", issuer.discovery)
    app.router.add_get("/jwks", issuer.jwks)
    app.router.add_post("/token", issuer.token)
    app.router.add_get("/userinfo", issuer.userinfo_answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    issuer.url = str(server.make_url("")).rstrip("/")
    try:
        yield issuer
    finally:
        await server.close()
