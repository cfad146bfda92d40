"""Schedules never skip a tick while servers are up (issue 24 item 1).

A scheduler round that comes late fires every tick it missed, each as its own run, up to
cron.MAX_LATE_TICKS; beyond that bound the schedule was down and one catch-up run stands
for the missed ticks. Time moves with cryo.fake_now; nothing waits for a tick. The first
test holds the SQL contract that makes concurrent rounds safe; the others run the server's
round (cryopg/server/triggers.py) on connections of their own, as servers do.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from aiohttp import web

from cryopg.db import open_pool
from cryopg.seal import MasterKey, generate_master_key, parse_master_key
from cryopg.server import triggers
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.keys import OrgKeys
from cryopg.triggers import cron

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
MINUTE = dt.timedelta(minutes=1)


def _store(db: psycopg.Connection, *, every: float | None = 60, cron_text: str | None = None,
           first: dt.datetime = T0) -> None:
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'nightly', 'n.sh', NULL, '\\x00')")
    db.execute("SELECT cryo.create_schedule('dev', 'default', 's', 'nightly', %s, 'UTC', %s,"
               " NULL, %s)", (cron_text, every, first))


def _at(db: Any, when: dt.datetime) -> None:
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (when.isoformat(),))


def _ticks_run(db: psycopg.Connection) -> list[tuple[str, str]]:
    """(idempotency key, trigger name) of every run a schedule started, oldest first."""
    return db.execute("SELECT idempotency_key, trigger_name FROM cryo.runs"
                      " WHERE trigger_kind = 'schedule' ORDER BY created_at, id").fetchall()


def _key(tick: dt.datetime) -> str:
    return f"schedule:s:{tick.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def test_a_late_round_fires_each_missed_tick_once_under_the_row_lock(session: Any) -> None:
    a, b = session(), session()
    _store(a)
    for conn in (a, b):
        _at(conn, T0 + 2 * MINUTE + dt.timedelta(seconds=30))  # T0, T0+1m, T0+2m are due
    a.execute("BEGIN")
    assert len(a.execute("SELECT * FROM cryo.claim_schedules()").fetchall()) == 1
    ids = [a.execute("SELECT cryo.fire_schedule('dev', 'default', 's', %s, %s, '\\x00', '{}')",
                     (T0 + i * MINUTE, T0 + (i + 1) * MINUTE)).fetchone()[0] for i in range(3)]
    assert all(ids) and len(set(ids)) == 3
    # A second server's round meanwhile finds the schedule held, and skips it.
    assert b.execute("SELECT * FROM cryo.claim_schedules()").fetchall() == []
    a.execute("COMMIT")
    # After the commit nothing is due, and no fired tick fires again.
    assert b.execute("SELECT * FROM cryo.claim_schedules()").fetchall() == []
    for i in range(3):
        again = b.execute("SELECT cryo.fire_schedule('dev', 'default', 's', %s, %s, '\\x00',"
                          " '{}')", (T0 + i * MINUTE, T0 + (i + 1) * MINUTE)).fetchone()[0]
        assert again is None
    assert _ticks_run(a) == [(_key(T0 + i * MINUTE), "s") for i in range(3)]
    assert a.execute("SELECT next_fire_at, last_fire_at FROM cryo.schedules").fetchone() == (
        T0 + 3 * MINUTE, T0 + 2 * MINUTE)


# -- the server's round ---------------------------------------------------------------------

@pytest.fixture
async def app(dsn: str) -> AsyncIterator[web.Application]:
    """What a round reads of a server: its pool and its org keys."""
    pool = await open_pool(dsn, max_size=4)
    application = web.Application()
    application[POOL] = pool
    application[KEYS] = OrgKeys(pool, MasterKey(parse_master_key(generate_master_key())))
    try:
        yield application
    finally:
        await pool.close()


async def _round(app: web.Application, dsn: str, when: dt.datetime) -> list[str]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SELECT set_config('cryo.fake_now', %s, false)", (when.isoformat(),))
        return await triggers.fire_due_schedules(app, conn)


async def _scheduled(app: web.Application, run_ids: list[str]) -> list[tuple[dt.datetime, bool]]:
    """(trigger.scheduled_at, trigger.catch_up) of each run, from its sealed input."""
    sealer = await app[KEYS].sealer("dev")
    got = []
    async with app[POOL].connection() as conn:
        for run_id in run_ids:
            cur = await conn.execute("SELECT input FROM cryo.runs WHERE id = %s", (run_id,))
            trig = sealer.open_json((await cur.fetchone())[0])["trigger"]
            got.append((dt.datetime.fromisoformat(trig["scheduled_at"]), trig["catch_up"]))
    return got


async def test_a_round_three_ticks_late_starts_three_runs(app: web.Application, dsn: str,
                                                          db: psycopg.Connection) -> None:
    _store(db)
    assert await _round(app, dsn, T0 - dt.timedelta(seconds=1)) == []
    late = T0 + 2 * MINUTE + dt.timedelta(seconds=1)
    started = await _round(app, dsn, late)
    assert await _scheduled(app, started) == [(T0 + i * MINUTE, False) for i in range(3)]
    assert await _round(app, dsn, late) == []
    assert db.execute("SELECT next_fire_at FROM cryo.schedules").fetchone() == (T0 + 3 * MINUTE,)
    # One interval late, as a busy server is: both ticks run, none is lost.
    started = await _round(app, dsn, T0 + 4 * MINUTE + dt.timedelta(seconds=5))
    assert await _scheduled(app, started) == [(T0 + 3 * MINUTE, False), (T0 + 4 * MINUTE, False)]
    assert len(_ticks_run(db)) == 5


async def test_concurrent_rounds_fire_each_tick_exactly_once(app: web.Application, dsn: str,
                                                             db: psycopg.Connection) -> None:
    _store(db)
    late = T0 + 2 * MINUTE + dt.timedelta(seconds=1)
    rounds = await asyncio.gather(*(_round(app, dsn, late) for _ in range(4)))
    started = [run for got in rounds for run in got]
    assert len(started) == 3 and sum(1 for got in rounds if got) == 1
    assert sorted(await _scheduled(app, started)) == [(T0 + i * MINUTE, False) for i in range(3)]
    assert [k for k, _ in _ticks_run(db)] == [_key(T0 + i * MINUTE) for i in range(3)]


async def test_up_to_the_bound_every_tick_runs_beyond_it_one_catch_up(
        app: web.Application, dsn: str, db: psycopg.Connection) -> None:
    bound = cron.MAX_LATE_TICKS
    _store(db)
    # Exactly `bound` ticks due: each one runs.
    started = await _round(app, dsn, T0 + (bound - 1) * MINUTE + dt.timedelta(seconds=1))
    assert await _scheduled(app, started) == [(T0 + i * MINUTE, False) for i in range(bound)]
    # Then one more than the bound: downtime, so one catch-up run for the oldest of them,
    # and the schedule resumes at its first tick after now, on phase.
    base = T0 + bound * MINUTE
    started = await _round(app, dsn, base + bound * MINUTE + dt.timedelta(seconds=1))
    assert await _scheduled(app, started) == [(base, True)]
    assert db.execute("SELECT next_fire_at FROM cryo.schedules").fetchone() == (
        base + (bound + 1) * MINUTE,)


async def test_a_cron_schedule_catches_up_its_late_minutes(app: web.Application, dsn: str,
                                                           db: psycopg.Connection) -> None:
    _store(db, every=None, cron_text="* * * * *")
    started = await _round(app, dsn, T0 + 2 * MINUTE + dt.timedelta(seconds=59))
    assert await _scheduled(app, started) == [(T0 + i * MINUTE, False) for i in range(3)]
    assert db.execute("SELECT next_fire_at FROM cryo.schedules").fetchone() == (T0 + 3 * MINUTE,)


def test_due_ticks_counts_the_bound() -> None:
    every = 60.0
    ticks, nxt, caught = cron.due_ticks(None, "UTC", every, T0, T0)
    assert (ticks, nxt, caught) == ([T0], T0 + MINUTE, False)
    ticks, nxt, caught = cron.due_ticks(None, "UTC", every, T0, T0 + 3 * MINUTE, bound=3)
    assert (ticks, nxt, caught) == ([T0], T0 + 4 * MINUTE, True)
    ticks, nxt, caught = cron.due_ticks(None, "UTC", every, T0, T0 + 2 * MINUTE, bound=3)
    assert (ticks, nxt, caught) == ([T0, T0 + MINUTE, T0 + 2 * MINUTE], T0 + 3 * MINUTE, False)
