"""A script run's log read by ranges or searched, for the web UI's log viewer, which
holds only the part on screen (a 50 MB log is never fetched whole to scroll or search it):

- `…/logs?after=ID&max_bytes=N`: whole chunks after chunk ID, about N bytes of text;
- `…/logs?before=ID&max_bytes=N`: whole chunks before chunk ID (0: the end), about N
  bytes, oldest first;
- `…/logs?find=TEXT[&limit=N]`: where TEXT occurs (ignoring case) in the whole log: the
  chunk, the offset in its text and the line around it.

Each answers JSON. A log moved to the object store is read from there too. A match that
spans two chunks is not found (chunks are searched one at a time, never joined).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Run
from cryopg.errors import InvalidArgument
from cryopg.logstore.reader import open_moved
from cryopg.seal import Sealer
from cryopg.server.app_state import POOL
from cryopg.server.bodies import INT8, query_int

MAX_RANGE_BYTES = 8 << 20
BATCH = 4  # chunks per database read for a range: agents' chunks can be a megabyte each
FIND_BATCH = 16  # ... and for a search, which reads them all
FIND_LIMIT = 1000
FIND_MAX_LIMIT = 10_000
FIND_MAX_CHARS = 1000
LINE_CLIP = 400  # characters of a matching line returned around the match

Chunk = tuple[int, "datetime | None", str]


def wants_range(request: web.Request) -> bool:
    return any(k in request.query for k in ("before", "max_bytes", "find"))


async def range_or_find(request: web.Request, run: Run, sealer: Sealer) -> web.Response:
    if run.kind == "graph":
        raise InvalidArgument("before, max_bytes and find read a script run's log; "
                              "a graph run's log is its jobs' logs")
    if "find" in request.query:
        return web.json_response(await _find(request, run, sealer))
    max_bytes = query_int(request, "max_bytes", 256 << 10, (1, MAX_RANGE_BYTES))
    if "before" in request.query:
        before = query_int(request, "before", 0, (0, INT8[1]))
        return web.json_response(await _before(request, run, sealer, before or INT8[1],
                                               max_bytes))
    after = query_int(request, "after", 0, (0, INT8[1]))
    got: list[dict[str, Any]] = []
    size, more = 0, False
    async for cid, at, text in _chunks_after(request, run, sealer, after):
        if size >= max_bytes:
            more = True
            break
        got.append(_out(cid, at, text))
        size += len(text)
    return web.json_response({"chunks": got, "more": more})


def _out(cid: int, at: datetime | None, text: str) -> dict[str, Any]:
    return {"id": cid, "at": at.isoformat() if at else None, "text": text}


def _text(sealer: Sealer, data: bytes) -> str:
    return sealer.open(data).decode("utf-8", errors="replace")


async def _chunks_after(request: web.Request, run: Run, sealer: Sealer,
                        after: int, batch: int = BATCH) -> AsyncIterator[Chunk]:
    """The log's chunks after chunk `after`, in order: moved ones, then the database's."""
    moved = await open_moved(request.app, run.id, sealer, after)
    if moved is not None:
        async for cid, data in moved.chunks():
            yield cid, None, data.decode("utf-8", errors="replace")
        after = max(after, moved.last_chunk_id)
    while True:
        async with connection(request.app[POOL]) as conn:
            chunks = await engine.read_logs(conn, run.id, after, batch)
        for c in chunks:
            yield c.id, c.created_at, _text(sealer, c.data)
        if len(chunks) < batch:
            return
        after = chunks[-1].id


async def _before(request: web.Request, run: Run, sealer: Sealer, before: int,
                  max_bytes: int) -> dict[str, Any]:
    got: deque[dict[str, Any]] = deque()
    size, cursor, more = 0, before, False
    while True:  # the database's chunks, newest first
        async with connection(request.app[POOL]) as conn:
            chunks = await engine.read_logs_before(conn, run.id, cursor, BATCH)
        for c in chunks:
            if size >= max_bytes:
                more = True
                break
            text = _text(sealer, c.data)
            got.appendleft(_out(c.id, c.created_at, text))
            size += len(text)
            cursor = c.id
        if more or len(chunks) < BATCH:
            break
    # Then the part moved to the object store (all older than the database's), read
    # forwards keeping a trailing window of what is still wanted.
    moved = await open_moved(request.app, run.id, sealer, 0)
    if moved is not None and not more:
        if size >= max_bytes:
            more = True
        else:
            window: deque[dict[str, Any]] = deque()
            wsize = 0
            async for cid, data in moved.chunks():
                if cid >= cursor:
                    break
                text = data.decode("utf-8", errors="replace")
                window.append(_out(cid, None, text))
                wsize += len(text)
                while len(window) > 1 and wsize - len(window[0]["text"]) >= max_bytes - size:
                    wsize -= len(window.popleft()["text"])
                    more = True
            got.extendleft(reversed(window))
    return {"chunks": list(got), "more": more}


def _occurrences(text: str, low_needle: str, pattern: re.Pattern[str]) -> list[int]:
    """Where the needle starts in `text`, ignoring case: str.find on the lowered text (some
    ten times quicker than a case-blind regex), unless lowering changed the length (a few
    letters lower to two characters), where offsets would drift."""
    low = text.lower()
    if len(low) != len(text):
        return [m.start() for m in pattern.finditer(text)]
    found, i = [], low.find(low_needle)
    while i >= 0:
        found.append(i)
        i = low.find(low_needle, i + len(low_needle))
    return found


async def _find(request: web.Request, run: Run, sealer: Sealer) -> dict[str, Any]:
    needle = request.query.get("find", "")
    if not needle or len(needle) > FIND_MAX_CHARS:
        raise InvalidArgument(f"find must be 1 to {FIND_MAX_CHARS} characters")
    limit = query_int(request, "limit", FIND_LIMIT, (1, FIND_MAX_LIMIT))
    low_needle = needle.lower()
    pattern = re.compile(re.escape(needle), re.IGNORECASE)
    matches: list[dict[str, Any]] = []
    truncated = False
    async for cid, _at, text in _chunks_after(request, run, sealer, 0, FIND_BATCH):
        for at in _occurrences(text, low_needle, pattern):
            if len(matches) >= limit:
                truncated = True
                break
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            lo = max(start, at - LINE_CLIP // 2)
            matches.append({"id": cid, "offset": at, "line": text[lo:min(end, lo + LINE_CLIP)]})
        if truncated:
            break
    return {"matches": matches, "truncated": truncated}
