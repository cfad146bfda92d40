"""An agent takes runs and, while it holds the claim, streams logs and reads secrets."""

from __future__ import annotations

import uuid

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import Claim, ClaimSecret


async def claim_job(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                    claim_seconds: float) -> Claim | None:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_job(%s, %s, %s, %s)",
                      (org, agent_id, caps, claim_seconds))
    return await cur.fetchone()


async def claim_jobs(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                     claim_seconds: float, limit: int) -> list[Claim]:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_jobs(%s, %s, %s, %s, %s)",
                      (org, agent_id, caps, claim_seconds, limit))
    return await cur.fetchall()


async def append_log(conn: AsyncConnection, run_id: str, token: uuid.UUID, data: bytes | None,
                     claim_seconds: float) -> bool:
    return await _one(conn, "SELECT cryo.append_log(%s, %s, %s, %s)",
                      (run_id, token, data, claim_seconds))


async def release_claim(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    await conn.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))


async def claim_secrets(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> list[ClaimSecret]:
    cur = conn.cursor(row_factory=class_row(ClaimSecret))
    await cur.execute("SELECT * FROM cryo.claim_secrets(%s, %s)", (run_id, token))
    return await cur.fetchall()
