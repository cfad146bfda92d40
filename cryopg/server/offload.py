"""CPU-bound work of a request, run in worker processes so the event loop never waits.

Reading a YAML pipeline or a graph document, checking JSON Schemas and compiling
expressions, and parsing a request body of many values are pure Python; in a thread
they would still hold the GIL the loop needs (a 10 KiB YAML file nested 5,000 deep
kept `/api/v1/health` waiting for seconds). So they run in a small process pool,
shared by every app in the process. A call waits (on the loop, for free) until a
worker is idle, then runs within a time bound: one that overruns is answered 400 and
the workers are killed (the pool is replaced; a call that was running beside it is
run again once), so a hostile input costs a worker at most `timeout` seconds. Cheap
checks of size and nesting still come first (in the functions run here), so most
hostile inputs are refused in milliseconds.

Workers start from a forkserver, which imports the main module as multiprocessing
does: a program embedding the app needs the usual `if __name__ == "__main__":` guard
(the `cryopg` console script has it).

Workers are forked from a forkserver that imports the compilers once; each is held
to WORKER_MEMORY of address space. Beyond MAX_IN_FLIGHT calls at once the server
answers 503 rather than queueing without bound.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import weakref
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
# One slot per worker, per event loop (tests run several loops in one process), so a
# call's time bound starts when it runs, not while it queues.
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary())


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
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.kill()
    # Not cancel_futures: a call queued on it must fail as BrokenProcessPool (run again
    # below), not as a cancellation, which would read as the request's own.
    pool.shutdown(wait=False)


async def run(fn: Callable[..., T], *args: Any, timeout: float, what: str) -> T:
    """fn(*args) in a worker process: its result, or the exception it raised (which must
    pickle: the ValueError subclasses of the compilers do). `what` names the work in
    the 400 of a call that overran."""
    global _in_flight
    if _in_flight >= MAX_IN_FLIGHT:
        raise Busy(f"the server is busy checking {MAX_IN_FLIGHT} other requests; retry")
    _in_flight += 1
    slots = _slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(WORKERS))
    try:
        async with slots:
            return await _run(fn, args, timeout, what)
    finally:
        _in_flight -= 1


async def _run(fn: Callable[..., T], args: tuple[Any, ...], timeout: float, what: str) -> T:
    for attempt in (1, 2):  # once more on a fresh pool when a worker died under it
        pool = _executor()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(pool.submit(fn, *args)), timeout)
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
