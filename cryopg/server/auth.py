"""Bearer tokens: users and agents are separate kinds, stored as a hash of the secret."""

from __future__ import annotations

import hashlib
import secrets

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import TokenInfo
from cryopg.errors import NotFound, Unauthorized
from cryopg.server.state import POOL


def new_secret(kind: str) -> str:
    return f"cryo_{kind[0]}_{secrets.token_urlsafe(24)}"


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


async def _token(request: web.Request, kind: str) -> TokenInfo:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        raise Unauthorized("missing bearer token")
    async with connection(request.app[POOL]) as conn:
        info = await engine.authenticate_token(conn, secret_hash(header[7:].strip()))
    if info.kind != kind:
        raise Unauthorized(f"this route needs a {kind} token")
    return info


async def require_user(request: web.Request) -> TokenInfo:
    """A user token whose org is the org in the path; anything else reads as absent."""
    info = await _token(request, "user")
    if info.org != request.match_info["org"]:
        raise NotFound(f"no project {request.match_info['org']}/{request.match_info['project']}")
    return info


async def require_agent(request: web.Request) -> TokenInfo:
    return await _token(request, "agent")
