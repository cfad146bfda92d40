"""Masking a project's secret values in what the server opens for users.

A run may copy a secret into an output, an annotation, a state cell or an event
payload. Those stay true where the engine reads them (a run's replay, the graph
interpreter, a handler's input: the agent routes and the driver never come here), and
are masked where a person reads them: every user route that opens such a payload
passes its response through `masked` (the web UI and the CLI read through those routes).
What is stored in clear (a step's name, path and label: the agent masks them first) is
masked once more by the agent routes before it is stored (`recent`).

Each masked read asks the database for the project's sealed secret values (one indexed
read on the connection the route already holds), so a secret set on another replica a
moment ago is masked here at once; what is kept per project is the work of opening them
and building the patterns, redone only when the sealed values change.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine
from cryopg.db import connection
from cryopg.redaction import MASK, Masker, mask_json
from cryopg.server.app_state import KEYS, POOL

# How stale the agent routes' second-line masker may be.
RECENT_SECONDS = 5.0


class SecretMasks:
    def __init__(self) -> None:
        self._built: dict[tuple[str, str], tuple[tuple[bytes, ...], Masker[str]]] = {}
        self._recent: dict[tuple[str, str], tuple[float, Masker[str]]] = {}

    async def masker(self, app: web.Application, conn: AsyncConnection, org: str,
                     project: str) -> Masker[str]:
        sealed = tuple(v for _, v in await engine.read_secret_values(conn, org, project))
        got = self._built.get((org, project))
        if got is not None and got[0] == sealed:
            return got[1]
        sealer = await app[KEYS].sealer(org)
        built = Masker([sealer.open_text(v) for v in sealed], MASK)
        self._built[(org, project)] = (sealed, built)
        return built


    async def recent(self, app: web.Application, org: str, project: str,
                     max_age: float = RECENT_SECONDS) -> Masker[str]:
        """The project's masker as built at most `max_age` seconds ago (read afresh
        when older): for the agent routes that store names, where the agent has masked
        them already and this is a second line, so a step costs no extra read."""
        now = time.monotonic()
        got = self._recent.get((org, project))
        if got is not None and now - got[0] <= max_age:
            return got[1]
        async with connection(app[POOL]) as conn:
            built = await self.masker(app, conn, org, project)
        self._recent[(org, project)] = (now, built)
        return built


MASKS = web.AppKey("secret_masks", SecretMasks)


async def masked(request: web.Request, conn: AsyncConnection, org: str, project: str,
                 body: Any) -> Any:
    """`body` (a JSON value) with the project's secret values masked in every string."""
    return mask_json(await request.app[MASKS].masker(request.app, conn, org, project), body)


async def _masks_ctx(app: web.Application) -> AsyncIterator[None]:
    app[MASKS] = SecretMasks()
    yield


def add_to(app: web.Application) -> None:
    app.cleanup_ctx.append(_masks_ctx)
