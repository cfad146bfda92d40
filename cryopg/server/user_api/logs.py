"""`GET …/runs/{run}/logs[?follow=1&after=ID]`: a run's log, streamed as it is written."""

from __future__ import annotations

import asyncio

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.server.bodies import INT8, query_int
from cryopg.server.state import KEYS, NOTIFIER, POOL
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run


async def logs(request: web.Request) -> web.StreamResponse:
    run = await own_run(request)
    follow = request.query.get("follow") in ("1", "true", "yes")
    after = query_int(request, "after", 0, INT8)
    sealer = await request.app[KEYS].sealer(run.org)
    pool, notifier = request.app[POOL], request.app[NOTIFIER]
    resp = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8",
                                       "X-Cryo-Run": run.id})
    await resp.prepare(request)
    finished = run.finished
    if follow and not finished:
        async with connection(pool) as conn:
            await engine.watch_run(conn, run.id)  # from now on its changes NOTIFY
    while True:
        woken = notifier.run_event(run.id)
        async with connection(pool) as conn:
            chunks = await engine.read_logs(conn, run.id, after)
        for chunk in chunks:
            await resp.write(sealer.open(chunk.data))
            after = chunk.id
        if chunks:
            continue  # drain before deciding anything
        if finished or not follow or notifier.closing:
            break
        async with connection(pool) as conn:
            finished = (await engine.get_run(conn, run.id)).finished
        if not finished:  # when it is, loop once more for the bytes sent before the end
            try:
                await asyncio.wait_for(woken.wait(), 2.0)
            except TimeoutError:
                pass
    await resp.write_eof()
    return resp


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/logs", logs)
