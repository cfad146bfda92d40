"""The readers' side of a moved log: its chunks streamed from the store, a segment at a
time, on any replica (the log route, the live stream, graph logs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import obstore
from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError
from cryopg.logstore.mover import log_store
from cryopg.logstore.objects import read_chunks
from cryopg.seal import Sealer

READ_PIECE = 256 << 10  # bytes asked of the store's stream at a time


class LogStoreUnavailable(CryoError):
    """A moved log was asked for while the store does not answer (no SQLSTATE)."""

    code, http_status = "unavailable", 503


def _unavailable(exc: BaseException) -> LogStoreUnavailable:
    err = LogStoreUnavailable(
        "this run's log is in the log store, which does not answer; retry shortly")
    err.__cause__ = exc
    return err


class MovedLog:
    """A moved log opened for reading: the store answered, its bytes not read yet."""

    def __init__(self, run_id: str, sealer: Sealer, got: Any, after: int,
                 last_chunk_id: int) -> None:
        self.run_id, self.sealer, self.got, self.after = run_id, sealer, got, after
        self.last_chunk_id = last_chunk_id

    async def chunks(self) -> AsyncIterator[tuple[int, bytes]]:
        """Its plain chunks after `after`, in order. A store that stops answering
        mid-way raises LogStoreUnavailable."""
        try:
            async for cid, data in read_chunks(self.sealer, self.run_id,
                                               self.got.stream(min_chunk_size=READ_PIECE)):
                if cid > self.after:
                    yield cid, data
        except CryoError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store failure is the same to a reader
            raise _unavailable(exc) from exc


async def open_moved(app: web.Application, run_id: str, sealer: Sealer,
                     after: int) -> MovedLog | None:
    """The part of a run's log after chunk `after` that moved to the store, opened; None
    when the store is off, the log did not move or nothing moved is after `after`. Raises
    LogStoreUnavailable (a 503) when the store does not answer."""
    store = log_store(app)
    if store is None:
        return None
    async with connection(store.pool) as conn:
        moved = await engine.read_log_archive(conn, run_id)
    if moved is None or after >= moved.last_chunk_id:
        return None
    try:
        got = await obstore.get_async(store.store, moved.object_key)
    except Exception as exc:  # noqa: BLE001 - any store failure is the same to a reader
        raise _unavailable(exc) from exc
    return MovedLog(run_id, sealer, got, after, moved.last_chunk_id)
