"""`GET …/runs/{run}/logs[?follow=1&after=ID&times=1]`: a run's log, streamed as it is
written (ranges and search, for the web UI's log viewer, are in log_ranges.py). With
`times=1` each chunk is one JSON line `{"id", "at", "text"}`, `at` being when the chunk
was stored (a graph run's: its lines of one job chunk, prefixed; a job's last words carry
no time).

A graph run (a graph or a pipeline) has no log of its own: its log is its node jobs'
logs, each line prefixed with the node it came from, as CI systems prefix a job's lines
(`[build] make: ok`), and one line as each job ends (`[build] failed: exit code 2`).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import GraphJob, Run
from cryopg.logstore.reader import MovedLog, open_moved
from cryopg.seal import Sealer
from cryopg.server.app_state import KEYS, NOTIFIER, POOL
from cryopg.server.bodies import INT8, query_int
from cryopg.server.notifier import wait_any
from cryopg.server.user_api.log_ranges import range_or_find, wants_range
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run

BACKSTOP_SECONDS = 2.0  # a follower reads again this often without a notify
JOB_CHUNKS = 500  # chunks per job per read; a job that filled it is read again at once
# After a graph run ends, how long a follower waits for jobs it cancelled to stop (an
# agent stops one within a log flush or two; a lost agent's waits for its claim to lapse).
CANCEL_GRACE_SECONDS = 5.0


async def logs(request: web.Request) -> web.StreamResponse:
    run = await own_run(request)
    if wants_range(request):
        return await range_or_find(request, run, await request.app[KEYS].sealer(run.org))
    follow = request.query.get("follow") in ("1", "true", "yes")
    after = query_int(request, "after", 0, INT8)
    times = request.query.get("times") in ("1", "true", "yes")
    sealer = await request.app[KEYS].sealer(run.org)
    # A log moved to the object store is streamed from there first (a 503 if it is down),
    # then whatever chunks of it the database still holds.
    moved = None if run.kind == "graph" else await open_moved(request.app, run.id, sealer,
                                                              after)
    ctype = "application/x-ndjson" if times else "text/plain; charset=utf-8"
    resp = web.StreamResponse(headers={"Content-Type": ctype,
                                       "X-Cryo-Run": run.id})
    await resp.prepare(request)
    if run.kind == "graph":
        await _graph_log(request, resp, sealer, run, follow, after, times)
    else:
        moved_to = after
        if moved is not None:  # a moved chunk keeps no time of its own
            async for cid, data in moved.chunks():
                await resp.write(_timed(cid, None, data) if times else data)
            moved_to = moved.last_chunk_id
        await _run_log(request, resp, sealer, run, follow, moved_to, times)
    await resp.write_eof()
    return resp


async def _run_log(request: web.Request, resp: web.StreamResponse, sealer: Sealer, run: Run,
                   follow: bool, after: int, times: bool = False) -> None:
    pool, notifier = request.app[POOL], request.app[NOTIFIER]
    finished = run.finished
    if follow and not finished:
        async with connection(pool) as conn:
            await engine.watch_run(conn, run.id)  # from now on its changes NOTIFY
    while True:
        woken = notifier.run_event(run.id)
        async with connection(pool) as conn:
            chunks = await engine.read_logs(conn, run.id, after)
        for chunk in chunks:
            data = sealer.open(chunk.data)
            if times:
                data = _timed(chunk.id, chunk.created_at, data)
            await resp.write(data)
            after = chunk.id
        if chunks:
            continue  # drain before deciding anything
        if finished or not follow or notifier.closing:
            break
        async with connection(pool) as conn:
            finished = (await engine.get_run(conn, run.id)).finished
        if not finished:  # when it is, loop once more for the bytes sent before the end
            try:
                await asyncio.wait_for(woken.wait(), BACKSTOP_SECONDS)
            except TimeoutError:
                pass


def _timed(chunk_id: int, at: datetime | None, data: bytes) -> bytes:
    """One chunk as a `times=1` line."""
    return json.dumps({"id": chunk_id, "at": at.isoformat() if at else None,
                       "text": data.decode("utf-8", errors="replace")}).encode() + b"\n"


class _JobLines:
    """One job's bytes as prefixed lines: a line is written once it is complete, and
    what is left of it when the job ends."""

    def __init__(self, job: GraphJob) -> None:
        self.prefix = f"[{job.label}] ".encode()
        self.partial = b""
        self.started = False
        self.attempt = job.attempt

    def header(self) -> bytes:
        """A retry's first line says which attempt follows."""
        if self.started:
            return b""
        self.started = True
        return self.prefix + f"attempt {self.attempt}\n".encode() if self.attempt > 1 else b""

    def feed(self, data: bytes) -> bytes:
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return b"".join(self.prefix + ln.removesuffix(b"\r") + b"\n" for ln in lines)

    def flush(self) -> bytes:
        rest, self.partial = self.partial, b""
        return self.prefix + rest.removesuffix(b"\r") + b"\n" if rest else b""


def _outcome(job: GraphJob) -> str:
    if job.status == "failed":
        why = job.error or (f"exit code {job.exit_code}" if job.exit_code is not None else "")
        return "failed" + (f": {why.splitlines()[0]}" if why else "")
    return job.status


async def _graph_log(request: web.Request, resp: web.StreamResponse, sealer: Sealer, run: Run,
                     follow: bool, floor: int, times: bool = False) -> None:

    def item(order: float, data: bytes, at: datetime | None = None) -> tuple[float, bytes]:
        return order, (_timed(int(order), at, data) if times and data else data)

    pool, notifier = request.app[POOL], request.app[NOTIFIER]
    lines: dict[str, _JobLines] = {}
    after: dict[str, int] = {}
    done: set[str] = set()  # jobs ended and drained, their outcome written
    watched: set[str] = set()
    checked: set[str] = set()  # ended jobs whose log was looked for in the object store
    ended_at: float | None = None  # when this follower saw the graph run finished
    while True:
        events = [notifier.run_event(run.id)] + [notifier.run_event(j) for j in watched - done]
        async with connection(pool) as conn:
            # The run's status first: once it is seen finished, the jobs read next are all
            # it will ever have.
            if ended_at is None and (run.finished or not follow
                                     or (await engine.get_run(conn, run.id)).finished):
                ended_at = time.monotonic()
            if follow and run.id not in watched:
                await engine.watch_run(conn, run.id)
                watched.add(run.id)
            jobs = [j for j in await engine.graph_jobs(conn, run.id) if j.job_run_id not in done]
            for job in jobs:
                lines.setdefault(job.job_run_id, _JobLines(job))
                if follow and not job.finished and job.job_run_id not in watched:
                    await engine.watch_run(conn, job.job_run_id)  # its log appends NOTIFY
                    watched.add(job.job_run_id)
            chunks = await engine.read_graph_logs(
                conn, run.id, {j.job_run_id: after.get(j.job_run_id, floor) for j in jobs},
                JOB_CHUNKS) if jobs else []
        read: dict[str, int] = {}
        out: list[tuple[float, bytes]] = []  # in chunk order; a job's end after its last chunk
        streams: list[AsyncIterator[tuple[float, bytes]]] = []  # moved logs, merged in
        for job in jobs:  # an ended job's log may have moved to the object store
            if job.finished and job.job_run_id not in checked:
                checked.add(job.job_run_id)
                moved = await open_moved(request.app, job.job_run_id, sealer,
                                         after.get(job.job_run_id, floor))
                if moved is not None:  # its database chunks (read above) predate the move
                    chunks = [c for c in chunks if c.job_run_id != job.job_run_id]
                    streams.append(_moved_lines(moved, lines[job.job_run_id], job, item))
                    after[job.job_run_id] = moved.last_chunk_id
                    done.add(job.job_run_id)  # its end comes at the end of its stream
        for chunk in chunks:
            job_lines = lines[chunk.job_run_id]
            out.append(item(chunk.id, job_lines.header() + job_lines.feed(sealer.open(chunk.data)),
                            chunk.created_at))
            after[chunk.job_run_id] = chunk.id
            read[chunk.job_run_id] = read.get(chunk.job_run_id, 0) + 1
        for job in jobs:  # ended (as read before its log) and drained: its last words
            if (job.finished and job.job_run_id not in done
                    and read.get(job.job_run_id, 0) < JOB_CHUNKS):
                out.append(item(after.get(job.job_run_id, 0) + 0.5,
                                _last_words(lines[job.job_run_id], job)))
                done.add(job.job_run_id)
        out.sort(key=lambda o: o[0])  # stable: jobs with no output in their start order
        await _write_merged(resp, out, streams)
        if any(n >= JOB_CHUNKS for n in read.values()):
            continue  # drain before deciding anything
        left = [j for j in jobs if j.job_run_id not in done]
        if ended_at is not None and (
                not left or not follow or notifier.closing
                or time.monotonic() - ended_at > CANCEL_GRACE_SECONDS):
            tail = b"".join(item(after.get(j.job_run_id, 0), lines[j.job_run_id].flush())[1]
                            for j in left)
            if tail:
                await resp.write(tail)
            return
        if notifier.closing:
            return
        await wait_any(events, BACKSTOP_SECONDS)


def _last_words(job_lines: _JobLines, job: GraphJob) -> bytes:
    return (job_lines.header() + job_lines.flush()
            + job_lines.prefix + _outcome(job).encode() + b"\n")


async def _moved_lines(moved: MovedLog, job_lines: _JobLines, job: GraphJob,
                       item: Callable[[float, bytes], tuple[float, bytes]],
                       ) -> AsyncIterator[tuple[float, bytes]]:
    """A moved job log's lines in chunk order, then its last words, as read (a moved
    chunk keeps no time of its own)."""
    async for cid, data in moved.chunks():
        yield item(cid, job_lines.header() + job_lines.feed(data))
    yield item(moved.last_chunk_id + 0.5, _last_words(job_lines, job))


async def _write_merged(resp: web.StreamResponse, out: list[tuple[float, bytes]],
                        streams: list[AsyncIterator[tuple[float, bytes]]]) -> None:
    """Writes `out` (sorted) and the moved logs' streams merged in chunk order, holding
    one item of each stream at a time."""

    async def listed() -> AsyncIterator[tuple[float, bytes]]:
        for item in out:
            yield item

    sources = [listed(), *streams]
    heap: list[tuple[float, int, bytes]] = []
    for i, src in enumerate(sources):
        if (first := await anext(src, None)) is not None:
            heap.append((first[0], i, first[1]))
    heapq.heapify(heap)
    pending = bytearray()
    while heap:
        _, i, data = heapq.heappop(heap)
        pending += data
        if len(pending) >= 64 << 10:
            await resp.write(bytes(pending))
            pending.clear()
        if (nxt := await anext(sources[i], None)) is not None:
            heapq.heappush(heap, (nxt[0], i, nxt[1]))
    if pending:
        await resp.write(bytes(pending))


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/logs", logs)
