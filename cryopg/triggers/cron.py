"""When a schedule fires next. SQL cannot read cron, so the server computes next fire
times here (with cronsim) and hands them to cryo.fire_schedule / create_schedule.

Times are computed in the schedule's time zone (so `0 9 * * *` in Europe/Paris is 09:00
there, summer and winter) and stored as timestamps. After downtime the next tick is the
first one after now: the ticks missed meanwhile were one due row, fired as one run.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

from cronsim import CronSim, CronSimError

from cryopg.graphs.document import GraphError, seconds


class ScheduleError(ValueError):
    """A cron expression, time zone or interval that cannot be used, said in one line."""


def zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {name!r} (use an IANA name such as "
                            "Europe/Paris or UTC)") from None


def check_cron(expr: str, timezone: str = "UTC") -> None:
    next_after(expr, timezone, None, dt.datetime.now(dt.UTC))


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
