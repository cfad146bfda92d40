"""LISTEN on a dedicated autocommit connection and wake in-process waiters.

NOTIFY is only a hint that something may have changed. A waiter takes the current
event *before* checking the database, so a notify landing between its check and its
wait still wakes it; every wait also has a timeout, so a lost notify costs latency
only. On a dropped connection the notifier wakes everyone and reconnects.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping

import psycopg


class Notifier:
    def __init__(self, dsn: str,
                 hooks: Mapping[str, Callable[[str | None], None]] | None = None) -> None:
        self._dsn = dsn
        # Other channels and what hears them, called in the loop in arrival order (before
        # a later cryo_work wakes anyone); with None after a reconnect: notes were missed.
        self._hooks = dict(hooks or {})
        self._work = asyncio.Event()
        self._graph = asyncio.Event()
        self._runs: dict[str, asyncio.Event] = {}
        self._on_work: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.closing = False

    def work_event(self) -> asyncio.Event:
        """The event the next `cryo_work` notify sets."""
        return self._work

    def graph_event(self) -> asyncio.Event:
        """The event the next `cryo_graph` notify sets: a graph run needs a driver."""
        return self._graph

    def run_event(self, run_id: str) -> asyncio.Event:
        """The event the next `cryo_run` notify for this run sets."""
        ev = self._runs.get(run_id)
        if ev is None:
            ev = self._runs[run_id] = asyncio.Event()
        return ev

    def on_work(self, hook: Callable[[], None]) -> None:
        """Calls `hook` in the loop whenever the work event is set (the claim dispatcher:
        a callback, not a task per wait)."""
        self._on_work.append(hook)

    def _wake_work(self) -> None:
        ev, self._work = self._work, asyncio.Event()
        ev.set()
        for hook in self._on_work:
            hook()

    def _wake_graph(self) -> None:
        ev, self._graph = self._graph, asyncio.Event()
        ev.set()

    def _wake_run(self, run_id: str) -> None:
        ev = self._runs.pop(run_id, None)
        if ev is not None:
            ev.set()

    def wake_work(self) -> None:
        """Wakes the claim waiters as a `cryo_work` notify would."""
        self._wake_work()

    def _wake_all(self) -> None:
        for hook in self._hooks.values():
            hook(None)
        self._wake_work()
        self._wake_graph()
        runs, self._runs = self._runs, {}
        for ev in runs.values():
            ev.set()

    def close_waiters(self) -> None:
        """On shutdown: wake every held long-poll so it can answer and let go."""
        self.closing = True
        self._wake_all()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen())
        try:
            await asyncio.wait_for(self.connected.wait(), 10)
        except TimeoutError:
            pass  # the database may come later; waiters fall back to their timeouts

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._dsn, autocommit=True) as conn:
                    await conn.execute("LISTEN cryo_work")
                    await conn.execute("LISTEN cryo_run")
                    await conn.execute("LISTEN cryo_graph")
                    for channel in self._hooks:
                        await conn.execute(f"LISTEN {channel}")
                    self.connected.set()
                    backoff = 0.5
                    self._wake_all()  # anything that happened while we were away
                    async for note in conn.notifies():
                        if note.channel == "cryo_work":
                            self._wake_work()
                        elif note.channel == "cryo_graph":
                            self._wake_graph()
                        elif note.channel in self._hooks:
                            self._hooks[note.channel](note.payload)
                        else:
                            self._wake_run(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure means reconnect
                self.connected.clear()
                print(f"cryopg: notifier lost its connection ({exc}); retrying",
                      file=sys.stderr)
                self._wake_all()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5)


async def wait_any(events: list[asyncio.Event], timeout: float) -> None:
    """Until one of `events` is set or `timeout` seconds pass (the live streams' wait:
    a notification, or the poll backstop)."""
    waits = [asyncio.ensure_future(ev.wait()) for ev in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
