"""The OpenID Connect issuer as the server sees it: settings, discovery, keys, tokens.

The discovery document and the issuer's JWKS are fetched once and cached; an ID token
signed by a key the cache does not hold (the issuer rotated its keys) makes one fresh
fetch of the JWKS before it is refused, at most once per `refresh_floor` seconds so a
flood of forged tokens cannot make the server hammer the issuer. ID tokens are checked
with joserfc: an asymmetric algorithm the issuer announces, the signature, `iss`,
`aud` (one of our client ids), `azp` when there are several audiences, `exp`, `iat`,
`sub`, and `nonce` when the sign-in sent one. The issuer and every endpoint it names are
https, or http on loopback only. Claims a member match reads (email, groups) that the ID
token lacks are read from the userinfo endpoint with the access token, for the same
`sub`.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import ipaddress
import json
import os
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_plus, urlsplit

import aiohttp
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import extract_compact

from cryopg.errors import SignInRefused

# Never "none" and never an HMAC (its key would be our client secret, which a
# confidential client shares with the issuer alone, but a public one does not have).
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
CACHE_SECONDS = 3600.0
LEEWAY = 60  # seconds of clock skew allowed on exp/iat/nbf
MAX_TOKEN_AGE = 600  # an ID token older than this (by iat) is not a fresh sign-in
# What a member match reads; an ID token without them sends us to the userinfo endpoint.
USERINFO_CLAIMS = ("email", "groups")
# Claims only an ID token may set (a userinfo answer naming them is not believed).
ID_TOKEN_ONLY = {"iss", "aud", "exp", "iat", "nbf", "nonce", "azp", "auth_time", "at_hash",
                 "c_hash", "sid", "jti"}


@dataclasses.dataclass(frozen=True)
class OidcSettings:
    issuer: str
    client_id: str
    client_secret: str | None = None
    cli_client_id: str | None = None  # a public client for `cryopg login`, if not client_id
    # Some issuers (Google's "Desktop app" clients) want a secret even from an installed
    # app, where it cannot stay secret; it is handed to every CLI that asks.
    cli_client_secret: str | None = None
    scopes: str = "openid email profile"
    public_url: str | None = None  # how browsers reach this server (the redirect URI's base)
    session_hours: float = 12.0

    @property
    def audiences(self) -> list[str]:
        return [self.client_id] + ([self.cli_client_id] if self.cli_client_id else [])

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OidcSettings | None:
        """CRYOPG_OIDC_ISSUER and CRYOPG_OIDC_CLIENT_ID turn sign-in on; None when unset."""
        env = os.environ if env is None else env
        issuer, client = env.get("CRYOPG_OIDC_ISSUER", ""), env.get("CRYOPG_OIDC_CLIENT_ID", "")
        if not issuer and not client:
            return None
        if not issuer or not client:
            raise ValueError("CRYOPG_OIDC_ISSUER and CRYOPG_OIDC_CLIENT_ID go together")
        hours = env.get("CRYOPG_SESSION_HOURS", "12")
        try:
            session_hours = float(hours)
        except ValueError:
            raise ValueError(f"CRYOPG_SESSION_HOURS must be a number, not {hours!r}") from None
        if not 0.02 <= session_hours <= 24 * 90:
            raise ValueError("CRYOPG_SESSION_HOURS must be between 0.02 and 2160")
        secure_url(issuer, "CRYOPG_OIDC_ISSUER", ValueError)
        return cls(issuer=issuer.rstrip("/"), client_id=client,
                   client_secret=env.get("CRYOPG_OIDC_CLIENT_SECRET") or None,
                   cli_client_id=env.get("CRYOPG_OIDC_CLI_CLIENT_ID") or None,
                   cli_client_secret=env.get("CRYOPG_OIDC_CLI_CLIENT_SECRET") or None,
                   scopes=env.get("CRYOPG_OIDC_SCOPES") or cls.scopes,
                   public_url=(env.get("CRYOPG_PUBLIC_URL") or "").rstrip("/") or None,
                   session_hours=session_hours)


LOOPBACK_NAMES = {"localhost"}


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: the only hosts an issuer may be reached over http."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_url(url: str, what: str, error: type[Exception] = SignInRefused) -> str:
    """`url` when it is https, or http to a loopback host; else `error`. An issuer reached
    over plain http off this machine could be impersonated on the path, keys and all."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return url
    raise error(f"{what} must be an https:// address (http:// only for 127.0.0.1, ::1 or "
                f"localhost), not {url!r}")


@dataclasses.dataclass(frozen=True)
class IssuerTokens:
    """What the issuer's token endpoint answers a code with."""

    id_token: str
    access_token: str | None


class Issuer:
    """One issuer's discovery document and keys, fetched over `http` and cached."""

    def __init__(self, settings: OidcSettings, http: aiohttp.ClientSession) -> None:
        self.settings, self.http = settings, http
        self.refresh_floor = 10.0
        self._meta: tuple[float, dict[str, Any]] | None = None
        self._keys: tuple[float, KeySet] | None = None

    async def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                if resp.status != 200:
                    raise SignInRefused(f"the issuer's {what} answered HTTP {resp.status}")
                body = json.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SignInRefused(f"cannot read the issuer's {what}: {exc}") from None
        if not isinstance(body, dict):
            raise SignInRefused(f"the issuer's {what} is not a JSON object")
        return body

    async def metadata(self) -> dict[str, Any]:
        secure_url(self.settings.issuer, "the OIDC issuer")
        now = time.monotonic()
        if self._meta is None or now - self._meta[0] > CACHE_SECONDS:
            url = self.settings.issuer + "/.well-known/openid-configuration"
            meta = await self._get_json(url, "discovery document")
            if meta.get("issuer", "").rstrip("/") != self.settings.issuer:
                raise SignInRefused(f"the discovery document names issuer {meta.get('issuer')!r},"
                                    f" not {self.settings.issuer!r}")
            for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(meta.get(field), str):
                    raise SignInRefused(f"the discovery document has no {field}")
                secure_url(meta[field], f"the issuer's {field}")
            if meta.get("userinfo_endpoint") is not None:
                if not isinstance(meta["userinfo_endpoint"], str):
                    raise SignInRefused("the discovery document's userinfo_endpoint is not a URL")
                secure_url(meta["userinfo_endpoint"], "the issuer's userinfo_endpoint")
            self._meta = (now, meta)
        return self._meta[1]

    async def keys(self, *, fresh: bool = False) -> KeySet:
        now = time.monotonic()
        stale = self._keys is None or now - self._keys[0] > CACHE_SECONDS
        if stale or (fresh and now - self._keys[0] >= self.refresh_floor):  # type: ignore[index]
            body = await self._get_json((await self.metadata())["jwks_uri"], "JWKS")
            try:
                usable = [k for k in body.get("keys", [])
                          if isinstance(k, dict) and k.get("use", "sig") == "sig"]
                self._keys = (now, KeySet.import_key_set({"keys": usable}))
            except (JoseError, ValueError, TypeError) as exc:
                raise SignInRefused(f"the issuer's JWKS does not read: {exc}") from None
        return self._keys[1]  # type: ignore[index]

    async def verify_id_token(self, id_token: str, *, nonce: str | None,
                              max_age: float | None = MAX_TOKEN_AGE) -> dict[str, Any]:
        """The claims of a valid ID token for one of our clients, else SignInRefused.
        With a nonce, the token must carry exactly that one."""
        meta = await self.metadata()
        try:
            header = extract_compact(id_token.encode()).headers()
        except (JoseError, ValueError, UnicodeError):
            raise SignInRefused("the ID token is not a compact JWS") from None
        alg = header.get("alg")
        offered = meta.get("id_token_signing_alg_values_supported") or ["RS256"]
        if alg not in ASYMMETRIC or alg not in offered:
            raise SignInRefused(f"the ID token's algorithm {alg!r} is not accepted")
        token = await self._decode(id_token, alg, header.get("kid"))
        claims = token.claims
        s = self.settings
        registry = jwt.JWTClaimsRegistry(
            leeway=LEEWAY, iss={"essential": True, "value": s.issuer},
            aud={"essential": True, "values": s.audiences},
            sub={"essential": True}, exp={"essential": True}, iat={"essential": True})
        try:
            registry.validate(claims)
        except JoseError as exc:
            raise SignInRefused(f"the ID token does not hold: {exc.description or exc.error}"
                                ) from None
        aud = claims["aud"]
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") not in s.audiences:
            raise SignInRefused("the ID token has several audiences and no azp of ours")
        if nonce is not None and (not isinstance(claims.get("nonce"), str)
                                  or not hmac.compare_digest(claims["nonce"], nonce)):
            raise SignInRefused("the ID token's nonce is not the one this sign-in sent")
        if not isinstance(claims["exp"], (int, float)):
            raise SignInRefused("the ID token's exp is not a time")
        if max_age is not None and not isinstance(claims["iat"], (int, float)):
            raise SignInRefused("the ID token's iat is not a time")
        if max_age is not None and claims["iat"] < time.time() - max_age - LEEWAY:
            raise SignInRefused("the ID token was issued too long ago")
        if not isinstance(claims["sub"], str):
            raise SignInRefused("the ID token's sub is not a string")
        return claims

    async def _decode(self, id_token: str, alg: str, kid: str | None) -> jwt.Token:
        keys = await self.keys()
        if kid is not None and kid not in {k.kid for k in keys.keys}:
            keys = await self.keys(fresh=True)  # a key we never saw: the issuer rotated
        for attempt in (0, 1):
            try:
                return self._decode_with(id_token, alg, kid, keys)
            except (BadSignatureError, InvalidKeyIdError):
                if attempt == 0:
                    keys = await self.keys(fresh=True)  # rotated under a kid we still hold?
                    continue
            except (JoseError, ValueError) as exc:
                raise SignInRefused(f"the ID token does not read: {exc}") from None
        raise SignInRefused("the ID token's signature does not verify with the issuer's keys")

    @staticmethod
    def _decode_with(id_token: str, alg: str, kid: str | None, keys: KeySet) -> jwt.Token:
        if kid is not None:
            return jwt.decode(id_token, keys, algorithms=[alg])
        # No kid to choose by: the one key of the issuer's set that verifies it.
        for key in keys.keys:
            try:
                return jwt.decode(id_token, key, algorithms=[alg])
            except JoseError:
                continue
        raise BadSignatureError()

    async def redeem_code(self, code: str, code_verifier: str, redirect_uri: str
                          ) -> IssuerTokens:
        """The ID token (and access token) the token endpoint gives for a code."""
        meta = await self.metadata()
        s = self.settings
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri, "code_verifier": code_verifier}
        headers = {"Accept": "application/json"}
        if s.client_secret:
            # client_secret_basic: each half form-encoded first (RFC 6749 2.3.1).
            pair = f"{quote_plus(s.client_id)}:{quote_plus(s.client_secret)}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        else:
            form["client_id"] = s.client_id
        try:
            async with self.http.post(meta["token_endpoint"], data=form, headers=headers,
                                      timeout=aiohttp.ClientTimeout(total=10)) as resp:
                raw = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SignInRefused(f"cannot reach the issuer's token endpoint: {exc}") from None
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if status != 200 or not isinstance(body, dict):
            err = body.get("error", f"HTTP {status}") if isinstance(body, dict) else status
            raise SignInRefused(f"the issuer refused the code ({err})")
        id_token = body.get("id_token")
        if not isinstance(id_token, str):
            raise SignInRefused("the issuer's answer has no ID token (is 'openid' in the scopes?)")
        access = body.get("access_token")
        return IssuerTokens(id_token, access if isinstance(access, str) and access else None)

    async def with_userinfo(self, claims: dict[str, Any], access_token: str | None
                            ) -> dict[str, Any]:
        """The ID token's claims, completed from the userinfo endpoint when they lack
        what a member match reads (email, groups): a provider in its default settings
        puts those there alone. The ID token's own claims win; the userinfo answer must
        name the same `sub` (OIDC Core 5.3.2), or it is refused."""
        if all(name in claims for name in USERINFO_CLAIMS) or not access_token:
            return claims
        endpoint = (await self.metadata()).get("userinfo_endpoint")
        if not endpoint:
            return claims
        headers = {"Authorization": f"Bearer {access_token}", "Accept": "application/json"}
        try:
            async with self.http.get(endpoint, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=10)) as resp:
                status, raw = resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SignInRefused(f"cannot reach the issuer's userinfo endpoint: {exc}") from None
        if status != 200:
            raise SignInRefused(f"the issuer's userinfo endpoint answered HTTP {status}")
        try:
            info = json.loads(raw)
        except ValueError:
            # A signed or encrypted userinfo answer (a JWT) is not read: the ID token's
            # claims stand alone.
            return claims
        if not isinstance(info, dict):
            raise SignInRefused("the issuer's userinfo answer is not a JSON object")
        if info.get("sub") != claims["sub"]:
            raise SignInRefused("the issuer's userinfo answer is about another subject")
        return {**{k: v for k, v in info.items() if k not in ID_TOKEN_ONLY}, **claims}
