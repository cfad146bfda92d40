"""The server's part of triggers, in the background: firing due schedule ticks and
sending commit statuses of ended webhook runs.

Every server runs both rounds on its ticker (app.py's ROUNDS, after the engine's
tick); the database decides who does what (claim_schedules and take_status_posts lock
rows with SKIP LOCKED), so any number of servers can share one database. A round's
failure is logged and the next round tries again.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import psycopg
from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError
from cryopg.server import input_checks, metrics, traces
from cryopg.server.app_state import KEYS, POOL
from cryopg.triggers import cron, forge


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z")


async def fire_due_schedules(app: web.Application, conn: Any = None,
                             limit: int = 100) -> list[str]:
    """One scheduler round, in one transaction: every due tick this server claimed
    starts its run (or, for a schedule without a next fire time, gets one). A schedule
    that fell behind fires each tick it missed, up to cron.MAX_LATE_TICKS; more than that
    start one catch-up run. Returns the runs started. Tests pass their own autocommit
    connection (with cryo.fake_now set)."""
    if conn is None:
        async with connection(app[POOL]) as pooled:
            return await fire_due_schedules(app, pooled, limit)
    started: list[str] = []
    async with conn.transaction():
        for s in await engine.claim_schedules(conn, limit):
            try:
                async with conn.transaction():  # a savepoint: one bad schedule stays alone
                    if s.next_fire_at is None:
                        try:
                            nxt = cron.next_after(s.cron, s.timezone, s.every_seconds, s.now)
                        except cron.ScheduleError as exc:
                            print(f"cryopg: schedule {s.org}/{s.project}/{s.name} paused: {exc}",
                                  file=sys.stderr)
                            nxt = None
                        await engine.plan_schedule(conn, s.org, s.project, s.name, nxt)
                        continue
                    started += await _fire_due(app, conn, s)
            except (CryoError, psycopg.Error, cron.ScheduleError) as exc:
                print(f"cryopg: schedule {s.org}/{s.project}/{s.name} did not fire: {exc}",
                      file=sys.stderr)
    return started


async def _fire_due(app: web.Application, conn: Any, s: engine.DueSchedule) -> list[str]:
    """Fires the due ticks of one claimed schedule, oldest first. Each fire_schedule call
    checks that its tick is still the schedule's next one and moves it to the tick after,
    under the row lock claim_schedules took, so no tick starts twice however many servers
    run rounds at once."""
    if s.next_fire_at is None:
        return []
    ticks, after_last, catch_up = cron.due_ticks(s.cron, s.timezone, s.every_seconds,
                                                 s.next_fire_at, s.now)
    sealer = await app[KEYS].sealer(s.org)
    base = sealer.open_json(s.input) if s.input is not None else {}
    started: list[str] = []
    for i, tick in enumerate(ticks):
        nxt = ticks[i + 1] if i + 1 < len(ticks) else after_last
        trigger = {"kind": "schedule", "name": s.name, "scheduled_at": _iso(tick),
                   "catch_up": catch_up}
        value = ({**base, "trigger": trigger} if isinstance(base, dict)
                 else {"input": base, "trigger": trigger})
        # A tick whose input fails the workflow's input_schema records why and fires nothing.
        refused = await input_checks.refusal(conn, s.org, s.project, s.workflow, value)
        run_id = await engine.fire_schedule(conn, s.org, s.project, s.name, scheduled_at=tick,
                                            next_fire_at=nxt, input=sealer.seal_json(value),
                                            scope={"trigger": trigger, "input": value},
                                            refused=refused)
        metrics.count(app, "schedule_ticks",
                      "refused" if refused else "fired" if run_id else "skipped")
        await traces.start_run_trace(conn, run_id, "cryopg schedule", org=s.org,
                                     project=s.project, schedule=s.name)
        if run_id:
            started.append(run_id)
    return started


async def send_statuses(app: web.Application, limit: int = 20) -> int:
    """Sends the commit statuses of webhook runs that ended; returns how many were sent."""
    async with connection(app[POOL]) as conn:
        posts = await engine.take_status_posts(conn, limit)
    sent = 0
    for p in posts:
        url = p.url.replace("{sha}", p.sha or "")
        body = {"state": forge.outcome_state(p.status), "context": f"cryopg/{p.webhook}",
                "description": f"run {p.status}" + (f": {p.error}" if p.error else ""),
                "run_id": p.run_id, "status": p.status, "exit_code": p.exit_code, "sha": p.sha}
        error: str | None = None
        try:
            await forge.post_status(url, body)
            sent += 1
        except forge.Refused as exc:
            error = str(exc)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            error = f"status URL failed: {type(exc).__name__}: {exc}".strip()
        if error:
            print(f"cryopg: commit status of {p.run_id} not sent: {error}", file=sys.stderr)
        async with connection(app[POOL]) as conn:
            await engine.finish_status_post(conn, p.run_id, error)
    return sent
