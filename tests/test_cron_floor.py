"""A cron schedule fires at most once a minute unless the deployment lowers the floor
(cryopg/triggers/cron.py): cronsim reads a seconds field, so `* * * * * *` parses."""

from __future__ import annotations

import pytest

from cryopg.triggers import cron


@pytest.mark.parametrize("expr", ["* * * * * *", "*/30 * * * * *", "0,1 0 * * * *",
                                  "0-5 9 * * * *"])
def test_a_cron_firing_within_a_minute_is_refused(expr: str) -> None:
    with pytest.raises(cron.ScheduleError, match="at most once every 60 s"):
        cron.check_cron(expr, "Europe/Paris")


@pytest.mark.parametrize("expr", ["* * * * *", "0 * * * * *", "0 9 * * 1-5", "0 0 29 2 *"])
def test_once_a_minute_or_less_often_is_taken(expr: str) -> None:
    cron.check_cron(expr, "Europe/Paris")


def test_the_floor_is_the_deployments_to_move(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cron.MIN_SECONDS_ENV, "10")
    cron.check_cron("*/10 * * * * *")
    with pytest.raises(cron.ScheduleError, match="5 s apart"):
        cron.check_cron("*/5 * * * * *")
    monkeypatch.setenv(cron.MIN_SECONDS_ENV, "3600")
    with pytest.raises(cron.ScheduleError, match="60 s apart"):
        cron.check_cron("* * * * *")
