"""Each replica's mover: claims finished runs' logs, streams each to the store as one
object under a key only that attempt writes, verifies it, and records it.

A move, start to end (sql/functions/82_log_store.sql has the SQL half):
1. `claim_log_moves` leases a few logs to this replica (no other replica moves them while
   the lease lives; one whose replica died lapses and is taken over).
2. The chunks are read from the database a page (bounded in bytes) at a time, opened,
   framed and sealed into segments (objects.py) and streamed to the store as a multipart
   upload of PART_BYTES parts (a log of up to SMALL_BYTES in one PUT), hashing what goes
   out. The lease is renewed as it goes and
   once more before the last segment, so a mover that lost it never completes an object.
3. The object is read back: its size and SHA-256 must be what was sent.
4. `archive_run_log` records it and drops the chunks in one transaction, for the live
   lease's attempt only. A refused or failed attempt gives its lease back and queues its
   key (`abandon_log_move`); queued keys are deleted at the end of every round.

A store that fails delays moves; only once it has failed for outage_grace_seconds are
waiting logs cut to their bounds (bound.py), each cut marked in the log.

The server builds each replica's LogStore with what it uses of the server (its pool, org
keys and replica id) and keeps it under LOG_STORE; the log store does not import the server.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import sys
import time
from collections.abc import AsyncIterator, Callable

import obstore
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, LogMoveLost
from cryopg.logstore.bound import bound_waiting_logs
from cryopg.logstore.objects import SegmentWriter, open_store
from cryopg.logstore.settings import LogStoreSettings
from cryopg.seal import OrgSealers, Sealer

CLAIM_BATCH = 8  # logs leased per claim while the store answers
BOUND_BATCH = 64  # while it does not: one is tried, the rest bounded if past the grace
# Logs up to this (sealed) go in one PUT, SMALL_AT_ONCE at a time; larger ones alone, as
# a multipart upload (a part or two in memory, however large the log).
SMALL_BYTES = 4 << 20
SMALL_AT_ONCE = 4
PAGE_BYTES = 1 << 20  # sealed chunk bytes read from the database per query
PART_BYTES = 6 << 20  # multipart part size (S3 wants >= 5 MiB but for the last)
PARTS_IN_FLIGHT = 2
ROUND_SECONDS = 30.0  # a round claims again until this has passed, then deletes
DELETE_BATCH = 100
MOVE_EVERY = 2.0  # seconds between rounds while the store answers
BACKOFF_MAX = 30.0  # between rounds while it does not


class StoreFailed(Exception):
    """The store failed a move (raised after the attempt gave its lease back)."""


class _Upload:
    """One attempt's bytes on their way out: read, sealed, counted, hashed. While it lives
    a heartbeat renews its lease every third of the lease (through the upload, the read
    back and the record); a lost lease stops the stream at its next page, and the stream
    renews once more before the object may complete."""

    def __init__(self, pool: AsyncConnectionPool, mv: engine.LogMove, sealer: Sealer,
                 lease: dt.timedelta) -> None:
        self.pool, self.mv, self.lease = pool, mv, lease
        self.writer = SegmentWriter(sealer, mv.run_id)
        self.sha = hashlib.sha256()
        self.size = 0
        self.error: BaseException | None = None
        self.lost: BaseException | None = None

    def _out(self, data: bytes) -> bytes:
        self.sha.update(data)
        self.size += len(data)
        return data

    async def renew(self) -> None:
        async with connection(self.pool) as conn:
            await engine.renew_log_move(conn, self.mv.run_id, self.mv.attempt_id, self.lease)

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            try:
                await self.renew()
            except LogMoveLost as exc:
                self.lost = exc
                return
            except CryoError:
                pass  # the database away for a moment: the next beat, or the lease lapses

    async def stream(self) -> AsyncIterator[bytes]:
        try:
            yield self._out(self.writer.head())
            after, pool = 0, self.pool
            while after < self.mv.last_chunk_id:
                if self.lost is not None:
                    raise self.lost
                async with connection(pool) as conn:
                    page = await engine.read_log_page(conn, self.mv.run_id, after,
                                                      self.mv.last_chunk_id, PAGE_BYTES)
                if not page:
                    break
                segments = await asyncio.to_thread(self.writer.add_sealed, page)
                if segments:
                    yield self._out(segments)
                after = page[-1][0]
            await self.renew()  # the object completes within this lease, or not at all
            yield self._out(self.writer.close())
        except BaseException as exc:  # the store's client may not pass our error on intact
            self.error = exc
            raise


class LogStore:
    def __init__(self, settings: LogStoreSettings, pool: AsyncConnectionPool,
                 keys: OrgSealers, replica_id: str,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        self.settings = settings
        self.on_failure = on_failure  # each failed round: the server counts them
        self.pool, self.keys, self.replica_id = pool, keys, replica_id
        self.store = open_store(settings)
        self.down_since: float | None = None
        self.next_round = 0.0
        self.backoff = MOVE_EVERY
        self.task: asyncio.Task[None] | None = None

    @property
    def lease(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.settings.lease_seconds)

    # -- rounds ------------------------------------------------------------------------------

    def kick(self) -> None:
        """From the ticker: a round in the background when one is due, so a long move
        never holds up the engine's tick."""
        if (self.task is None or self.task.done()) and time.monotonic() >= self.next_round:
            self.task = asyncio.create_task(self._round_reported())

    async def _round_reported(self) -> None:
        try:
            await self.round()
        except Exception as exc:  # noqa: BLE001 - e.g. the database away: the next round retries
            self.on_failure()
            print(f"cryopg: moving logs failed: {exc}", file=sys.stderr)
            self.next_round = time.monotonic() + MOVE_EVERY

    async def round(self) -> None:
        """Claims and moves logs until none is due (or the store fails, or ROUND_SECONDS
        pass), then deletes the objects queued for deletion."""
        started = time.monotonic()
        more = False
        try:
            while True:
                batch = BOUND_BATCH if self.down_since is not None else CLAIM_BATCH
                async with connection(self.pool) as conn:
                    moves = await engine.claim_log_moves(
                        conn, self.replica_id, self.settings.prefix,
                        dt.timedelta(seconds=self.settings.move_after_seconds), self.lease,
                        batch)
                if not moves:
                    break
                await self._move_batch(moves)
                more = len(moves) == batch
                if not more or time.monotonic() - started > ROUND_SECONDS:
                    break
            more = await self._delete_queued() or more
        except StoreFailed as exc:
            self.on_failure()
            now = time.monotonic()
            if self.down_since is None:
                cause = exc.__cause__ or exc
                print(f"cryopg: log store unavailable ({type(cause).__name__}: "
                      f"{_first_line(cause)}); logs wait in the database", file=sys.stderr)
                self.down_since = now
            self.backoff = min(self.backoff * 2, BACKOFF_MAX)
            self.next_round = now + self.backoff
            return
        self._up()
        self.backoff = MOVE_EVERY
        self.next_round = time.monotonic() + (0 if more else MOVE_EVERY)

    async def _move_batch(self, moves: list[engine.LogMove]) -> None:
        """Small logs a few at a time, large ones alone (a large one's memory is its
        parts in flight). While the store is known down, one is tried first: if it fails
        too, the rest wait; past the outage's grace, all are bounded first."""
        if (self.down_since is not None
                and time.monotonic() - self.down_since >= self.settings.outage_grace_seconds):
            await bound_waiting_logs(self.pool, self.keys, self.settings, moves)
        todo = list(moves)
        try:
            while todo:
                if self.down_since is not None or todo[0].bytes > SMALL_BYTES:
                    group = [todo.pop(0)]
                else:
                    group = []
                    while todo and todo[0].bytes <= SMALL_BYTES and len(group) < SMALL_AT_ONCE:
                        group.append(todo.pop(0))
                got = await asyncio.gather(*(self._move(m) for m in group),
                                           return_exceptions=True)
                failed = [e for e in got if isinstance(e, BaseException)]
                if failed:
                    raise failed[0]
                self._up()
        except BaseException:
            await self._give_back(todo)
            raise

    def _up(self) -> None:
        if self.down_since is not None:
            print("cryopg: log store reachable again", file=sys.stderr)
            self.down_since = None

    async def _give_back(self, moves: list[engine.LogMove]) -> None:
        """Leases of logs this round will not try: nothing was written under their keys."""
        for mv in moves:
            try:
                async with connection(self.pool) as conn:
                    await engine.abandon_log_move(conn, mv.run_id, mv.attempt_id, None)
            except CryoError:
                pass  # the lease lapses by itself

    # -- one move ----------------------------------------------------------------------------

    async def _move(self, mv: engine.LogMove) -> None:
        sealer = await self.keys.sealer(mv.org)
        up = _Upload(self.pool, mv, sealer, self.lease)
        try:
            await up.renew()  # it may have waited in its batch: a full lease from now
        except LogMoveLost:
            return  # lapsed while it waited and taken over: nothing was written
        beat = asyncio.create_task(up.heartbeat())
        try:
            await self._move_renewed(mv, up)
        finally:
            beat.cancel()

    async def _move_renewed(self, mv: engine.LogMove, up: _Upload) -> None:
        try:
            try:
                if mv.bytes <= SMALL_BYTES:  # one PUT: a killed mover leaves no open upload
                    body = b"".join([piece async for piece in up.stream()])
                    await obstore.put_async(self.store, mv.object_key, body,
                                            use_multipart=False)
                else:
                    await obstore.put_async(self.store, mv.object_key, up.stream(),
                                            chunk_size=PART_BYTES,
                                            max_concurrency=PARTS_IN_FLIGHT)
            except BaseException as exc:
                raise (up.error or exc) from None
            size, digest = await self._read_back(mv.object_key)
        except LogMoveLost:
            print(f"cryopg: the move of {mv.run_id}'s log lapsed under this replica; another "
                  "takes it over", file=sys.stderr)
            await self._abandon(mv)  # our object goes
            return
        except CryoError:  # the database: the lease lapses, the key is queued at takeover
            await self._abandon(mv)
            raise
        except Exception as exc:  # noqa: BLE001 - the store's failures are many; all wait
            await self._abandon(mv)
            raise StoreFailed(str(exc)) from exc
        if (size, digest) != (up.size, up.sha.digest()):
            print(f"cryopg: the log store holds {size} bytes for {mv.object_key} where "
                  f"{up.size} were sent, or other bytes; it moves again", file=sys.stderr)
            await self._abandon(mv)
            return
        try:
            async with connection(self.pool) as conn:
                await engine.archive_run_log(conn, mv.run_id, mv.attempt_id, mv.object_key,
                                             up.writer.plain_bytes, size, digest)
        except LogMoveLost:
            print(f"cryopg: the move of {mv.run_id}'s log lapsed under this replica before it "
                  "was recorded; another takes it over", file=sys.stderr)
            await self._abandon(mv)

    async def _read_back(self, key: str) -> tuple[int, bytes]:
        """The object's size and SHA-256 as the store serves it, a piece at a time."""
        got = await obstore.get_async(self.store, key)
        sha, size = hashlib.sha256(), 0
        async for piece in got.stream(min_chunk_size=1 << 20):
            sha.update(piece)
            size += len(piece)
        return size, sha.digest()

    async def _abandon(self, mv: engine.LogMove) -> None:
        """Gives the lease back (if still ours) and queues the attempt's key: its put may
        have landed even when it failed."""
        try:
            async with connection(self.pool) as conn:
                await engine.abandon_log_move(conn, mv.run_id, mv.attempt_id, mv.object_key)
        except CryoError as exc:  # the lease lapses; its takeover queues the key
            print(f"cryopg: giving back the move of {mv.run_id}'s log failed: {exc}",
                  file=sys.stderr)

    async def _delete_queued(self) -> bool:
        """Deletes the objects queued for deletion (collected runs, failed and taken-over
        attempts), then their rows; True when a full batch went (more may wait)."""
        async with connection(self.pool) as conn:
            queued = await engine.log_objects_to_delete(conn, DELETE_BATCH)
        if not queued:
            return False
        try:
            await obstore.delete_async(self.store, sorted({k for _, k in queued}))
        except Exception as exc:  # noqa: BLE001 - the store's failures are many; all wait
            raise StoreFailed(str(exc)) from exc
        async with connection(self.pool) as conn:
            await engine.forget_log_objects(conn, [i for i, _ in queued])
        return len(queued) == DELETE_BATCH


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


LOG_STORE = web.AppKey("log_store", object)  # a LogStore, or None when logs stay in PG


def log_store(app: web.Application) -> LogStore | None:
    got = app.get(LOG_STORE)
    return got if isinstance(got, LogStore) else None


async def move_logs(app: web.Application) -> None:
    """A tick round: starts a move round in the background when due (nothing when the
    store is off)."""
    store = log_store(app)
    if store is not None:
        store.kick()


async def stop_moving(app: web.Application) -> None:
    """On shutdown, before the pool closes: ends a move round under way."""
    store = log_store(app)
    if store is not None and store.task is not None and not store.task.done():
        store.task.cancel()
        await asyncio.wait([store.task], timeout=5)

