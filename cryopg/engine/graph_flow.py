"""The graph tier's flow calls (74_graph_flow.sql): a node's result cache."""

from __future__ import annotations

import uuid

from psycopg import AsyncConnection

from cryopg.engine._sql import _one


async def graph_cache_take(conn: AsyncConnection, run_id: str, token: uuid.UUID, node: str,
                           item: int, key: bytes, ttl: float) -> bool:
    """True when a fresh entry ended the instance (cached); else the instance keeps the
    key, and its output is stored there when it succeeds."""
    return bool(await _one(conn, "SELECT cryo.graph_cache_take(%s, %s, %s, %s, %s, %s)",
                           (run_id, token, node, item, key, ttl)))
