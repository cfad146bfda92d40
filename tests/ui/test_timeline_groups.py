"""A run with 1,060 history rows: the timeline folds them by pass (a graph's by node),
the newest open, so the page stays a few screens tall (it was 62,690 px)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import login_url


def _history(n: int = 1060) -> list[dict]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        at = (t0 + timedelta(seconds=i)).isoformat()
        if i and i % 100 == 0:
            out.append({"kind": "timer_fired", "at": at})
        else:
            out.append({"kind": "step_completed", "at": at, "family": "step", "name": f"s{i}"})
    return out


def test_a_long_timeline_folds_by_pass(split: Split, page: Page) -> None:
    run_id = submit(split, script(split.dir, "long.sh", "#!/usr/bin/env bash\necho hi\n"))
    history = _history()

    def long_history(route: Route) -> None:
        real = route.fetch()
        route.fulfill(response=real, json={**real.json(), "history": history, "attempt": 11})

    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.route(f"**/runs/{run_id.replace(':', '%3A')}", long_history)
    page.goto(f"{split.url}/#/run/{run_id}")
    groups = page.locator("#timeline > li.tl-group")
    expect(groups).to_have_count(11)
    expect(groups.first.locator("summary")).to_have_text("pass 1 · 100 events")
    assert page.locator("#timeline > li.tl-group > details[open]").count() == 1
    assert groups.last.locator("details").get_attribute("open") is not None
    expect(groups.last).to_contain_text("pass 11 begins, woken by its timer")
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 8000, height
    page.unroute_all(behavior="ignoreErrors")
