"""The one helper the wrappers share: the first column of the one row a call returns."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection


async def _one(conn: AsyncConnection, sql: str, params: tuple[Any, ...]) -> Any:
    row = await (await conn.execute(sql, params)).fetchone()
    return row[0] if row else None
