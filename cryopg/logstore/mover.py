"""Each replica's mover (a tick round) and the readers' side of a moved log."""

from __future__ import annotations

import datetime as dt
import sys
import time

import obstore
from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError
from cryopg.logstore.objects import object_key, open_store, pack, unpack
from cryopg.logstore.settings import LogStoreSettings
from cryopg.seal import Sealer
from cryopg.server.state import CONFIG, KEYS, POOL

BATCH = 50  # runs moved per round
PAGE = 500  # chunks read per query
MOVE_EVERY = 2.0  # seconds between rounds while the store answers
BACKOFF_MAX = 30.0  # between rounds while it does not


class LogStoreUnavailable(CryoError):
    """A moved log was asked for while the store does not answer (no SQLSTATE)."""

    code, http_status = "unavailable", 503


class LogStore:
    def __init__(self, settings: LogStoreSettings) -> None:
        self.settings = settings
        self.store = open_store(settings)
        self.down_since: float | None = None
        self.next_round = 0.0
        self.backoff = MOVE_EVERY

    # -- the mover ---------------------------------------------------------------------------

    async def round(self, app: web.Application) -> None:
        now = time.monotonic()
        if now < self.next_round:
            return
        async with connection(app[POOL]) as conn:
            todo = await engine.logs_to_archive(
                conn, dt.timedelta(seconds=self.settings.move_after_seconds), BATCH)
        try:
            for item in todo:
                await self._move(app, item)
            deleted = await self._delete_collected(app)
        except Exception as exc:  # noqa: BLE001 - the store's failures are many; all wait
            if self.down_since is None:
                print(f"cryopg: log store unavailable ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}); logs wait in the "
                      "database, bounded", file=sys.stderr)
                self.down_since = now
            self.backoff = min(self.backoff * 2, BACKOFF_MAX)
            self.next_round = time.monotonic() + self.backoff
            await self._bound(app, todo)
            return
        if self.down_since is not None:
            print("cryopg: log store reachable again", file=sys.stderr)
            self.down_since = None
        self.backoff = MOVE_EVERY
        # A full batch means more are waiting: go again on the next tick.
        full = len(todo) == BATCH or deleted == BATCH
        self.next_round = time.monotonic() + (0 if full else MOVE_EVERY)

    async def _move(self, app: web.Application, item: engine.LogToMove) -> None:
        sealer = await app[KEYS].sealer(item.org)
        chunks: list[tuple[int, bytes]] = []
        after = 0
        async with connection(app[POOL]) as conn:
            while after < item.last_chunk_id:
                page = await engine.read_logs(conn, item.run_id, after, PAGE)
                if not page:
                    break
                chunks += [(c.id, sealer.open(c.data)) for c in page
                           if c.id <= item.last_chunk_id]
                after = page[-1].id
        key = object_key(self.settings, item.run_id)
        await obstore.put_async(self.store, key, pack(sealer, chunks))
        async with connection(app[POOL]) as conn:
            await engine.archive_run_log(conn, item.run_id, key, item.last_chunk_id,
                                         sum(len(d) for _, d in chunks))

    async def _delete_collected(self, app: web.Application) -> int:
        """Deletes the objects of collected runs' logs (queued by their collection), then
        their rows; another replica doing the same at once deletes nothing twice of note."""
        async with connection(app[POOL]) as conn:
            queued = await engine.log_objects_to_delete(conn, BATCH)
        if not queued:
            return 0
        await obstore.delete_async(self.store, sorted({k for _, k in queued}))
        async with connection(app[POOL]) as conn:
            await engine.forget_log_objects(conn, [i for i, _ in queued])
        return len(queued)

    async def _bound(self, app: web.Application, todo: list[engine.LogToMove]) -> None:
        """The store is down: a waiting log keeps its newest run_buffer_bytes, and all of
        this round's together the newest replica_buffer_bytes (oldest runs give first)."""
        per_run, total = self.settings.run_buffer_bytes, self.settings.replica_buffer_bytes
        keep = {i.run_id: min(i.bytes, per_run) for i in todo}
        over = sum(keep.values()) - total
        for item in todo:  # oldest end first
            if over <= 0:
                break
            cut = min(keep[item.run_id], over)
            keep[item.run_id] -= cut
            over -= cut
        for item in todo:
            if keep[item.run_id] >= item.bytes:
                continue
            sealer = await app[KEYS].sealer(item.org)
            lost = item.bytes - keep[item.run_id]
            marker = sealer.seal(f"\n[cryopg: about {lost} bytes of this log were dropped "
                                 "while the log store was unavailable]\n".encode())
            try:
                async with connection(app[POOL]) as conn:
                    await engine.trim_run_log(conn, item.run_id, keep[item.run_id], marker)
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                print(f"cryopg: trimming a waiting log failed: {exc}", file=sys.stderr)

    # -- readers -----------------------------------------------------------------------------

    async def chunks_after(self, app: web.Application, run_id: str, sealer: Sealer,
                           after: int) -> tuple[list[tuple[int, bytes]], int]:
        """A moved log's plain chunks after chunk id `after`, and the position to go on
        from in the database (`after` itself when the log has not moved)."""
        async with connection(app[POOL]) as conn:
            moved = await engine.read_log_archive(conn, run_id)
        if moved is None or after >= moved.last_chunk_id:
            return [], after
        try:
            got = await obstore.get_async(self.store, moved.object_key)
            blob = bytes(await got.bytes_async())
        except Exception as exc:  # noqa: BLE001 - any store failure is the same to a reader
            raise LogStoreUnavailable(
                "this run's log is in the log store, which does not answer; retry shortly"
            ) from exc
        return [c for c in unpack(sealer, blob) if c[0] > after], moved.last_chunk_id


LOG_STORE = web.AppKey("log_store", object)  # a LogStore, or None when logs stay in PG


def log_store(app: web.Application) -> LogStore | None:
    got = app.get(LOG_STORE)
    return got if isinstance(got, LogStore) else None


async def move_logs(app: web.Application) -> None:
    """A tick round: move finished runs' logs to the store (nothing when it is off)."""
    store = log_store(app)
    if store is not None:
        await store.round(app)


def setup(app: web.Application) -> None:
    settings = app[CONFIG].log_store
    app[LOG_STORE] = LogStore(settings) if settings is not None else None


async def moved_chunks(app: web.Application, run_id: str, sealer: Sealer,
                       after: int) -> tuple[list[tuple[int, bytes]], int]:
    """What readers call: ([], after) when the store is off or the log did not move."""
    store = log_store(app)
    if store is None:
        return [], after
    return await store.chunks_after(app, run_id, sealer, after)

