"""Per-org sealers, created on first use and cached for the life of the server."""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import connection
from cryopg.seal import MasterKey, Sealer


class OrgKeys:
    def __init__(self, pool: AsyncConnectionPool, master: MasterKey) -> None:
        self._pool, self._master = pool, master
        self._sealers: dict[str, Sealer] = {}
        self._lock = asyncio.Lock()

    async def sealer(self, org: str) -> Sealer:
        found = self._sealers.get(org)
        if found:
            return found
        async with self._lock:
            if org not in self._sealers:
                self._sealers[org] = await self._load(org)
            return self._sealers[org]

    async def _load(self, org: str) -> Sealer:
        async with connection(self._pool) as conn:
            key_id, wrapped = await engine.get_org_key(conn, org)
            if wrapped is None:
                new_id, new_wrapped, _ = self._master.new_org_key(org)
                # Another server may win this race; set_org_key returns the winner.
                key_id, wrapped = await engine.set_org_key(conn, org, new_id, new_wrapped)
        return Sealer(org, key_id, self._master.unwrap(org, key_id, wrapped))
