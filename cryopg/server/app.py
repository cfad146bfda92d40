"""Assemble the aiohttp application: pool, notifier, ticker, keys, routes, errors."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator

import psycopg
import psycopg_pool
from aiohttp import web

from cryopg import engine, tracing
from cryopg.artifacts.service import ARTIFACTS, collect_round, open_artifacts
from cryopg.db import connection, open_pool
from cryopg.errors import CryoError
from cryopg.graphs import driver as graph_driver
from cryopg.logstore import mover as log_mover
from cryopg.logstore.mover import LOG_STORE, LogStore
from cryopg.replica import with_replica
from cryopg.server import agent_api, agents, metrics, openapi, triggers, ui, user_api
from cryopg.server.agent_api.batching import batching_ctx
from cryopg.server.app_state import CONFIG, KEYS, NOTIFIER, POOL, TIMERS
from cryopg.server.auth import AGENT_TOKENS
from cryopg.server.config import ServerConfig
from cryopg.server.keys import OrgKeys
from cryopg.server.limits import MAX_BODY, limits_middleware
from cryopg.server.notifier import Notifier
from cryopg.server.user_api import sign_in

POOL_CLOSE_SECONDS = 1.0


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


@web.middleware
async def errors_middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """Maps the project's exceptions to status + JSON body, and does nothing else (what a
    run's state needs on an error is the route's business: see agent_api/in_run.py)."""
    try:
        return await handler(request)
    except ConnectionResetError:
        # A client that left mid-stream (`cryopg logs --follow | head`, a killed follower,
        # an abandoned download): the next write finds the transport closing. That is
        # how streams end, not a failure; an empty answer lets aiohttp drop the
        # connection quietly instead of logging a traceback.
        if request.transport is not None and not request.transport.is_closing():
            raise
        return web.Response(status=499)
    except CryoError as exc:
        return web.json_response(error_body(exc.code, str(exc)), status=exc.http_status)
    except (psycopg.errors.DataError, psycopg.errors.ProgramLimitExceeded) as exc:
        # A backstop: the routes check what they pass to SQL (bodies.py, limits.py), but
        # a value SQL still finds out of range or too large is the caller's, so a 400.
        kind = "too large" if isinstance(exc, psycopg.errors.ProgramLimitExceeded) else "invalid"
        return web.json_response(error_body(
            "invalid_argument", f"a value is {kind} for the database ({exc.sqlstate})"),
            status=400)
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        # The database is down or restarting: the caller retries (agents back off on
        # 503), and the log gets one line, not a traceback per request.
        print(f"cryopg server: {request.method} {request.path}: database unavailable "
              f"({type(exc).__name__})", file=sys.stderr)
        return web.json_response(error_body("unavailable", "the database is unavailable; "
                                            "retry shortly"), status=503)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return web.json_response(error_body("http", exc.reason), status=exc.status)
        raise


async def _pool_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG]
    app[POOL] = await open_pool(with_replica(cfg.database_url, cfg.replica_id),
                                max_size=cfg.pool_size)
    app[KEYS] = OrgKeys(app[POOL], cfg.master_key)
    yield
    # Its workers may be retrying a database that is down: do not wait on them long.
    await app[POOL].close(timeout=POOL_CLOSE_SECONDS)


async def _notifier_ctx(app: web.Application) -> AsyncIterator[None]:
    app[NOTIFIER] = Notifier(app[CONFIG].database_url,
                             hooks={agents.DRAIN_CHANNEL: agents.drain_hook(app)})
    await app[NOTIFIER].start()
    yield
    await app[NOTIFIER].stop()


async def _log_store_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG]
    app[LOG_STORE] = (LogStore(cfg.log_store, app[POOL], app[KEYS], cfg.replica_id,
                               on_failure=lambda: metrics.count(app, "log_move_failures"))
                      if cfg.log_store is not None else None)
    yield


async def _graph_driver_ctx(app: web.Application) -> AsyncIterator[None]:
    app[TIMERS] = timers = graph_driver.Timers()
    host = graph_driver.Host(app[POOL], app[KEYS], app[NOTIFIER].graph_event, timers,
                             on_turn=lambda seconds, result: metrics.turn(app, seconds, result))
    async with graph_driver.driving(host):
        yield


async def _artifacts_ctx(app: web.Application) -> AsyncIterator[None]:
    app[ARTIFACTS] = arts = await open_artifacts(app[POOL])
    yield
    await arts.store.close()


async def _tick(app: web.Application) -> None:
    async with connection(app[POOL]) as conn:
        await engine.tick(conn)


# What every server does on each tick interval, one after the other: the engine's
# backstop sweep, then the triggers' rounds, the agents' drain marks, the logs' move, the
# artifact collector, the metrics' fold.
ROUNDS = (_tick, triggers.fire_due_schedules, triggers.send_statuses, agents.refresh_drains,
          log_mover.move_logs, collect_round, metrics.fold_round)


async def _tick_forever(app: web.Application, stop: asyncio.Event) -> None:
    interval = app[CONFIG].tick_interval
    while not stop.is_set():
        for round_ in ROUNDS:
            try:
                await round_(app)
            except Exception as exc:  # noqa: BLE001 - the backstop must outlive a bad moment
                name = round_.__name__.lstrip("_")
                print(f"cryopg: {name} failed: {exc}", file=sys.stderr)
            if stop.is_set():
                return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)


async def _ticker_ctx(app: web.Application) -> AsyncIterator[None]:
    # Stopped by an event as well as a cancel: on Python 3.11 a cancel that lands as an
    # inner wait_for completes (the pool's getconn) is lost, and the ticker would then
    # sleep out its interval (an hour in some deployments) before shutdown could finish.
    stop = asyncio.Event()
    task = asyncio.create_task(_tick_forever(app, stop))
    yield
    stop.set()
    task.cancel()
    await asyncio.wait([task], timeout=5)


async def _release_long_polls(app: web.Application) -> None:
    app[NOTIFIER].close_waiters()


async def health(request: web.Request) -> web.Response:
    async with connection(request.app[POOL]) as conn:
        await conn.execute("SELECT 1")
    return web.json_response({"ok": True, "replica": request.app[CONFIG].replica_id})


def build_app(config: ServerConfig) -> web.Application:
    # limits_middleware checks every path, query and body before a handler runs.
    app = web.Application(middlewares=[metrics.request_metrics, errors_middleware,
                                       limits_middleware, ui.ui_headers],
                          client_max_size=MAX_BODY)
    app[CONFIG] = config
    tracing.configure("cryopg-server")  # off unless the OTEL_* variables ask for it
    if config.log_store is not None:
        app.on_shutdown.append(log_mover.stop_moving)  # before the pool closes
    app[AGENT_TOKENS] = {}
    app.cleanup_ctx.extend([_pool_ctx, _log_store_ctx, _notifier_ctx, batching_ctx,
                            _artifacts_ctx, _ticker_ctx, _graph_driver_ctx])
    app.on_shutdown.append(_release_long_polls)
    app.router.add_get("/api/v1/health", health)
    metrics.setup(app)
    openapi.add_routes(app)
    user_api.add_routes(app)
    agent_api.add_routes(app)
    agents.add_routes(app)
    sign_in.add_routes(app)
    ui.add_routes(app)
    return app
