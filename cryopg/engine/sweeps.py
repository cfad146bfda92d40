"""The periodic backstop the server runs: expire leases, wake due runs."""

from __future__ import annotations

from psycopg import AsyncConnection


async def tick(conn: AsyncConnection) -> tuple[int, int]:
    cur = await conn.execute("SELECT * FROM cryo.tick()")
    expired, woken = await cur.fetchone()
    return expired, woken
