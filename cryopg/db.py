"""Connections to the engine database and the translation of its errors.

Python only ever calls `cryo` functions (see engine/); every psycopg error passes
through `translated()` so callers see the project's exception classes.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import AsyncIterator, Iterator

import psycopg
import psycopg_pool.pool_async
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from cryopg.errors import CryoError, DatabaseUnavailable, from_sqlstate


def _first_line(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag else None
    text = primary or str(exc) or type(exc).__name__
    return text.strip().splitlines()[0]


def translate(exc: psycopg.Error) -> CryoError | psycopg.Error:
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        return DatabaseUnavailable(f"database unavailable: {_first_line(exc)}")
    return from_sqlstate(exc.sqlstate, _first_line(exc)) or exc


@contextlib.contextmanager
def translated() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        mapped = translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc


# A pooled connection used within this many seconds is handed out unchecked: a round
# trip per checkout doubled the cost of the agent path's one-statement calls. One idle
# longer is checked first, so a restart of the database is still noticed before use.
CHECK_IDLE_SECONDS = 2.0


class _CappedBackoff(AttemptWithBackoff):
    """psycopg_pool doubles the wait between reconnect attempts without bound (1, 2, 4 …
    64 s): after a minute's outage a server would find the database back up to a minute
    late, with every agent and script waiting on it. Capped, it finds it within this."""

    MAX_DELAY = 2.0

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, self.MAX_DELAY)


# The pool looks the class up in its module when it starts a reconnect; there is no
# option for the cap.
psycopg_pool.pool_async.AttemptWithBackoff = _CappedBackoff  # type: ignore[misc]


# Every engine call is a short OLTP statement, but a plan whose estimated cost passes
# jit_above_cost (the tick's retention sweep over every project, say) is compiled by
# LLVM first: some 70 ms of CPU to save nothing, once a second on every server.
SESSION_SETTINGS = "SET jit = off"
# The most items a graph's fan_out may have in this deployment; the server's sessions
# tell SQL (cryo._graph_fan_out_max), and a submit whose input gives more is refused.
FAN_OUT_MAX_ENV = "CRYOPG_GRAPH_FAN_OUT_MAX"
FAN_OUT_MAX_DEFAULT = 10_000


def graph_fan_out_max() -> int:
    """CRYOPG_GRAPH_FAN_OUT_MAX, or 10,000 (a value that is not a positive integer too)."""
    got = os.environ.get(FAN_OUT_MAX_ENV, "").strip()
    return int(got) if got.isdigit() and int(got) > 0 else FAN_OUT_MAX_DEFAULT


def session_settings() -> str:
    return f"{SESSION_SETTINGS}; SET cryo.graph_fan_out_max = {graph_fan_out_max()}"


async def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> AsyncConnectionPool:
    returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection, float] = \
        weakref.WeakKeyDictionary()

    async def reset(conn: psycopg.AsyncConnection) -> None:
        returned[conn] = time.monotonic()

    async def configure(conn: psycopg.AsyncConnection) -> None:
        await conn.execute(session_settings())

    async def check(conn: psycopg.AsyncConnection) -> None:
        if conn.closed or conn.broken:
            raise psycopg.OperationalError("connection lost")
        if time.monotonic() - returned.get(conn, 0.0) > CHECK_IDLE_SECONDS:
            await conn.execute("SELECT 1")

    try:
        # Probe once first: a database that is down is one clear error, not a pool's
        # ten seconds of retry warnings.
        probe = await psycopg.AsyncConnection.connect(dsn, connect_timeout=10)
        await probe.close()
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"cannot reach the database: {_first_line(exc)}") from exc
    pool = AsyncConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, check=check, reset=reset,
        configure=configure,
        kwargs={"autocommit": True}, timeout=10,
    )
    try:
        await pool.open(wait=True, timeout=10)
    except Exception as exc:
        await pool.close()
        raise DatabaseUnavailable(f"cannot reach the database: {_first_line(exc)}") from exc
    return pool


@contextlib.asynccontextmanager
async def connection(pool: AsyncConnectionPool) -> AsyncIterator[psycopg.AsyncConnection]:
    """One pooled autocommit connection for one unit of work, errors translated."""
    try:
        async with pool.connection() as conn:
            with translated():
                yield conn
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"database unavailable: {_first_line(exc)}") from exc
    except TimeoutError as exc:  # pool exhausted or database gone
        raise DatabaseUnavailable("database unavailable: no connection within 10 s") from exc
