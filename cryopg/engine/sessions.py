"""Sign-in through the OIDC issuer: pending browser sign-ins, sessions, the claim map."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class PendingLogin:
    nonce: str
    code_verifier: str
    org: str


@dataclasses.dataclass(frozen=True)
class SignedIn:
    session_id: str
    member: str
    role: str
    expires_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class SessionInfo:
    session_id: str
    org: str
    member: str
    role: str
    kind: str
    expires_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class SessionRow:
    id: str
    member: str
    kind: str
    subject: str
    created_at: dt.datetime
    expires_at: dt.datetime
    revoked_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class RoleMap:
    claim: str
    value: str
    role: str
    created_at: dt.datetime


async def begin_oidc_login(conn: AsyncConnection, id_hash: bytes, state: str, nonce: str,
                           code_verifier: str, org: str, ttl_seconds: float) -> dt.datetime:
    return await _one(conn, "SELECT cryo.begin_oidc_login(%s, %s, %s, %s, %s, %s)",
                      (id_hash, state, nonce, code_verifier, org, ttl_seconds))


async def take_oidc_login(conn: AsyncConnection, id_hash: bytes, state: str) -> PendingLogin:
    cur = conn.cursor(row_factory=class_row(PendingLogin))
    await cur.execute("SELECT * FROM cryo.take_oidc_login(%s, %s)", (id_hash, state))
    return await cur.fetchone()


async def oidc_sign_in(conn: AsyncConnection, org: str, issuer: str, subject: str,
                       email: str | None, claims: dict[str, Any], secret_hash: bytes,
                       kind: str, ttl_seconds: float) -> SignedIn:
    cur = conn.cursor(row_factory=class_row(SignedIn))
    await cur.execute("SELECT * FROM cryo.oidc_sign_in(%s, %s, %s, %s, %s, %s, %s, %s)",
                      (org, issuer, subject, email, Jsonb(claims), secret_hash, kind,
                       ttl_seconds))
    return await cur.fetchone()


async def session_info(conn: AsyncConnection, secret_hash: bytes) -> SessionInfo:
    cur = conn.cursor(row_factory=class_row(SessionInfo))
    await cur.execute("SELECT * FROM cryo.session_info(%s)", (secret_hash,))
    return await cur.fetchone()


async def end_session(conn: AsyncConnection, secret_hash: bytes) -> bool:
    return await _one(conn, "SELECT cryo.end_session(%s)", (secret_hash,))


async def list_sessions(conn: AsyncConnection, org: str) -> list[SessionRow]:
    cur = conn.cursor(row_factory=class_row(SessionRow))
    await cur.execute("SELECT * FROM cryo.list_sessions(%s)", (org,))
    return await cur.fetchall()


async def revoke_session(conn: AsyncConnection, org: str, session_id: str) -> bool:
    return await _one(conn, "SELECT cryo.revoke_session(%s, %s)", (org, session_id))


async def put_role_map(conn: AsyncConnection, org: str, claim: str, value: str,
                       role: str) -> bool:
    return await _one(conn, "SELECT cryo.put_role_map(%s, %s, %s, %s)",
                      (org, claim, value, role))


async def delete_role_map(conn: AsyncConnection, org: str, claim: str, value: str) -> bool:
    return await _one(conn, "SELECT cryo.delete_role_map(%s, %s, %s)", (org, claim, value))


async def list_role_maps(conn: AsyncConnection, org: str) -> list[RoleMap]:
    cur = conn.cursor(row_factory=class_row(RoleMap))
    await cur.execute("SELECT * FROM cryo.list_role_maps(%s)", (org,))
    return await cur.fetchall()


async def begin_cli_sign_in(conn: AsyncConnection, nonce_hash: bytes, org: str,
                            ttl_seconds: float) -> dt.datetime:
    return await _one(conn, "SELECT cryo.begin_cli_sign_in(%s, %s, %s)",
                      (nonce_hash, org, ttl_seconds))


async def spend_id_token(conn: AsyncConnection, token_hash: bytes, expires_at: dt.datetime,
                         nonce_hash: bytes | None = None, org: str | None = None,
                         renewing: bytes | None = None, issuer: str | None = None,
                         subject: str | None = None) -> None:
    await conn.execute("SELECT cryo.spend_id_token(%s, %s, %s, %s, %s, %s, %s)",
                       (token_hash, expires_at, nonce_hash, org, renewing, issuer, subject))
