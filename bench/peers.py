"""Peer queues on the bench cluster: procrastinate and pgqueuer, defer -> process.

Runs in bench/.venv-peers (they come from PyPI, apart from the project's own venv).
Usage: peers.py {procrastinate|pgqueuer|pgqueuer-fast} DSN WORKERS JOBS
       peers.py latency {procrastinate|pgqueuer} DSN SAMPLES (enqueue -> start)
  -> one JSON line on stdout.

Each peer gets its own database with its own schema. The jobs are deferred up front
with the peer's own batch enqueue; then the workers start together and process no-op
jobs. procrastinate and pgqueuer: WORKERS processes, each one worker of the peer with
its default settings and its own connections (psycopg). pgqueuer-fast: the
configuration pgqueuer's own benchmark (tools/benchmark.py) uses, WORKERS queue
managers in one process, each on its own asyncpg connection, dequeuing in batches of
10 with its buffered completion log. The clock runs from the start signal until the
peer's table shows no job left unfinished (its completion committed), polled every few
milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import sys
import time

import psycopg


def log(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


# -- procrastinate -------------------------------------------------------------------------

def _procrastinate_app(dsn: str):  # type: ignore[no-untyped-def]
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1,
                                                                     max_size=2))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app, noop


async def _procrastinate_setup(dsn: str, jobs: int) -> None:
    app, noop = _procrastinate_app(dsn)
    async with app.open_async():
        with psycopg.connect(dsn, autocommit=True) as conn:
            installed = conn.execute(
                "SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[0]
            if installed:
                conn.execute("DELETE FROM procrastinate_jobs")
        if not installed:
            await app.schema_manager.apply_schema_async()
        for start in range(0, jobs, 5000):
            await noop.batch_defer_async(*[{} for _ in range(min(5000, jobs - start))])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE procrastinate_jobs")


def _procrastinate_worker(dsn: str, ready, go) -> None:  # type: ignore[no-untyped-def]
    async def run() -> None:
        app, _ = _procrastinate_app(dsn)
        async with app.open_async():
            ready.wait()
            go.wait()
            await app.run_worker_async(wait=False, concurrency=1, install_signal_handlers=False)

    import logging

    logging.disable(logging.CRITICAL)
    asyncio.run(run())


PROCRASTINATE_LEFT = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"


# -- pgqueuer ------------------------------------------------------------------------------

async def _pgqueuer_setup(dsn: str, jobs: int) -> None:
    from pgqueuer import PsycopgDriver, Queries

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with conn:
        queries = Queries(PsycopgDriver(conn))
        if not await queries.schema_is_installed():
            await queries.install()
        await conn.execute("DELETE FROM pgqueuer")
        for start in range(0, jobs, 5000):
            n = min(5000, jobs - start)
            await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
        await conn.execute("ANALYZE pgqueuer")


def _pgqueuer_worker(dsn: str, ready, go) -> None:  # type: ignore[no-untyped-def]
    async def run() -> None:
        from pgqueuer import PsycopgDriver, Queries, QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint("noop")
        async def noop(job) -> None:  # type: ignore[no-untyped-def]
            return None

        ready.wait()
        go.wait()
        await qm.run(mode=QueueExecutionMode.drain)

    import logging

    logging.disable(logging.CRITICAL)
    asyncio.run(run())


PGQUEUER_LEFT = "SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')"


def _pgqueuer_fast_workers(workers: int, dsn: str, ready, go) -> None:  # type: ignore[no-untyped-def]
    async def one(qm) -> None:  # type: ignore[no-untyped-def]
        from pgqueuer.domain.types import QueueExecutionMode

        @qm.entrypoint("noop")
        async def noop(job) -> None:  # type: ignore[no-untyped-def]
            return None

        await qm.run(batch_size=10, mode=QueueExecutionMode.drain)

    async def run() -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries, QueueManager

        # asyncpg takes no libpq key=value string: the same settings as keywords.
        from psycopg.conninfo import conninfo_to_dict

        kw = conninfo_to_dict(dsn)
        kw["database"] = kw.pop("dbname")
        kw["port"] = int(kw["port"]) if "port" in kw else None
        qms = [QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(**kw))))
               for _ in range(workers)]
        ready.wait()
        go.wait()
        await asyncio.gather(*(one(qm) for qm in qms))

    import logging

    logging.disable(logging.CRITICAL)
    asyncio.run(run())


# -- the common harness --------------------------------------------------------------------

# peer -> (setup, worker, left query, one process for all workers)
PEERS = {
    "procrastinate": (_procrastinate_setup, _procrastinate_worker, PROCRASTINATE_LEFT, False),
    "pgqueuer": (_pgqueuer_setup, _pgqueuer_worker, PGQUEUER_LEFT, False),
    "pgqueuer-fast": (_pgqueuer_setup, _pgqueuer_fast_workers, PGQUEUER_LEFT, True),
}


def measure(peer: str, dsn: str, workers: int, jobs: int, timeout: float) -> dict[str, object]:
    setup, worker, left_sql, one_process = PEERS[peer]
    asyncio.run(setup(dsn, jobs))
    ctx = mp.get_context("spawn")
    nprocs = 1 if one_process else workers
    ready = ctx.Barrier(nprocs + 1)
    go = ctx.Event()
    args = (workers, dsn, ready, go) if one_process else (dsn, ready, go)
    procs = [ctx.Process(target=worker, args=args, daemon=True) for _ in range(nprocs)]
    for p in procs:
        p.start()
    ready.wait(timeout=120)
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.monotonic()
        go.set()
        left = jobs
        while time.monotonic() - t0 < timeout:
            left = conn.execute(left_sql).fetchone()[0]
            if left == 0 or not any(p.is_alive() for p in procs):
                break
            time.sleep(0.005)
        elapsed = time.monotonic() - t0
        done = jobs - left
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
            p.join()
    return {"peer": peer, "workers": workers, "jobs": done, "seconds": elapsed,
            "rate": done / elapsed if elapsed > 0 else 0.0, "complete": left == 0}


# -- enqueue -> start latency -----------------------------------------------------------
# One idle worker of the peer in its own process, woken through the peer's LISTEN/NOTIFY
# path; an enqueue through the peer's own API every ~10 ms from this process; the clock
# (CLOCK_MONOTONIC, shared by both processes) stops when the job's function starts, as
# cryopg's stops when its claimer holds the claim (bench/driver.py, _latency). One job
# is run first and not counted: both peers set up lazily on their first job.

def _procrastinate_latency_worker(dsn: str, ready, seen) -> None:  # type: ignore[no-untyped-def]
    import logging

    import procrastinate

    logging.disable(logging.CRITICAL)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1,
                                                                     max_size=2))

    @app.task(name="mark")
    async def mark(i: int) -> None:
        seen.put((i, time.monotonic()))

    async def run() -> None:
        async with app.open_async():
            ready.wait()
            # listen_notify (the default) wakes the worker on a defer; the polling interval
            # is only its backstop.
            await app.run_worker_async(concurrency=1, wait=True, listen_notify=True,
                                       install_signal_handlers=False)

    asyncio.run(run())


async def _procrastinate_enqueuer(dsn: str):  # type: ignore[no-untyped-def]
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1,
                                                                     max_size=1))

    @app.task(name="mark")
    async def mark(i: int) -> None:
        return None

    await app.open_async()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('procrastinate_jobs') IS NULL").fetchone()[0]:
            await app.schema_manager.apply_schema_async()
        else:
            conn.execute("DELETE FROM procrastinate_jobs")

    async def defer(i: int) -> None:
        await mark.defer_async(i=i)

    return defer, app.close_async


def _pgqueuer_latency_worker(dsn: str, ready, seen) -> None:  # type: ignore[no-untyped-def]
    import logging

    logging.disable(logging.CRITICAL)

    async def run() -> None:
        import asyncpg
        from pgqueuer import AsyncpgDriver, Queries, QueueManager

        qm = QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(**_asyncpg_kw(dsn)))))

        @qm.entrypoint("mark")
        async def mark(job) -> None:  # type: ignore[no-untyped-def]
            seen.put((int(job.payload), time.monotonic()))

        ready.wait()
        # Its LISTEN channel wakes the dequeue on an enqueue; batch 1: no job waits for
        # another to fill a batch.
        await qm.run(batch_size=1)

    asyncio.run(run())


async def _pgqueuer_enqueuer(dsn: str):  # type: ignore[no-untyped-def]
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(**_asyncpg_kw(dsn))
    queries = Queries(AsyncpgDriver(conn))
    if not await queries.schema_is_installed():
        await queries.install()
    await conn.execute("DELETE FROM pgqueuer")

    async def defer(i: int) -> None:
        await queries.enqueue("mark", str(i).encode(), 0)

    return defer, conn.close


def _asyncpg_kw(dsn: str) -> dict[str, object]:
    from psycopg.conninfo import conninfo_to_dict

    kw: dict[str, object] = dict(conninfo_to_dict(dsn))
    kw["database"] = kw.pop("dbname")
    kw["port"] = int(str(kw["port"])) if "port" in kw else None
    return kw


LATENCY = {"procrastinate": (_procrastinate_latency_worker, _procrastinate_enqueuer),
           "pgqueuer": (_pgqueuer_latency_worker, _pgqueuer_enqueuer)}


def latency(peer: str, dsn: str, samples: int) -> dict[str, object]:
    import queue
    import statistics

    worker, enqueuer = LATENCY[peer]

    async def run() -> dict[str, object]:
        defer, close = await enqueuer(dsn)  # installs the schema before the worker starts
        ctx = mp.get_context("spawn")
        ready, seen = ctx.Barrier(2), ctx.Queue()
        proc = ctx.Process(target=worker, args=(dsn, ready, seen), daemon=True)
        proc.start()
        try:
            ready.wait(timeout=120)
            lat: list[float] = []
            submits: list[float] = []
            for i in range(-1, samples):  # -1: the warm-up job
                t0 = time.monotonic()
                await defer(i)
                sent = time.monotonic()
                try:
                    got, at = await asyncio.to_thread(seen.get, True, 30)
                except queue.Empty:
                    raise RuntimeError(f"{peer}: sample {i} did not start within 30 s") from None
                if got != i:
                    raise RuntimeError(f"{peer}: job {got} started, not {i}")
                if i >= 0:
                    lat.append((at - t0) * 1000)
                    submits.append((sent - t0) * 1000)
                await asyncio.sleep(0.01)  # the worker is idle again before the next one
        finally:
            proc.terminate()
            proc.join(10)
            await close()
        lat.sort()
        return {"peer": peer, "p50_ms": statistics.median(lat),
                "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))], "samples": len(lat),
                "submit_p50_ms": statistics.median(submits)}

    return asyncio.run(run())


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("procrastinate", "pgqueuer", "asyncpg")}


def main(argv: list[str]) -> int:
    if argv[:1] == ["versions"]:
        print(json.dumps(versions()))
        return 0
    if argv[:1] == ["latency"]:  # latency PEER DSN SAMPLES
        print(json.dumps(latency(argv[1], argv[2], int(argv[3]))), flush=True)
        return 0
    peer, dsn, workers, jobs = argv[0], argv[1], int(argv[2]), int(argv[3])
    timeout = float(argv[4]) if len(argv) > 4 else 120.0
    print(json.dumps(measure(peer, dsn, workers, jobs, timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
