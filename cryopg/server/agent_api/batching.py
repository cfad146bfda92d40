"""Group commit for the agent path: one transaction for what several agents ask at once.

Claims: every long-polling agent waits here, and one task claims for all the agents
waiting with the same org and capabilities in one call of cryo.claim_grants (one
statement, one commit), then hands each its own claim. Finishes: agents' finishes
queue here, and one task ends every finish that arrived while the previous batch was
committing in one call of cryo.finish_runs (and claims the next run of each agent that
asks, in the same transaction). Recorded steps likewise, in one call of
cryo.record_steps. A finish or a step costs one WAL flush however many share it, and
nothing is answered before the transaction that holds it has committed.

Each call is still one SQL function applying one transition to N rows; a batch that
fails as a whole (one bad outcome) is retried item by item, so only the bad item fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from aiohttp import web
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import SESSION_SETTINGS, connection, translated
from cryopg.engine import ClaimGrant
from cryopg.errors import CryoError, DatabaseUnavailable, StaleClaim, from_sqlstate
from cryopg.server.app_state import CONFIG, NOTIFIER, POOL
from cryopg.server.notifier import Notifier

# Without a notify, waiting agents are re-checked this often (the poll backstop).
POLL_SECONDS = 5.0
# How often waiting long-polls are checked for agents that hung up (no database work):
# such an agent is answered, and noted gone, within about this long.
REAP_SECONDS = 1.0
# The most claims or finishes one transaction takes.
BATCH_MAX = 500
# How many finish batches may be committing at once (steps: one, so two steps of one
# run never race for the next journal position in two transactions).
FINISHES_IN_FLIGHT = 2


class _Queued(Protocol):
    future: asyncio.Future[Any]


T = TypeVar("T", bound=_Queued)


@dataclasses.dataclass(eq=False)
class _Waiter:
    agent_id: str
    deadline: float
    alive: Callable[[], bool]
    future: asyncio.Future[ClaimGrant | None]
    tried: bool = False
    agent_token: str | None = None  # the agent token its claim is bound to


class ClaimDispatcher:
    """Claims for waiting agents in batches; see the module's docstring."""

    def __init__(self, dsn: str, notifier: Notifier, claim_seconds: float) -> None:
        self._dsn = dsn
        # Its own connection, outside the pool (as the notifier's): a pooled one is
        # checked with a round trip at every checkout, which a waiting agent would feel.
        self._conn: AsyncConnection | None = None
        self._notifier = notifier
        self._claim_seconds = claim_seconds
        self._waiting: dict[tuple[str, tuple[str, ...]], list[_Waiter]] = {}
        # Why the loop should run again, noted whenever it happens (during a pass too):
        # work may be pending (a cryo_work notify, heard on the claim connection itself
        # or by the notifier), or a new long-poll arrived. _wakeup is the one future the
        # idle loop awaits: a notify resolves it straight from the socket's reader, with
        # no event, task or asyncio.wait between the notify and the claim.
        self._work_seen = False
        self._kicked = False
        self._wakeup: asyncio.Future[None] | None = None
        notifier.on_work(self._poke_work)
        self._reading = -1  # the socket _arm watches, while the connection is idle
        self._task: asyncio.Task[None] | None = None

    async def claim(self, org: str, agent_id: str, caps: list[str], wait: float,
                    alive: Callable[[], bool],
                    agent_token: str | None = None) -> ClaimGrant | None:
        """A claim for this agent, or None when nothing came within `wait` seconds (one
        try at least), the agent hung up, or the server is stopping."""
        loop = asyncio.get_running_loop()
        if self._notifier.closing:
            return None
        waiter = _Waiter(agent_id, loop.time() + wait, alive, loop.create_future(),
                         agent_token=agent_token)
        self._waiting.setdefault((org, tuple(caps)), []).append(waiter)
        self._kicked = True
        self._wake()
        try:
            return await asyncio.shield(waiter.future)
        except asyncio.CancelledError:
            # The request went away. A claim already made for it is not lost: it expires
            # and tick() hands the run on, as for any agent that vanished.
            if not waiter.future.done():
                waiter.future.cancel()
            raise

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            await _stopped(self._task)
        self._resolve_all(None)
        self._disarm()
        if self._conn is not None:
            await self._conn.close()

    def _poke_work(self) -> None:
        self._work_seen = True
        self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _idle(self, timeout: float) -> str | None:
        """Until work may be pending ("work"), a long-poll arrived ("kick"), or `timeout`
        seconds passed (None); what happened since the pass began counts at once."""
        if not (self._work_seen or self._kicked):
            loop = asyncio.get_running_loop()
            wakeup = self._wakeup = loop.create_future()
            timer = loop.call_later(timeout, self._wake)
            self._arm()
            try:
                await wakeup
            finally:
                timer.cancel()
                self._wakeup = None
                self._disarm()
        return "work" if self._work_seen else "kick" if self._kicked else None

    def _arm(self) -> None:
        """While the claim connection is idle, a notify arriving on it wakes the loop. (During
        a query psycopg reads notifies itself and hands them to the handler.)"""
        conn = self._conn
        if conn is None or conn.closed or conn.broken or self._reading >= 0:
            return
        self._reading = conn.fileno()
        asyncio.get_running_loop().add_reader(self._reading, self._read_notifies)
        self._read_notifies()  # what arrived since the last query

    def _disarm(self) -> None:
        if self._reading >= 0:
            asyncio.get_running_loop().remove_reader(self._reading)
            self._reading = -1

    def _read_notifies(self) -> None:
        conn = self._conn
        if conn is None:
            return
        pgconn = conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            # The connection is gone: the next claim reconnects; the notifier's own
            # connection and the poll backstop cover the gap.
            self._disarm()
            self._poke_work()
            return
        while pgconn.notifies() is not None:
            self._poke_work()

    async def _claim_grants(self, org: str, agent_ids: list[str], caps: list[str],
                            agent_tokens: list[str] | None) -> list[ClaimGrant]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            try:
                self._conn = await AsyncConnection.connect(self._dsn, autocommit=True,
                                                           connect_timeout=10)
                # A claim made here does not wait for its WAL flush (about a millisecond
                # of a long-poll's answer). Losing one in a crash is losing an agent
                # just after its claim: the run is pending again and the agent's first
                # call is refused as stale; and any durable call of the run flushes the
                # WAL its claim wrote before committing itself. Finishes (which may also
                # claim) stay fully durable on the pool's connections.
                await self._conn.execute(f"{SESSION_SETTINGS}; SET synchronous_commit = off")
                # It listens for work too: the backend that tells it a run is pending is
                # the one that claims it, just awake, with no hop through the notifier's
                # task and a second backend (about a millisecond of enqueue-to-start).
                self._conn.add_notify_handler(lambda _note: self._poke_work())
                await self._conn.execute("LISTEN cryo_work")
            except psycopg.Error as exc:
                raise DatabaseUnavailable(f"database unavailable: {exc}".splitlines()[0]) from exc
        try:
            with translated():
                return await engine.claim_grants(self._conn, org, agent_ids, caps,
                                                 self._claim_seconds, agent_tokens)
        except Exception:
            if self._conn.broken:  # reconnect on the next call
                await self._conn.close()
            raise

    def _resolve_all(self, value: ClaimGrant | None) -> None:
        for waiters in self._waiting.values():
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(value)
        self._waiting.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        everyone = True  # the first pass tries every key
        polled = loop.time()  # when every key was last tried
        while True:
            # Cleared before the database is read: a notify heard during the pass counts.
            self._work_seen = self._kicked = False
            if self._notifier.closing:
                self._resolve_all(None)
            else:
                if everyone:
                    polled = loop.time()
                keys = [k for k, ws in self._waiting.items()
                        if everyone or any(not w.tried for w in ws)]
                for key in keys:
                    await self._serve(key, everyone)
                self._reap()
                self._expire(loop.time())
            now = loop.time()
            deadlines = [w.deadline for ws in self._waiting.values() for w in ws]
            timeout = min([polled + POLL_SECONDS - now, *(d - now for d in deadlines)])
            if self._waiting:
                timeout = min(timeout, REAP_SECONDS)
            first = await self._idle(max(timeout, 0.0))
            # A timeout short of the poll backstop only reaps (and expires) waiters.
            everyone = first != "kick" and (
                first is not None or loop.time() >= polled + POLL_SECONDS
                or any(w.deadline <= loop.time() for ws in self._waiting.values()
                       for w in ws))

    def _reap(self) -> None:
        """Answers None to every waiter whose agent hung up (or is draining) now, rather
        than at the next claim pass: the handler notes a hung-up agent gone."""
        for waiters in self._waiting.values():
            for w in waiters:
                if not w.future.done() and not w.alive():
                    w.future.set_result(None)

    def _expire(self, now: float) -> None:
        """Answers None to every waiter past its deadline that has had its try, and
        forgets the answered."""
        for key, waiters in list(self._waiting.items()):
            for w in waiters:
                if w.tried and w.deadline <= now and not w.future.done():
                    w.future.set_result(None)
            left = [w for w in waiters if not w.future.done()]
            if left:
                self._waiting[key] = left
            else:
                del self._waiting[key]

    async def _serve(self, key: tuple[str, tuple[str, ...]], everyone: bool) -> None:
        """Claims for the key's waiting agents: all of them after a notify or the poll
        backstop, else (new long-polls arrived) only those not tried yet; the others
        found nothing and nothing was added since, so asking again for them would make
        each arriving agent cost a claim for every agent already waiting."""
        org, caps = key
        waiters = [w for w in self._waiting.get(key, []) if not w.future.done()]
        now = asyncio.get_running_loop().time()
        asking: list[_Waiter] = []
        for w in waiters:
            if not w.alive():
                w.future.set_result(None)
            elif len(asking) < BATCH_MAX and (everyone or not w.tried):
                asking.append(w)
        if asking:
            try:
                got = await self._claim_grants(org, [w.agent_id for w in asking], list(caps),
                                               _tokens([w.agent_token for w in asking]))
            except Exception as exc:  # noqa: BLE001 - each waiter gets the error itself
                for w in asking:
                    if not w.future.done():
                        w.future.set_exception(exc)
                got = []
            for g in got:
                w = next(w for w in asking if (w.agent_id, w.agent_token)
                         == (g.agent_id, g.agent_token) and not w.future.done())
                w.future.set_result(g)
            for w in asking:
                w.tried = True
                if not w.future.done() and w.deadline <= now:
                    w.future.set_result(None)
        left = [w for w in self._waiting.get(key, []) if not w.future.done()]
        if left:
            self._waiting[key] = left
        else:
            self._waiting.pop(key, None)


def _group(ask: ClaimAsk) -> tuple[str, tuple[str, ...], bool]:
    """Asks that one claim_grants call may serve together: one org, one capability set,
    all bound to agent tokens or none."""
    return ask.org, ask.caps, ask.agent_token is not None


def _tokens(tokens: list[str | None]) -> list[str] | None:
    """The agent tokens to bind a batch's claims to; None when no item names one."""
    if all(t is None for t in tokens):
        return None
    if any(t is None for t in tokens):
        raise ValueError("a claim batch mixes bound and unbound claims")
    return [t for t in tokens if t is not None]


class _Batcher(Generic[T]):
    """What the finish and step batchers share: items queue, one task commits what
    arrived while the previous batch was committing, on one connection for as long as
    items keep coming, and answers each item's future only after its commit. A batch
    that fails as a whole is retried item by item, so only the bad item fails."""

    what = "batch"  # names the batcher in its one log line
    in_flight = 1  # batches committing at once, each on its own connection

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._pending: list[T] = []
        self._kick = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def _queue(self, item: T) -> Any:
        self._pending.append(item)
        self._kick.set()
        return await asyncio.shield(item.future)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        for task in [self._task, *self._running]:
            if task is not None:
                await _stopped(task)
        for item in self._pending:
            if not item.future.done():
                item.future.set_exception(DatabaseUnavailable("the server is stopping"))

    async def _run(self) -> None:
        # Up to `in_flight` batches commit at once, each on its own connection: while
        # one waits on the database, the next is formed and sent, so the server's Python
        # work and the database's overlap instead of taking turns.
        while True:
            await self._kick.wait()
            self._kick.clear()
            while self._pending and len(self._running) < self.in_flight:
                task = asyncio.create_task(self._drain(self._take()))
                self._running.add(task)
                task.add_done_callback(self._drained)

    def _drained(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._pending:
            self._kick.set()

    async def _drain(self, batch: list[T]) -> None:
        """Commits `batch`, then what else is pending, on one connection."""
        try:
            async with connection(self._pool) as conn:
                while batch:
                    await self._commit(conn, batch)
                    batch = self._take() if self._pending else []
        except Exception as exc:  # noqa: BLE001 - the loop must outlive a bad batch
            print(f"cryopg: {self.what} batch failed: {exc}", file=sys.stderr)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
        except asyncio.CancelledError:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(DatabaseUnavailable("the server is stopping"))
            raise

    def _take(self) -> list[T]:
        batch, self._pending = self._pending[:BATCH_MAX], self._pending[BATCH_MAX:]
        return batch

    async def _commit(self, conn: AsyncConnection, batch: list[T]) -> None:
        """Applies the batch, or, when it fails whole, each item alone. Raises
        DatabaseUnavailable (the connection is gone); any other error is the items'."""
        try:
            applied = await self._apply(conn, batch)
        except DatabaseUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - each item learns its own fate below
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            for item in batch:
                await self._commit(conn, [item])
            return
        self._answer(batch, applied)

    async def _apply(self, conn: AsyncConnection, batch: list[T]) -> Any:
        raise NotImplementedError

    def _answer(self, batch: list[T], applied: Any) -> None:
        raise NotImplementedError


@dataclasses.dataclass(eq=False)
class _Finish:
    run_id: str
    token: uuid.UUID
    outcome: str
    exit_code: int | None
    error: str | None
    log: bytes | None
    ask: ClaimAsk | None  # the agent's next claim, made in the same transaction
    future: asyncio.Future[ClaimGrant | None]
    log_offset: int | None = None  # where `log` starts in the pass's log (None: anywhere)
    log_length: int | None = None  # its plain length

    def item(self) -> engine.FinishItem:
        return (self.run_id, self.token, self.outcome, self.exit_code, self.error, self.log,
                self.log_offset, self.log_length)


@dataclasses.dataclass(frozen=True)
class ClaimAsk:
    org: str
    agent_id: str
    caps: tuple[str, ...]
    agent_token: str | None = None  # the agent token the next claim is bound to


class FinishBatcher(_Batcher[_Finish]):
    """Ends runs in batches; see the module's docstring."""

    what = "finish"
    in_flight = FINISHES_IN_FLIGHT

    def __init__(self, pool: AsyncConnectionPool, claim_seconds: float) -> None:
        super().__init__(pool)
        self._claim_seconds = claim_seconds

    async def finish(self, run_id: str, token: uuid.UUID, outcome: str, exit_code: int | None,
                     error: str | None, log: bytes | None,
                     ask: ClaimAsk | None = None, log_offset: int | None = None,
                     log_length: int | None = None) -> ClaimGrant | None:
        """Ends the run once its batch has committed; with `ask`, claims the agent's next
        run in the same transaction and returns it (None when none was pending). Raises
        StaleClaim for a claim that is no longer live, and what cryo.finish_runs raises
        for a bad outcome."""
        return await self._queue(_Finish(  # type: ignore[no-any-return]
            run_id, token, outcome, exit_code, error, log, ask,
            asyncio.get_running_loop().create_future(), log_offset, log_length))

    def _take(self) -> list[_Finish]:
        """The next batch: one finish per run (cryo.finish_runs answers per run, so a
        second finish of a run, say a retry with the same or another token, waits for
        the next batch), at most BATCH_MAX."""
        batch: list[_Finish] = []
        later: list[_Finish] = []
        runs: set[str] = set()
        for item in self._pending:
            if item.run_id in runs or len(batch) >= BATCH_MAX:
                later.append(item)
            else:
                runs.add(item.run_id)
                batch.append(item)
        self._pending = later
        return batch

    async def _apply(self, conn: AsyncConnection, batch: list[_Finish],
                     ) -> tuple[dict[str, bool], dict[_Finish, ClaimGrant]]:
        """One transaction: cryo.finish_runs for the batch, then one cryo.claim_grants per
        org and capability set for the agents that asked for their next run. When every
        ask shares one org and capability set (agents of one pool: the usual case), one
        statement does both (cryo.finish_and_claim_grants): one round trip, not four."""
        keys = {_group(f.ask) for f in batch if f.ask is not None}
        if len(keys) <= 1:
            return await self._apply_one_group(conn, batch)
        with translated():
            async with conn.transaction():
                done = await engine.finish_runs(conn, [f.item() for f in batch])
                asking: dict[ClaimAsk, list[_Finish]] = {}
                for f in batch:
                    if f.ask is not None and done.get(f.run_id):
                        asking.setdefault(dataclasses.replace(f.ask, agent_id="",
                                                              agent_token=None),
                                          []).append(f)
                got: dict[_Finish, ClaimGrant] = {}
                for key, items in asking.items():
                    rows = await engine.claim_grants(
                        conn, key.org, [f.ask.agent_id for f in items if f.ask],
                        list(key.caps), self._claim_seconds,
                        _tokens([f.ask.agent_token for f in items if f.ask]))
                    for g in rows:
                        f = next(f for f in items if f.ask and f not in got
                                 and (f.ask.agent_id, f.ask.agent_token)
                                 == (g.agent_id, g.agent_token))
                        got[f] = g
        return done, got

    async def _apply_one_group(self, conn: AsyncConnection, batch: list[_Finish],
                               ) -> tuple[dict[str, bool], dict[_Finish, ClaimGrant]]:
        asks = [f.ask for f in batch]
        key = next((a for a in asks if a is not None), None)
        items = [f.item() for f in batch]
        with translated():
            if key is None:
                return await engine.finish_runs(conn, items), {}
            bound = _tokens([a.agent_token for a in asks if a is not None]) is not None
            done, rows = await engine.finish_and_claim_grants(
                conn, items, key.org, [a.agent_id if a else None for a in asks],
                list(key.caps), self._claim_seconds,
                [a.agent_token if a else None for a in asks] if bound else None)
        got: dict[_Finish, ClaimGrant] = {}
        for g in rows:
            f = next(f for f in batch if f.ask and f not in got
                     and (f.ask.agent_id, f.ask.agent_token) == (g.agent_id, g.agent_token))
            got[f] = g
        return done, got

    def _answer(self, batch: list[_Finish],
                applied: tuple[dict[str, bool], dict[_Finish, ClaimGrant]]) -> None:
        done, got = applied
        for f in batch:
            if f.future.done():
                continue
            if done.get(f.run_id):
                f.future.set_result(got.get(f))
            else:
                f.future.set_exception(
                    StaleClaim(f"claim token is not the live claim of run {f.run_id}"))


@dataclasses.dataclass(eq=False)
class _Step:
    item: engine.StepItem
    future: asyncio.Future[int]


class StepBatcher(_Batcher[_Step]):
    """Records steps in batches (one cryo.record_steps call for what arrived while the
    previous batch was committing); see the module's docstring."""

    what = "step"

    async def record(self, item: engine.StepItem) -> int:
        """The step's seq once its batch has committed; raises what record_step would."""
        return await self._queue(  # type: ignore[no-any-return]
            _Step(item, asyncio.get_running_loop().create_future()))

    async def _apply(self, conn: AsyncConnection, batch: list[_Step]) -> Any:
        with translated():
            return await engine.record_steps(conn, [s.item for s in batch])

    def _answer(self, batch: list[_Step], applied: Any) -> None:
        for step, (seq, code, message) in zip(batch, applied, strict=True):
            if seq is not None:
                step.future.set_result(seq)
            else:
                step.future.set_exception(from_sqlstate(code, message or "")
                                          or CryoError(message or f"step refused ({code})"))


CLAIMS = web.AppKey("claim_dispatcher", ClaimDispatcher)
STEPS = web.AppKey("step_batcher", StepBatcher)
FINISHES = web.AppKey("finish_batcher", FinishBatcher)


async def batching_ctx(app: web.Application) -> AsyncIterator[None]:
    app[CLAIMS] = ClaimDispatcher(app[CONFIG].database_url, app[NOTIFIER],
                                  app[CONFIG].claim_seconds)
    app[FINISHES] = FinishBatcher(app[POOL], app[CONFIG].claim_seconds)
    app[STEPS] = StepBatcher(app[POOL])
    app[CLAIMS].start()
    app[FINISHES].start()
    app[STEPS].start()
    yield
    await app[CLAIMS].stop()
    await app[FINISHES].stop()
    await app[STEPS].stop()


async def _stopped(task: asyncio.Task[Any]) -> None:
    """Cancels a loop and waits for it, 5 s at most: on Python 3.11 a cancel that lands as
    an inner wait_for completes (a pooled connection's checkout) can be lost."""
    task.cancel()
    await asyncio.wait([task], timeout=5)
