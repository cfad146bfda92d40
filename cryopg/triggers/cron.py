"""When a schedule fires next. SQL cannot read cron, so the server computes next fire
times here (with cronsim) and hands them to cryo.fire_schedule / create_schedule.

Times are computed in the schedule's time zone (so `0 9 * * *` in Europe/Paris is 09:00
there, summer and winter) and stored as timestamps. A round that comes late fires every
tick it missed, up to MAX_LATE_TICKS of them; more missed ticks than that mean downtime,
and they start one catch-up run, after which the next tick is the first one after now.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import zoneinfo

from cronsim import CronSim, CronSimError

from cryopg.graphs.document import GraphError, seconds

# A round fires each missed tick of a schedule as its own run while at most this many
# are due (a slow or busy server, a restart); beyond it the server was down, and the
# ticks start one catch-up run instead of a burst. docs/triggers.md says the same.
MAX_LATE_TICKS = 10
# A cron schedule fires at most once a minute by default (cronsim reads a sixth, seconds
# field, so `* * * * * *` would start a run every second); a deployment that means it
# lowers the floor in CRYOPG_SCHEDULE_MIN_SECONDS. An `every` interval says its period
# outright and keeps its own minimum of 1 second.
MIN_SECONDS_ENV = "CRYOPG_SCHEDULE_MIN_SECONDS"
DEFAULT_MIN_SECONDS = 60.0
GAP_TICKS = 200  # ticks looked at for the shortest gap: more than a minute's or an hour's


class ScheduleError(ValueError):
    """A cron expression, time zone or interval that cannot be used, said in one line."""


def zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {name!r} (use an IANA name such as "
                            "Europe/Paris or UTC)") from None


def min_seconds() -> float:
    """The shortest gap a cron schedule's ticks may have (CRYOPG_SCHEDULE_MIN_SECONDS)."""
    try:
        return max(1.0, float(os.environ.get(MIN_SECONDS_ENV, DEFAULT_MIN_SECONDS)))
    except ValueError:
        return DEFAULT_MIN_SECONDS


def check_cron(expr: str, timezone: str = "UTC") -> None:
    """A cron expression a schedule may take: it parses, fires, and its ticks are at
    least min_seconds() apart (the shortest gap shows within the first GAP_TICKS)."""
    first = next_after(expr, timezone, None, dt.datetime.now(dt.UTC))
    floor = min_seconds()
    ticks = CronSim(expr, first.astimezone(zone(timezone)))
    previous = first
    for tick in itertools.islice(ticks, GAP_TICKS):
        gap = (tick - previous).total_seconds()
        if 0 < gap < floor:
            raise ScheduleError(
                f"cron expression {expr!r} fires {gap:g} s apart; a schedule fires at most "
                f"once every {floor:g} s (set {MIN_SECONDS_ENV} to allow more)")
        previous = tick


def every_seconds(text: str | float) -> float:
    try:
        secs = seconds(text, "--every")
    except GraphError as exc:
        raise ScheduleError(str(exc)) from None
    if secs < 1:
        raise ScheduleError("--every: a schedule's interval must be at least 1 second")
    return secs


def next_after(cron: str | None, timezone: str, every: float | None, after: dt.datetime,
               anchor: dt.datetime | None = None) -> dt.datetime:
    """The first tick strictly after `after`. An interval keeps its phase from `anchor`
    (the tick just fired), so ticks stay every N seconds from the first one."""
    if every is not None:
        if anchor is None:
            return after + dt.timedelta(seconds=every)
        steps = int((after - anchor).total_seconds() // every) + 1
        return anchor + dt.timedelta(seconds=every * steps)
    if cron is None:
        raise ScheduleError("a schedule needs a cron expression or an interval")
    tz = zone(timezone)
    try:
        # cronsim works in whole seconds of the zone's local time.
        it = CronSim(cron, after.astimezone(tz).replace(microsecond=0))
        got = next(it)
        while got <= after:
            got = next(it)
    except CronSimError as exc:
        raise ScheduleError(f"bad cron expression {cron!r}: {exc}") from None
    except StopIteration:
        raise ScheduleError(f"cron expression {cron!r} never fires") from None
    return got.astimezone(dt.UTC)


def due_ticks(cron: str | None, timezone: str, every: float | None, first: dt.datetime,
              now: dt.datetime, bound: int = MAX_LATE_TICKS
              ) -> tuple[list[dt.datetime], dt.datetime, bool]:
    """The ticks a round fires for a schedule whose next tick `first` is due at `now`:
    (ticks, the schedule's next fire time after them, catch_up). Up to `bound` due ticks
    are each fired; more than that make one catch-up run for `first`, and the schedule
    moves on to its first tick after now."""
    ticks = [first]
    while True:
        nxt = next_after(cron, timezone, every, ticks[-1], anchor=first)
        if nxt > now:
            return ticks, nxt, False
        if len(ticks) >= bound:
            return [first], next_after(cron, timezone, every, max(now, first),
                                       anchor=first), True
        ticks.append(nxt)
