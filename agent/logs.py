"""Buffer a run's output and stream it to the server; every post also renews the lease.

Every secret value the claim injected is masked before a byte leaves the agent, so
neither the live follow nor the stored log ever holds one (cryopg/redaction.py: also a
multi-line secret with "\r\n" line ends, and its long lines one by one). A value can
arrive split across PTY reads and flushes: bytes that may still begin a secret stay
back in the masker, never in the send buffer, until more output shows whether they do.
Where the pass may end (a park, an exit, a kill) they are released, masked when they
are a meaningful prefix of a secret; the stream's last bytes then go to the server
(sealed there) as the run's log context, and the next pass starts its masker from them,
so the rest of that secret printed after the park is masked too. The masker also finds
a secret printed across lines, with escape sequences inside it, or in hex or base64.

Output goes out on the leading edge: the first bytes after a quiet spell are posted at
once, and what follows within FLUSH_INTERVAL of a post's start waits for the next one.
A line printed now and then is on its way within a millisecond or two, while a chatty
job still makes at most one post of output per FLUSH_INTERVAL (a 5 MB log stays a few
dozen posts of up to CHUNK_BYTES, never one per line). An idle heartbeat (an empty post)
does not count: the line printed just after one goes at once too.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

from agent.api import (
    CALL_TIMEOUT_SECONDS,
    AgentAPI,
    AgentAPIError,
    LogAck,
    ServerUnavailable,
    StaleClaim,
)
from cryopg.redaction import MASK, Masker, StreamMasker

FLUSH_INTERVAL = 0.15  # the least time between the starts of two posts
HEARTBEAT_INTERVAL = 2.0
# Keeps a post (base64 + JSON) well under aiohttp's default 1 MiB request limit.
CHUNK_BYTES = 256 << 10
# Past this much unsent output, stop reading the PTY so the script blocks on write
# instead of the agent's memory growing while the server is slow or away.
HIGH_WATER = 8 << 20
REDACTED = MASK.encode()


class LogStreamer:
    def __init__(
        self,
        api: AgentAPI,
        run_id: str,
        claim_token: str,
        *,
        heartbeat: float = HEARTBEAT_INTERVAL,
        on_cancel: Callable[[], None],
        on_stale: Callable[..., None],
        on_pressure: Callable[[bool], None] = lambda _high: None,
        secrets: list[str] | None = None,
        claim_seconds: float | None = None,
        context: bytes = b"",
    ) -> None:
        self._api = api
        self._run_id = run_id
        self._claim_token = claim_token
        self._heartbeat = heartbeat
        self._on_cancel = on_cancel
        self._on_stale = on_stale
        self._on_pressure = on_pressure
        self._buf = bytearray()
        self._lock = asyncio.Lock()  # one post at a time keeps chunks in order
        self._last_post = time.monotonic()  # the claim's last renewal, as far as we know
        self._claim_seconds = claim_seconds
        self._high = False
        self._warned = False
        # When the last post began: the next one may start FLUSH_INTERVAL after it.
        self._flushed_at = time.monotonic() - FLUSH_INTERVAL
        # The `run` loop's doze while the buffer is empty: new output cuts it short.
        self._doze: asyncio.Future[None] | None = None
        # None without secrets: the hot path then only appends.
        masker = StreamMasker((v for v in secrets or [] if v), context=context)
        self._masker: StreamMasker | None = masker if masker else None
        # Step names, labels and notes are masked with the same secrets before they go.
        self.names: Masker[str] = Masker([v for v in secrets or [] if v], MASK)
        # The log context the server holds for the next pass: what this one was given
        # (it replaces it only when it changes, so most passes never send one).
        self._context_sent = context
        # Where the buffer's first byte falls in this pass's log, as sent (after
        # masking): every post names it, so the server stores a post whose answer was
        # lost (its replica died) once, however often and wherever it is sent again.
        self._base = 0
        # Where the bytes take_final handed back start, for the finish that carries them.
        self.final_offset = 0

    def feed(self, data: bytes) -> None:
        # The buffer only ever grows at its end (a post may be in flight on its start).
        self._buf += data if self._masker is None else self._masker.push(data)
        if self._buf and self._doze is not None and not self._doze.done():
            self._doze.set_result(None)  # bytes that may begin a secret wake nobody
        if not self._high and len(self._buf) >= HIGH_WATER:
            self._high = True
            self._on_pressure(True)

    def _cut(self) -> None:
        if self._masker is not None:
            self._buf += self._masker.cut()

    async def flush(self, *, heartbeat: bool = False, final: bool = False) -> None:
        """Send everything buffered so far (or an empty heartbeat if asked and idle).
        With `final` (the pass may end here: a park) the bytes held back as a possible
        secret's start go too, masked if they are one; short of it they wait.

        Raises StaleClaim and AgentAPIError; bytes stay buffered if a post fails.
        """
        async with self._lock:
            context: bytes | None = None
            if final:
                self._cut()
                context = self._new_context()
            pending = len(self._buf)
            if pending == 0 and not heartbeat and context is None:
                return
            if pending:  # an empty heartbeat does not hold back the output after it
                self._flushed_at = time.monotonic()
            while True:
                data = bytes(self._buf[: min(pending, CHUNK_BYTES)])
                # A server that hangs must not keep us past the claim's lapse unawares.
                left = self.claim_deadline() - time.monotonic()
                extra = {} if context is None else {"context": context}
                ack = await self._post(data, min(CALL_TIMEOUT_SECONDS, max(left, 1.0)), extra)
                if context is not None:
                    self._context_sent, context = context, None
                cancel, stored = self._stored(len(data), ack)
                pending -= stored
                self._last_post = time.monotonic()
                if cancel:
                    self._on_cancel()
                if pending <= 0 or not stored:
                    break
            if self._high and len(self._buf) < HIGH_WATER // 2:
                self._high = False
                self._on_pressure(False)

    def _new_context(self) -> bytes | None:
        """The log context to hand the next pass, when it differs from the server's."""
        now = self._masker.context() if self._masker is not None else b""
        return None if now == self._context_sent else now

    async def take_final(self) -> bytes:
        """The run's last output, for the finish request to carry: posts all but the last
        chunk (a long tail stays within one request's size) and hands back the rest,
        which leaves the buffer. Raises as flush does."""
        async with self._lock:
            self._cut()
            while len(self._buf) > CHUNK_BYTES:
                data = bytes(self._buf[:CHUNK_BYTES])
                left = self.claim_deadline() - time.monotonic()
                ack = await self._post(data, min(CALL_TIMEOUT_SECONDS, max(left, 1.0)), {})
                if not self._stored(len(data), ack)[1]:
                    break
                self._last_post = time.monotonic()
            data = bytes(self._buf)
            self.final_offset = self._base
            self._buf.clear()
            return data

    async def _post(self, data: bytes, timeout: float, extra: dict[str, bytes]) -> object:
        """Posts `data` at the buffer's offset. A gap (the server's log ends before the
        buffer starts: bytes acknowledged, then lost to it) cannot be mended from here:
        the log goes on from the server's end, with one line saying so."""
        while True:
            try:
                return await self._api.logs(self._run_id, self._claim_token, data,
                                            timeout=timeout, offset=self._base, **extra)
            except AgentAPIError as e:
                if e.code != "log_gap" or e.log_end is None or e.log_end >= self._base:
                    raise
                print(f"cryopg agent: run {self._run_id}: the server's log ends at byte "
                      f"{e.log_end}, not {self._base}; bytes between are lost",
                      file=sys.stderr)
                self._base = e.log_end

    def _stored(self, sent: int, ack: object) -> tuple[bool, int]:
        """Drops what the server now holds from the buffer's start: (cancel, bytes
        dropped). Its log_end may run past the post (an earlier post's answer was lost
        and this one repeated it); a server without offsets stored the post whole."""
        if isinstance(ack, LogAck):
            cancel, end = ack.cancel, ack.log_end
        else:
            cancel, end = bool(ack), None
        stored = sent if end is None else max(0, min(len(self._buf), end - self._base))
        del self._buf[:stored]
        self._base += stored
        return cancel, stored

    async def stop(self, ticker: asyncio.Task[None]) -> None:
        """End the `run` task between posts, so no chunk is cut off mid-flight and resent."""
        async with self._lock:
            ticker.cancel()
        try:
            await ticker
        except (asyncio.CancelledError, Exception):
            pass

    def claim_deadline(self) -> float:
        """The monotonic time the claim lapses unless a flush renews it first (the
        server extended it before answering, so this errs late by one round trip)."""
        return self._last_post + (self._claim_seconds or float("inf"))

    async def run(self) -> None:
        """Post output as it comes (leading edge, at most one post per FLUSH_INTERVAL);
        heartbeat when there is none. When no flush has renewed the claim for its whole
        length, the claim is gone (the server may have handed the run to another agent):
        stop the script at once."""
        while True:
            if not self._buf:  # idle: the claim and heartbeat checks keep their old pace
                await self._doze_until_output(FLUSH_INTERVAL)
            if self._buf:  # due FLUSH_INTERVAL after the last post began (or now)
                wait = self._flushed_at + FLUSH_INTERVAL - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if time.monotonic() > self.claim_deadline():
                print(f"cryopg agent: run {self._run_id}: claim not renewed for "
                      f"{self._claim_seconds:g}s; stopping the script", file=sys.stderr)
                self._on_stale()
                return
            idle = time.monotonic() - self._last_post
            if not self._buf and idle < self._heartbeat:
                continue
            try:
                await self.flush(heartbeat=True)
                self._warned = False
            except StaleClaim as e:
                self._on_stale(e)  # a RunTimedOut: the job is stopped TERM, then KILL
                return
            except ServerUnavailable as e:
                if not self._warned:  # one line per outage, the next tick retries
                    print(
                        f"cryopg agent: log flush failed ({e.message}); retrying", file=sys.stderr
                    )
                    self._warned = True
                await asyncio.sleep(FLUSH_INTERVAL)  # a failed post does not retry at once
            except AgentAPIError as e:
                if not self._warned:
                    print(f"cryopg agent: log flush refused: {e.message}", file=sys.stderr)
                    self._warned = True
                await asyncio.sleep(FLUSH_INTERVAL)

    async def _doze_until_output(self, seconds: float) -> None:
        """Sleep up to `seconds`; `feed` ends it early when output is ready to send. A
        plain future and a timer, so a cancel (see `stop`) always lands."""
        loop = asyncio.get_running_loop()
        self._doze = doze = loop.create_future()
        timer = loop.call_later(seconds, lambda: doze.done() or doze.set_result(None))
        try:
            await doze
        finally:
            timer.cancel()
            self._doze = None
