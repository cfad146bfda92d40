"""Server-sent events for the web UI: `GET …/projects/{project}/stream` (the runs list)
and `GET …/runs/{run}/stream` (one run: its log tail, then live chunks and changes).

Both are pushed from LISTEN/NOTIFY through the server's notifier, never polled per
browser. A project's stream is one shared feed per server process however many browsers
watch it: the feed re-reads the project's first page when a notify hints at a change
(with a slow backstop, as every push here has one) and tells its subscribers what
changed; each browser then re-reads its own page through the ordinary API. A comment
line goes out after 15 s of silence so proxies keep the connection open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import DatabaseUnavailable, InvalidArgument
from cryopg.logstore.reader import open_moved
from cryopg.seal import Sealer
from cryopg.server.app_state import KEYS, NOTIFIER, POOL
from cryopg.server.auth import require_user
from cryopg.server.bodies import query_int
from cryopg.server.notifier import Notifier, wait_any
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run, project_of

KEEPALIVE_SECONDS = 15.0
FEED_BACKSTOP_SECONDS = 5.0   # a feed re-reads its page this often without any notify
FEED_COALESCE_SECONDS = 0.25  # notifies closer than this make one re-read
FEED_PAGE = 50
TAIL_MAX_BYTES = 8 << 20
# A run's stream that cannot reach the database (pool exhausted on a busy server) waits
# and reads again, keeping the browser's connection, rather than ending: an ended stream
# makes the page reconnect and read everything again, which loads the server further.
RETRY_SECONDS = (0.5, 1.0, 2.0, 4.0)


class SSE:
    """One event stream response, with the keepalive clock.

    A browser tab that closes leaves the stream to find out on its next write, which
    raises a ConnectionError (aiohttp's ClientConnectionResetError). That is how most
    streams end, not a failure: the handlers catch it and return quietly, so aiohttp
    logs no traceback for it."""

    def __init__(self) -> None:
        self.resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                "Cache-Control": "no-cache",
                                                "X-Accel-Buffering": "no"})
        self.last = time.monotonic()

    async def open(self, request: web.Request) -> None:
        await self.resp.prepare(request)

    async def send(self, event: str, data: Any) -> None:
        await self.resp.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self.last = time.monotonic()

    async def keepalive(self) -> None:
        if time.monotonic() - self.last >= KEEPALIVE_SECONDS - 0.05:
            await self.resp.write(b": keepalive\n\n")
            self.last = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds until the next keepalive is due."""
        return max(0.05, KEEPALIVE_SECONDS - (time.monotonic() - self.last))


# -- the project feed -----------------------------------------------------------------------

class ProjectFeed:
    """The runs of one project as this server process sees them, for every subscriber."""

    def __init__(self, app: web.Application, org: str, project: str) -> None:
        self.app, self.org, self.project = app, org, project
        self.subscribers: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        notifier: Notifier = self.app[NOTIFIER]
        seen: dict[str, tuple[Any, ...]] = {}
        watched: set[str] = set()
        live: list[str] = []
        while self.subscribers and not notifier.closing:
            # Events taken before the read, so a notify landing during it still wakes us.
            events = [notifier.work_event(), notifier.graph_event()] + [
                notifier.run_event(r) for r in live]
            newly_watched = False
            try:
                async with connection(self.app[POOL]) as conn:
                    rows = await engine.list_runs_page(conn, self.org, self.project,
                                                       limit=FEED_PAGE)
                    live = [r.id for r in rows if not r.finished]
                    for run_id in live:
                        if run_id not in watched:  # from now on its changes NOTIFY
                            await engine.watch_run(conn, run_id)
                            watched.add(run_id)
                            newly_watched = True
            except Exception:  # noqa: BLE001 - the backstop tries again
                rows = None
            if rows is not None:
                now = {r.id: (r.status, r.substate, r.attempt, r.children) for r in rows}
                changed = [i for i, sig in now.items() if seen.get(i) != sig]
                if changed or len(now) != len(seen):
                    for q in list(self.subscribers):
                        q.put_nowait({"ids": changed})
                seen = now
            if not newly_watched:  # else read again at once, now listening for those too
                await wait_any(events, FEED_BACKSTOP_SECONDS)
            await asyncio.sleep(FEED_COALESCE_SECONDS)
        for q in list(self.subscribers):
            q.put_nowait(None)


FEEDS = web.AppKey("project_feeds", dict)


def _subscribe(app: web.Application, org: str, project: str
               ) -> tuple[ProjectFeed, asyncio.Queue[dict[str, Any] | None]]:
    feeds: dict[tuple[str, str], ProjectFeed] = app[FEEDS]
    feed = feeds.get((org, project))
    if feed is None or feed.task is None or feed.task.done():
        feed = feeds[(org, project)] = ProjectFeed(app, org, project)
    q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    feed.subscribers.add(q)
    if feed.task is None:
        feed.task = asyncio.create_task(feed.run())
    return feed, q


async def project_stream(request: web.Request) -> web.StreamResponse:
    await require_user(request)
    org, project = project_of(request)
    feed, q = _subscribe(request.app, org, project)
    sse = SSE()
    try:
        await sse.open(request)
        await sse.send("hello", {"org": org, "project": project})
        while True:
            try:
                item = await asyncio.wait_for(q.get(), sse.quiet_for())
            except TimeoutError:
                await sse.keepalive()
                continue
            if item is None:
                break
            await sse.send("changed", item)
        await sse.resp.write_eof()
    except ConnectionError:
        pass  # the browser went away (see SSE)
    finally:
        feed.subscribers.discard(q)
    return sse.resp


# -- one run --------------------------------------------------------------------------------

async def run_stream(request: web.Request) -> web.StreamResponse:
    """`tail=BYTES` (default 256 KiB): how much of the stored log comes first; then every
    new chunk, a `changed` event when the run's status or checkpoints move, and `end`
    once it has finished and its log is drained."""
    run = await own_run(request)
    tail = query_int(request, "tail", 256 << 10)
    if tail < 0 or tail > TAIL_MAX_BYTES:
        raise InvalidArgument(f"tail must be between 0 and {TAIL_MAX_BYTES} bytes")
    sealer = await request.app[KEYS].sealer(run.org)
    async with connection(request.app[POOL]) as conn:
        if not run.finished:
            await engine.watch_run(conn, run.id)
        start = await engine.log_tail_start(conn, run.id, tail)
    # A log moved to the object store comes from there (a 503 if it is down), streamed
    # through the same tail window: whole chunks, newest last, never more than `tail` held.
    moved: list[tuple[int, bytes]] = []
    opened = await open_moved(request.app, run.id, sealer, 0)
    if opened is not None:
        window: deque[tuple[int, bytes]] = deque()
        total = size = 0
        async for cid, data in opened.chunks():
            window.append((cid, data))
            total += len(data)
            size += len(data)
            while window and size > tail:
                size -= len(window.popleft()[1])
        start = engine.LogTail(max(start.after_id, opened.last_chunk_id), total - size, total)
        moved = list(window)
    sse = SSE()
    try:
        await sse.open(request)
        await _follow_run(request.app, sse, sealer, run, start, moved)
        await sse.resp.write_eof()
    except ConnectionError:
        pass  # the browser went away (see SSE)
    return sse.resp


async def _follow_run(app: web.Application, sse: SSE, sealer: Sealer, run: engine.Run,
                      start: engine.LogTail, moved: list[tuple[int, bytes]]) -> None:
    pool, notifier = app[POOL], app[NOTIFIER]
    # The baseline is taken before `hello`, on which the page reads the run again: a
    # change before it is in that read, one after it differs from it and is sent.
    async with connection(pool) as conn:
        last_sig: tuple[Any, ...] = (await _run_sig(conn, run.id))[1]
    await sse.send("hello", {"run": run.id, "status": run.status, "finished": run.finished})
    await sse.send("tail", {"skipped_bytes": start.skipped_bytes,
                            "total_bytes": start.total_bytes})
    for cid, data in moved:
        await sse.send("log", {"id": cid, "text": data.decode("utf-8", errors="replace")})
    after, drained_after_end, failures = start.after_id, False, 0
    while not notifier.closing:
        woken = notifier.run_event(run.id)
        try:
            async with connection(pool) as conn:
                chunks = await engine.read_logs(conn, run.id, after)
            if not chunks:
                async with connection(pool) as conn:
                    now, sig = await _run_sig(conn, run.id)
        except DatabaseUnavailable:
            failures += 1
            await asyncio.sleep(RETRY_SECONDS[min(failures, len(RETRY_SECONDS)) - 1])
            await sse.keepalive()
            continue
        failures = 0
        for chunk in chunks:
            text = sealer.open(chunk.data).decode("utf-8", errors="replace")
            at = chunk.created_at.isoformat() if chunk.created_at else None
            await sse.send("log", {"id": chunk.id, "text": text, "at": at})
            after = chunk.id
        if chunks:
            continue  # drain before deciding anything
        if sig != last_sig:
            await sse.send("changed", {"status": now.status, "substate": now.substate})
            last_sig = sig
        if now.finished:
            if drained_after_end:
                # `final`: nothing of this run changes any more; the page stops listening.
                await sse.send("end", {"status": now.status, "final": True})
                break
            drained_after_end = True  # once more, for bytes written before the end
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), sse.quiet_for())
        await sse.keepalive()


async def _run_sig(conn: Any, run_id: str) -> tuple[engine.Run, tuple[Any, ...]]:
    """The run now, and what of it the page shows: a change in this is sent."""
    now = await engine.get_run(conn, run_id)
    marks = await engine.read_checkpoints(conn, run_id)
    # A graph's turns move its nodes while the run stays `running-nodes`.
    nodes = (tuple((n.node_id, n.item, n.status, n.item_status)
                   for n in await engine.read_graph_nodes(conn, run_id))
             if now.kind == "graph" else ())
    return now, (now.status, now.substate, now.attempt, len(marks),
                 sum(1 for m in marks if m.status == "pending"), nodes)


async def _feeds_ctx(app: web.Application):  # type: ignore[no-untyped-def]
    app[FEEDS] = {}
    yield
    for feed in app[FEEDS].values():
        if feed.task is not None:
            feed.task.cancel()


def add_routes(app: web.Application) -> None:
    app.cleanup_ctx.append(_feeds_ctx)
    app.router.add_get(f"{PROJECT_ROUTE}/stream", project_stream)
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/stream", run_stream)
