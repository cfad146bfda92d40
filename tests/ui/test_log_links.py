"""A link on each log line opens the run at that line, highlighted: a line of the live
window, and one far back in a 50 MB log, which the whole-log viewer reads the ranges
around (run/logpages.js)."""

from __future__ import annotations

import re
from urllib.parse import quote

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.ui.conftest import login_url
from tests.ui.test_log_viewer import MB_CHUNKS, _fifty_mb_run


def _open(page: Page, split: Split, href: str) -> None:
    page.goto(f"{split.url}/#/runs")  # away first, so the link is a fresh navigation
    expect(page.locator("#runs-body")).to_be_visible()
    page.goto(f"{split.url}/{href}")


def test_log_line_links_open_the_run_at_that_line(split: Split, page: Page) -> None:
    run_id = _fifty_mb_run(split)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#log")).to_contain_text(f"chunk {MB_CHUNKS - 1} end", timeout=20_000)
    shape = re.compile(r"^#/run/" + re.escape(quote(run_id, safe="")) + r"\?line=\d+\.\d+$")
    # The live window: the last line's link (the one before the last line's text).
    last = page.evaluate("""() => {
        const links = [...document.querySelectorAll('#log a.ln')];
        return links[links.length - 1].getAttribute('href');
    }""")
    assert shape.match(last), last
    page.locator("#log a.ln").last.click()
    current = page.locator("#log-pages .log-row.current")
    expect(current).to_have_text(f"chunk {MB_CHUNKS - 1} end", timeout=20_000)

    # A line far back: the first line of the log, and one in the middle found by search.
    page.goto(f"{split.url}/#/run/{run_id}")
    page.click("#log-start")
    first = page.locator("#log-pages .log-row").first
    expect(first).to_have_text("the very first line", timeout=20_000)
    href_first = first.locator("a.ln").get_attribute("href") or ""
    assert shape.match(href_first), href_first
    page.fill("#log-find", "chunk 12 end")
    expect(current).to_have_text("chunk 12 end", timeout=20_000)
    href_mid = current.locator("a.ln").get_attribute("href") or ""
    assert shape.match(href_mid) and href_mid != href_first, href_mid

    for href, text in ((href_mid, "chunk 12 end"), (href_first, "the very first line")):
        _open(page, split, href)
        expect(current).to_have_text(text, timeout=20_000)
        expect(page.locator("#log-live")).to_be_visible()  # back to live output from there
        assert current.is_visible()  # scrolled to, in the middle of the box
    assert page.errors == []  # type: ignore[attr-defined]
