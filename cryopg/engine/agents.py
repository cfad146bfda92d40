"""Agents as operators see them: builds, states, and drains."""

from __future__ import annotations

import dataclasses
import datetime as dt

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class AgentRow:
    id: str
    build: str | None
    capabilities: list[str]
    registered_at: dt.datetime
    last_seen_at: dt.datetime
    last_claim_at: dt.datetime | None
    claimed_run: str | None
    drain_requested_at: dt.datetime | None
    state: str
    replica: str | None
    last_contact_at: dt.datetime | None


async def list_agents(conn: AsyncConnection, org: str) -> list[AgentRow]:
    cur = conn.cursor(row_factory=class_row(AgentRow))
    await cur.execute("SELECT * FROM cryo.list_agents(%s)", (org,))
    return await cur.fetchall()


async def drain_agents(conn: AsyncConnection, org: str, *, build: str | None = None,
                       agent_id: str | None = None) -> int:
    return int(await _one(conn, "SELECT cryo.drain_agents(%s, %s, %s)", (org, build, agent_id)))


async def draining_agents(conn: AsyncConnection) -> set[tuple[str, str]]:
    cur = await conn.execute("SELECT org, id FROM cryo.draining_agents()")
    return {(org, id_) for org, id_ in await cur.fetchall()}


async def note_agent(conn: AsyncConnection, org: str, agent_id: str, instance: str | None,
                     state: str) -> bool:
    """Marks the agent (process instance) draining or gone; False when unknown."""
    return bool(await _one(conn, "SELECT cryo.note_agent(%s, %s, %s, %s)",
                           (org, agent_id, instance, state)))
