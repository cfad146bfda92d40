"""The log streamer redacts secret values, also when one is split across PTY reads and
across flushes."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.logs import REDACTED, LogStreamer


class _Api:
    def __init__(self) -> None:
        self.posts: list[bytes] = []

    async def logs(self, run_id: str, token: str, data: bytes, timeout: float = 30) -> bool:
        self.posts.append(data)
        return False


def _streamer(api: Any, secrets: list[str]) -> LogStreamer:
    return LogStreamer(api, "dev:default:run-x", "tok", on_cancel=lambda: None,
                       on_stale=lambda: None, secrets=secrets)


def test_a_value_split_across_reads_and_flushes_never_leaves() -> None:
    api = _Api()
    logs = _streamer(api, ["hunter2-secret", "pw"])

    async def go() -> None:
        logs.feed(b"start hunter2-")
        await logs.flush()
        logs.feed(b"sec")
        await logs.flush()
        logs.feed(b"ret end pw!\n")
        await logs.flush(final=True)

    asyncio.run(go())
    sent = b"".join(api.posts)
    assert sent == b"start " + REDACTED + b" end " + REDACTED + b"!\n"
    assert all(b"hunter2" not in p for p in api.posts)


def test_without_secrets_nothing_is_held_back() -> None:
    api = _Api()
    logs = _streamer(api, [])
    logs.feed(b"abc")
    asyncio.run(logs.flush())
    assert api.posts == [b"abc"]


def test_a_tail_that_is_not_a_secret_goes_out_on_the_final_flush() -> None:
    api = _Api()
    logs = _streamer(api, ["topsecret"])
    logs.feed(b"top")
    asyncio.run(logs.flush())
    assert api.posts == []  # could be the start of the secret
    asyncio.run(logs.flush(final=True))
    assert b"".join(api.posts) == b"top"
