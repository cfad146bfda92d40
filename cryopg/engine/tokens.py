"""Bearer tokens (user and agent) and the agents that present them."""

from __future__ import annotations

import datetime as dt

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import TokenInfo, TokenRow, UserAuth


async def create_token(conn: AsyncConnection, kind: str, org: str, name: str, secret_hash: bytes,
                       capabilities: list[str] | None = None, *,
                       expires_at: dt.datetime | None = None, member: str | None = None) -> str:
    return await _one(conn, "SELECT cryo.create_token(%s, %s, %s, %s, %s, %s, %s)",
                      (kind, org, name, secret_hash, capabilities or [], expires_at, member))


async def authorize_user(conn: AsyncConnection, secret_hash: bytes, org: str,
                         project: str | None, need: str) -> UserAuth:
    cur = conn.cursor(row_factory=class_row(UserAuth))
    await cur.execute("SELECT * FROM cryo.authorize_user(%s, %s, %s, %s)",
                      (secret_hash, org, project, need))
    return await cur.fetchone()


async def authenticate_token(conn: AsyncConnection, secret_hash: bytes) -> TokenInfo:
    cur = conn.cursor(row_factory=class_row(TokenInfo))
    await cur.execute("SELECT * FROM cryo.authenticate_token(%s)", (secret_hash,))
    return await cur.fetchone()


async def list_tokens(conn: AsyncConnection, org: str) -> list[TokenRow]:
    cur = conn.cursor(row_factory=class_row(TokenRow))
    await cur.execute("SELECT * FROM cryo.list_tokens(%s)", (org,))
    return await cur.fetchall()


async def revoke_token(conn: AsyncConnection, org: str, token_id: str) -> bool:
    return await _one(conn, "SELECT cryo.revoke_token(%s, %s)", (org, token_id))


async def register_agent(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                         build: str | None = None, instance: str | None = None,
                         last_claim_at: dt.datetime | None = None) -> bool:
    """True when the agent was asked to drain."""
    return bool(await _one(conn, "SELECT cryo.register_agent(%s, %s, %s, %s, %s, %s)",
                           (org, agent_id, caps, build, instance, last_claim_at)))
