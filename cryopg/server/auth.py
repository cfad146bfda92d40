"""Bearer tokens: users and agents are separate kinds, stored as a hash of the secret.

A user route names the role it needs; cryo.authorize_user checks the token, that the
org and project of the path are the token's own (else 404, never a 403 that would
confirm another tenant's project exists) and the member's role (else 403).

A person signed in through the OIDC issuer holds a session instead (cryo.sessions): the
CLI presents its secret as a bearer token, the web UI's browser as a cookie. A browser
sends a cookie with requests other sites' pages make, so a cookie alone authorizes only
safe methods; anything else also needs the X-Cryo-CSRF header, whose value is derived
from the session's secret and handed to the page itself (GET /api/v1/auth/session). A
page of another origin can neither read it nor, without a CORS preflight this server
never grants, send a custom header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
import uuid
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import TokenInfo, UserAuth
from cryopg.errors import CsrfRefused, InvalidArgument, NotFound, Unauthorized
from cryopg.run_ids import run_tenant
from cryopg.server.app_state import POOL
from cryopg.server.bodies import claim_token

VIEWER, MEMBER, ADMIN, OWNER = "viewer", "member", "admin", "owner"


def new_secret(kind: str) -> str:
    return f"cryo_{kind[0]}_{secrets.token_urlsafe(24)}"


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _bearer(request: web.Request) -> bytes:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        raise Unauthorized("missing bearer token")
    return secret_hash(header[7:].strip())


# The session cookie: `__Host-` (Secure, Path=/, no Domain: no other host can set it)
# wherever the browser reaches the server over HTTPS or not on loopback.
SESSION_COOKIES = ("__Host-cryo_session", "cryo_session")
CSRF_HEADER = "X-Cryo-CSRF"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def session_cookie(request: web.Request) -> str | None:
    for name in SESSION_COOKIES:
        value = request.cookies.get(name)
        if value:
            return value
    return None


def csrf_of(session_secret: str) -> str:
    """The anti-forgery value of a session: only who holds the cookie's value has it."""
    digest = hashlib.sha256(b"cryopg-csrf\0" + session_secret.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def user_secret_hash(request: web.Request) -> bytes:
    """The hash of the caller's user credential: a bearer token (a user token or a CLI
    session), else the web session cookie, which for an unsafe method must come with
    its X-Cryo-CSRF header."""
    if request.headers.get("Authorization"):
        return _bearer(request)
    cookie = session_cookie(request)
    if cookie is None:
        raise Unauthorized("missing bearer token or session")
    if request.method not in SAFE_METHODS:
        sent = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(sent.encode(), csrf_of(cookie).encode()):
            raise CsrfRefused(f"a request made with the session cookie needs its {CSRF_HEADER}"
                              " header (the web UI sends it)")
    return secret_hash(cookie)


async def require_user(request: web.Request, need: str = VIEWER, *,
                       project: bool = True) -> UserAuth:
    """A user token or session of the path's org (and project, unless an org-level
    route) whose member holds at least `need`."""
    hashed = user_secret_hash(request)
    org = request.match_info["org"]
    proj = request.match_info.get("project") if project else None
    async with connection(request.app[POOL]) as conn:
        return await engine.authorize_user(conn, hashed, org, proj, need)


# An agent calls several times a second while a job runs (each log flush), so its
# token's check is remembered briefly; a revoked agent token stops working within this.
AGENT_TOKEN_TTL = 2.0
AGENT_TOKENS = web.AppKey("agent_tokens", dict)


async def require_agent(request: web.Request) -> TokenInfo:
    hashed = _bearer(request)
    cache: dict[bytes, tuple[float, TokenInfo]] = request.app[AGENT_TOKENS]
    now = time.monotonic()
    hit = cache.get(hashed)
    if hit is not None and hit[0] > now:
        return hit[1]
    async with connection(request.app[POOL]) as conn:
        info = await engine.authenticate_token(conn, hashed)
    if info.kind != "agent":
        raise Unauthorized("this route needs an agent token")
    if len(cache) > 10_000:  # a flood of distinct tokens must not grow this forever
        cache.clear()
    cache[hashed] = (now + AGENT_TOKEN_TTL, info)
    return info


async def agent_run(request: web.Request) -> tuple[str, str, str]:
    """(run_id, org, project) of an agent route's run; a run of another org is a 404."""
    info = await require_agent(request)
    run_id = request.match_info["run"]
    tenant = run_tenant(run_id)
    if tenant is None or tenant[0] != info.org:
        raise NotFound(f"no run {run_id}")
    return run_id, tenant[0], tenant[1]


def bind_claim(agent_token: str, token: uuid.UUID) -> uuid.UUID:
    """The claim token as the queue row holds it: the one handed to the agent, bound to
    the id of the agent token that took it (the twin of cryo._bind_claim; a test keeps
    the two equal). A claim token presented with another agent token binds to another
    value, which is no live claim, so it is refused as stale (CR002) by the one check
    every agent call already makes (cryo._claimed_row)."""
    return uuid.UUID(bytes=hashlib.sha256(f"{agent_token}/{token}".encode()).digest()[:16])


async def agent_claim(request: web.Request, body: dict[str, Any]) -> uuid.UUID:
    """The claim token an agent route's body carries, bound to the calling agent token."""
    info = await require_agent(request)
    return bind_claim(info.token_id, claim_token(body))


# An agent names itself; the name is shown to operators and keyed by (org, id).
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")


def agent_id_of(value: Any) -> str:
    """A claim's agent_id, checked: 1-128 of letters, digits and . _ : @ - (else 400)."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument("agent_id is required")
    if not _AGENT_ID.match(value):
        raise InvalidArgument("agent_id must be 1-128 characters of letters, digits and "
                              "._:@- (starting with a letter or digit)")
    return value
