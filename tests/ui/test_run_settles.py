"""A finished run's page settles: once it has loaded, its tab makes no request (the old
page reconnected to the run's stream after the server's own `end` and read the run, its
checkpoints, state, artifacts and, for a graph, the whole log again every 2-3 s)."""

from __future__ import annotations

import time

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for
from tests.ui.conftest import login_url
from tests.ui.perf import record

PIPELINE = """version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: echo built-it
"""
QUIET_SECONDS = 8  # the old page reconnected every ~2 s: three or more times in this
SETTLED_SECONDS = 1.5  # no request for this long: the page's load is over


def _api_requests(page: Page) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if "/api/" in r.url else None)
    return seen


def _settle(page: Page, seen: list[str]) -> None:
    """Waits until the page's load is over: no request for SETTLED_SECONDS. Waits in
    playwright (page.wait_for_timeout), which delivers the page's request events; a
    time.sleep would hold them back until the next call."""
    n, since = -1, time.monotonic()
    deadline = since + 30
    while time.monotonic() < deadline:
        if len(seen) != n:
            n, since = len(seen), time.monotonic()
        elif time.monotonic() - since >= SETTLED_SECONDS:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"the page kept asking: {seen[-10:]}")


def test_a_finished_script_and_graph_run_page_makes_no_request_once_loaded(
        split: Split, page: Page) -> None:
    split.agent("ui-agent")
    plain = submit(split, script(split.dir, "done.sh", "#!/usr/bin/env bash\necho done-line\n"))
    graph = submit(split, script(split.dir, "built.yaml", PIPELINE))
    for run_id in (plain, graph):
        wait_for("the run to finish", lambda r=run_id: show(split, r)["status"] == "succeeded",
                 timeout=60)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    seen = _api_requests(page)
    idle = 0
    for run_id, line in ((plain, "done-line"), (graph, "built-it")):
        page.goto(f"{split.url}/#/run/{run_id}")
        expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=20_000)
        expect(page.locator("#log")).to_contain_text(line, timeout=20_000)
        _settle(page, seen)
        before = len(seen)
        page.wait_for_timeout(QUIET_SECONDS * 1000)  # a restless page asks again in this
        idle += len(seen) - before
        assert seen[before:] == [], seen[before:]
        assert page.locator("#run-connection").is_hidden()
    record(finished_run_idle_requests=idle)
    assert page.errors == []  # type: ignore[attr-defined]
