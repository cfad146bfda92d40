"""Smaller run-page defects: the header's pass agrees with the timeline's, a page whose
stream cannot reach the server says so, a finished run that printed nothing does not say
"No output yet.", and a bad date in the runs list's address names itself instead of
replacing the list with "Error"."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for
from tests.ui.conftest import login_url


def _live(page: Page, split: Split) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)


SLEEPS = "#!/usr/bin/env bash\ncryopg sleep 1s >/dev/null\n"


def _agent_post(split: Split, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(f"{split.url}/api/v1/agent{path}", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {split.agent_token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else {}


def test_pass_in_header_matches_timeline_and_a_silent_run_says_so(split: Split,
                                                                  page: Page) -> None:
    # A run woken from its sleep but not claimed again (no agent takes it): its second
    # pass has not begun, and the header and the timeline both say so.
    run_id = submit(split, script(split.dir, "sleeps.sh", SLEEPS))
    grant = _agent_post(split, "/claim", {"agent_id": "fake", "capabilities": ["shell"],
                                          "wait": 5})
    assert grant["run_id"] == run_id
    _agent_post(split, f"/runs/{run_id}/park", {"claim_token": grant["claim_token"],
                                                 "path": "sleep//0", "ordinal": 0,
                                                 "seconds": 1})
    wait_for("the timer to wake it", lambda: show(split, run_id)["status"] == "pending")
    _live(page, split)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#timeline")).to_contain_text("pass 2 next, woken by its timer")
    expect(page.locator("#run-pass")).to_have_text("1")
    # Once claimed and run to its end, pass 2 began, and the run printed nothing.
    split.agent("ui-agent")
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=30_000)
    expect(page.locator("#timeline")).to_contain_text("pass 2 begins, woken by its timer")
    expect(page.locator("#run-pass")).to_have_text("2")
    expect(page.locator("#log-empty")).to_have_text("The run printed nothing.")


def test_a_run_page_says_when_its_stream_cannot_reach_the_server(split: Split,
                                                                 page: Page) -> None:
    run_id = submit(split, script(split.dir, "waits.sh", "#!/usr/bin/env bash\necho hi\n"))
    _live(page, split)

    def down(route: Route) -> None:
        route.fulfill(status=503, json={"error": {"code": "database_unavailable",
                                                  "message": "database unavailable"}})

    page.route("**/stream?tail=*", down)
    page.goto(f"{split.url}/#/run/{run_id}")
    note = page.locator("#run-connection")
    expect(note).to_be_visible(timeout=10_000)
    expect(note).to_contain_text("Lost the connection to the server")
    page.unroute_all(behavior="ignoreErrors")
    # Once the stream is back the note goes (the retry waits 2 s, then 4 s).
    expect(note).to_be_hidden(timeout=20_000)


def test_a_bad_date_in_the_address_is_named_and_the_list_stays(split: Split,
                                                               page: Page) -> None:
    submit(split, script(split.dir, "one.sh", "#!/usr/bin/env bash\necho hi\n"))
    _live(page, split)
    page.goto(f"{split.url}/#/runs?since=2026-13-45")
    expect(page.locator("#filter-error")).to_contain_text("2026-13-45")
    expect(page.locator("#runs-body tr[data-run]").first).to_be_visible()
    assert page.locator("#page-error").count() == 0
