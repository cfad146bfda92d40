"""CPU-bound work of a request, run in worker processes so the event loop never waits.

Reading a YAML pipeline or a graph document, checking JSON Schemas and compiling
expressions, and parsing a request body of many values are pure Python; in a thread
they would still hold the GIL the loop needs (a 10 KiB YAML file nested 5,000 deep
kept `/api/v1/health` waiting for seconds). So they run in a small process pool,
shared by every app in the process, each call within a time bound: a call that
overruns is answered 400 and its worker is killed (the pool is replaced), so a
hostile input costs one worker for at most `timeout` seconds. Cheap checks of size and
nesting still come first (in the functions run here), so most hostile inputs are
refused in milliseconds.

Workers are forked from a forkserver that imports the compilers once; each is held
to WORKER_MEMORY of address space. Beyond MAX_IN_FLIGHT calls at once the server
answers 503 rather than queueing without bound.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from cryopg.errors import CryoError, InvalidArgument

T = TypeVar("T")

WORKERS = max(1, min(2, os.cpu_count() or 1))
MAX_IN_FLIGHT = 64
WORKER_MEMORY = 2 << 30  # bytes of address space a worker may map
PRELOAD = ["cryopg.graphs.document", "cryopg.graphs.schemas", "cryopg.pipelines",
           "cryopg.jsonlimits", "cryopg.server.work"]


class Busy(CryoError):
    """Too many requests waiting for a worker (no SQLSTATE: raised before any SQL)."""

    code, http_status = "busy", 503


_pool: ProcessPoolExecutor | None = None
_in_flight = 0


def _init_worker() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    except (ValueError, OSError):  # a lower hard limit already: keep it
        pass


def _executor() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _pool = ProcessPoolExecutor(WORKERS, mp_context=ctx, initializer=_init_worker)
    return _pool


def _replace(pool: ProcessPoolExecutor) -> None:
    """Kills the pool's workers (a call overran, or one died) and forgets the pool; the
    next call starts a fresh one. ProcessPoolExecutor has no public way to stop a
    running call, hence its process table."""
    global _pool
    if _pool is pool:
        _pool = None
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


async def run(fn: Callable[..., T], *args: Any, timeout: float, what: str) -> T:
    """fn(*args) in a worker process: its result, or the exception it raised (which must
    pickle: the ValueError subclasses of the compilers do). `what` names the work in
    the 400 of a call that overran."""
    global _in_flight
    if _in_flight >= MAX_IN_FLIGHT:
        raise Busy(f"the server is busy checking {MAX_IN_FLIGHT} other requests; retry")
    _in_flight += 1
    try:
        for attempt in (1, 2):  # once more on a fresh pool when a worker died under it
            pool = _executor()
            try:
                return await asyncio.wait_for(
                    asyncio.wrap_future(pool.submit(fn, *args)), timeout)
            except TimeoutError:
                _replace(pool)
                raise InvalidArgument(f"{what} took over {timeout:g} s") from None
            except BrokenProcessPool:
                _replace(pool)
                if attempt == 2:
                    raise InvalidArgument(f"{what} could not finish (its worker died)") from None
            except MemoryError:
                raise InvalidArgument(f"{what} needs more memory than a worker may use") from None
        raise AssertionError("unreachable")
    finally:
        _in_flight -= 1
