"""The runs list an operator expects: columns sorted by the server (a click on a header;
the order holds across pages), several runs re-run at once (Members; a Viewer gets no
checkboxes and the server refuses anyway), and every time in UTC or local time, as the
header's switch says (remembered)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import finished, http, script, submit, token, wait_for
from tests.ui.conftest import _page, login_url

API = "/api/v1/orgs/dev/projects/default"


def _ids(page: Page) -> list[str]:
    return page.locator("#runs-body tr[data-run]").evaluate_all(
        "rows => rows.map(r => r.dataset.run)")


def _expect_ids(page: Page, want: list[str]) -> None:
    """The list's rows, once it shows them (a live update may be redrawing it)."""
    wait_for(f"rows {want}", lambda: _ids(page) == want, timeout=20)


@pytest.fixture
def viewer_page(browser: Browser) -> Iterator[Page]:
    """A second browser, signed in as a Viewer (its own session)."""
    yield from _page(browser)


def test_runs_sort_by_column_across_pages_and_rerun_several(split: Split, page: Page,
                                                           viewer_page: Page) -> None:
    split.agent("sort-agent")
    # Submitted mid, last, first: newest first is first, last, mid; by workflow a, b, c.
    mid = submit(split, script(split.dir, "srt-b.sh", "#!/usr/bin/env bash\necho b\n"))
    last = submit(split, script(split.dir, "srt-c.sh", "#!/usr/bin/env bash\nexit 3\n"))
    first = submit(split, script(split.dir, "srt-a.sh", "#!/usr/bin/env bash\necho a\n"))
    for rid in (mid, last, first):
        finished(split, rid)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/runs?match=srt-")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(3)
    _expect_ids(page, [first, last, mid])
    head = page.locator("#runs th", has=page.locator("#sort-workflow"))
    expect(head).to_have_attribute("aria-sort", "none")
    page.click("#sort-workflow")
    expect(page.locator("#sort-workflow")).to_have_text("Workflow ▲")
    assert "sort=workflow" in page.url
    expect(head).to_have_attribute("aria-sort", "ascending")
    _expect_ids(page, [first, mid, last])
    page.click("#sort-workflow")
    expect(page.locator("#sort-workflow")).to_have_text("Workflow ▼")
    _expect_ids(page, [last, mid, first])
    page.click("#sort-status")  # failed before succeeded; then by id
    expect(page.locator("#sort-status")).to_have_text("Status ▲")
    wait_for("the failed run first", lambda: _ids(page)[:1] == [last], timeout=20)
    page.click("#sort-ended")  # a time: the latest end first
    expect(page.locator("#sort-ended")).to_have_text("Ended ▼")
    by_end = sorted((first, mid, last), key=lambda r: finished(split, r)["finished_at"],
                    reverse=True)
    _expect_ids(page, by_end)

    # Server-side: pages of two keep the order, for either direction and the plain list.
    for order, want in (("workflow", [first, mid, last]), ("-workflow", [last, mid, first])):
        got: list[str] = []
        before = ""
        while True:
            status, body = http(f"{split.url}{API}/runs?match=srt-&sort={order}&limit=2{before}",
                                split.user_token)
            assert status == 200, body
            got += [r["id"] for r in body["runs"]]
            if not body["next"]:
                break
            before = f"&before={body['next']}"
        assert got == want, order
    status, body = http(f"{split.url}{API}/runs?top=1&sort=-started&limit=200", split.user_token)
    starts = [r["started_at"] or r["created_at"] for r in body["runs"]]
    assert status == 200 and starts == sorted(starts, reverse=True)
    status, body = http(f"{split.url}{API}/runs?top=1&sort=colour", split.user_token)
    assert status == 400 and "sort must be one of" in body["error"]["message"]

    # Re-run two finished runs at once; the new runs are linked and listed.
    page.goto(f"{split.url}/#/runs?match=srt-")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(3)
    for rid in (first, last):
        page.locator(f'tr[data-run="{rid}"] input.pick').check()
    expect(page.locator("#rerun-selected")).to_have_text("Re-run selected (2)")
    expect(page.locator("#cancel-selected")).to_be_disabled()  # neither is live
    page.click("#rerun-selected")
    expect(page.locator("#bulk-msg")).to_contain_text("started 2 of 2")
    expect(page.locator("#bulk-msg a.chip")).to_have_count(2)
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(5)
    new = page.locator("#bulk-msg a.chip").evaluate_all(
        "as => as.map(a => decodeURIComponent(a.getAttribute('href').slice(6)))")
    for rid in new:
        status, run = http(f"{split.url}{API}/runs/{rid}", split.user_token)
        assert status == 200 and run["filename"] in ("srt-a.sh", "srt-c.sh"), run
        assert any(h["kind"] == "rerun_of" for h in run["history"]), run

    # A Viewer: no checkboxes, no bulk buttons, and the server refuses a re-run.
    viewer = token(split.dsn, "user", member="vera", role="viewer")
    page = viewer_page
    page.goto(login_url(split, viewer))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/runs?match=srt-&sort=workflow")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(5)
    assert page.locator("input.pick").count() == 0
    assert page.locator("#rerun-selected").count() == 0
    status, _ = http(f"{split.url}{API}/runs/{first}/run-again", viewer, "POST", {})
    assert status == 403
    assert page.errors == []  # type: ignore[attr-defined]


@pytest.fixture
def kolkata(browser: Browser) -> Iterator[Page]:
    """A browser whose local time is UTC+5:30, so local and UTC never read the same."""
    yield from _page(browser, timezone_id="Asia/Kolkata")


def test_time_zone_switch_applies_to_every_time_and_is_remembered(split: Split,
                                                                   kolkata: Page) -> None:
    page = kolkata
    split.agent("tz-agent")
    rid = submit(split, script(split.dir, "tz.sh", "#!/usr/bin/env bash\necho hello\n"))
    run = finished(split, rid)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    switch = page.locator("#tz-switch")
    expect(switch).to_have_text("times: local")
    abs_of = f'tr[data-run="{rid}"] time .abs'
    local = page.locator(abs_of).first.text_content() or ""
    assert "UTC" not in local
    switch.click()
    expect(switch).to_have_text("times: UTC")
    expect(page.locator(abs_of).first).to_contain_text("UTC")
    started = run["started_at"]  # e.g. 2026-05-01T10:00:00.123+00:00
    expect(page.locator(abs_of).first).to_have_text(started[:10] + " " + started[11:19] + " UTC")
    # The title has the other zone; the run page's times and the log's clock follow too.
    title = page.locator(f'tr[data-run="{rid}"] time').first.get_attribute("title") or ""
    assert "UTC" not in title, title
    page.goto(f"{split.url}/#/run/{rid}")
    expect(page.locator("main time .abs").first).to_contain_text("UTC")
    page.reload()  # remembered
    expect(page.locator("#tz-switch")).to_have_text("times: UTC")
    expect(page.locator("main time .abs").first).to_contain_text("UTC")
    page.locator("#log-ts").check()
    stamp = page.locator("#log .ts").first
    expect(stamp).not_to_have_attribute("data-t", "")
    utc_clock = stamp.get_attribute("data-t") or ""
    page.click("#tz-switch")
    expect(page.locator("#tz-switch")).to_have_text("times: local")
    expect(page.locator("main time .abs").first).not_to_contain_text("UTC")
    page.locator("#log-ts").check()
    local_clock = page.locator("#log .ts").first.get_attribute("data-t") or ""
    # Kolkata is 5 h 30 min ahead: the minutes differ by 30, the milliseconds agree.
    assert local_clock[-6:] == utc_clock[-6:] and local_clock[3:5] != utc_clock[3:5], (
        local_clock, utc_clock)
    assert page.errors == []  # type: ignore[attr-defined]
