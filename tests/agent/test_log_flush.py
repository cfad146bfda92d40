"""When the agent's log streamer posts: the first output after a quiet spell at once
(leading edge), what follows within FLUSH_INTERVAL of a post's start with the next post,
so a chatty job (5 MB of lines) makes no more posts than one per interval; bytes that may
begin a secret are not sent early by the leading edge."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from agent import logs as logs_mod
from agent.logs import CHUNK_BYTES, REDACTED, LogStreamer

SECRET = "hunter2-secret"


class _Api:
    """Records each post with the monotonic time it began."""

    def __init__(self) -> None:
        self.posts: list[tuple[float, bytes]] = []

    async def logs(self, run_id: str, token: str, data: bytes, timeout: float = 30,
                   offset: int | None = None) -> bool:
        self.posts.append((time.monotonic(), data))
        await asyncio.sleep(0)
        return False

    def sent(self) -> bytes:
        return b"".join(d for _, d in self.posts)


async def _until(what: str, ok: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _with_streamer(body: Callable[[LogStreamer, _Api], Awaitable[None]],
                   secrets: list[str] | None = None, heartbeat: float = 3600) -> _Api:
    api = _Api()

    async def go() -> None:
        logs = LogStreamer(api, "dev:default:run-x", "tok", heartbeat=heartbeat,  # type: ignore[arg-type]
                           on_cancel=lambda: None, on_stale=lambda: None, secrets=secrets)
        ticker = asyncio.create_task(logs.run())
        try:
            await body(logs, api)
        finally:
            await logs.stop(ticker)

    asyncio.run(go())
    return api


def test_a_line_after_a_quiet_spell_goes_at_once_and_the_next_waits_its_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A long interval makes "at once" and "waits" unmistakable on a loaded machine.
    monkeypatch.setattr(logs_mod, "FLUSH_INTERVAL", 2.0)

    async def body(logs: LogStreamer, api: _Api) -> None:
        await asyncio.sleep(0.05)  # the streamer is idle, dozing
        fed = time.monotonic()
        logs.feed(b"first\n")
        await _until("the first post", lambda: len(api.posts) == 1)
        assert api.posts[0][0] - fed < 1.0, "the first line waited for a tick"
        logs.feed(b"second\n")
        logs.feed(b"third\n")
        await _until("the second post", lambda: len(api.posts) == 2)

    api = _with_streamer(body)
    (t1, d1), (t2, d2) = api.posts
    assert (d1, d2) == (b"first\n", b"second\nthird\n")  # coalesced into one post
    assert t2 - t1 >= 2.0 - 0.01, "a post followed the last sooner than the interval"


def test_a_heartbeat_does_not_hold_back_the_line_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs_mod, "FLUSH_INTERVAL", 2.0)

    async def body(logs: LogStreamer, api: _Api) -> None:
        await _until("a heartbeat", lambda: len(api.posts) == 1)
        fed = time.monotonic()
        logs.feed(b"line\n")
        await _until("the line", lambda: len(api.posts) == 2)
        assert api.posts[1][0] - fed < 1.0, "the line waited out the interval of a heartbeat"

    api = _with_streamer(body, heartbeat=0.01)
    assert [d for _, d in api.posts] == [b"", b"line\n"]


def test_a_chatty_job_makes_at_most_one_post_per_interval() -> None:
    total = 5 << 20
    line = b"x" * 99 + b"\n"

    async def body(logs: LogStreamer, api: _Api) -> None:
        fed = 0
        while fed < total:  # 5 MB of 100-byte lines over a second or so
            for _ in range(200):
                logs.feed(line)
            fed += 200 * len(line)
            await asyncio.sleep(0.001)
        await _until("the whole log", lambda: len(api.sent()) == fed)

    started = time.monotonic()
    api = _with_streamer(body)
    took = time.monotonic() - started
    # Posts start at least FLUSH_INTERVAL apart, except that a flush sends what it holds
    # in chunks of CHUNK_BYTES back to back.
    starts = [t for t, _ in api.posts]
    flushes = 1 + sum(1 for a, b in zip(starts, starts[1:], strict=False)
                      if b - a >= logs_mod.FLUSH_INTERVAL - 0.01)
    assert flushes <= took / logs_mod.FLUSH_INTERVAL + 2, (flushes, took)
    assert len(api.posts) <= flushes + total // CHUNK_BYTES + 1, (len(api.posts), flushes)
    assert all(len(d) <= CHUNK_BYTES for _, d in api.posts)


def test_the_leading_edge_never_sends_the_start_of_a_secret() -> None:
    async def body(logs: LogStreamer, api: _Api) -> None:
        await asyncio.sleep(0.05)
        logs.feed(b"token: hunter2-")  # may begin the secret: only "token: " may go
        await _until("the first post", lambda: len(api.posts) == 1)
        assert api.posts[0][1] == b"token: "
        logs.feed(b"secret done\n")
        await _until("the rest", lambda: api.sent().endswith(b"done\n"))

    api = _with_streamer(body, secrets=[SECRET])
    assert api.sent() == b"token: " + REDACTED + b" done\n"
