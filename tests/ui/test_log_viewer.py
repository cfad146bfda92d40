"""A 50 MB log in the browser: the page holds the tail, jumps to the start, browses
backwards by ranges and searches the whole log on the server, with only the rows on
screen in the page (the old "Load earlier output" fetched 16 MB into the page and froze
the tab for ~20 s)."""

from __future__ import annotations

import base64
import time

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import http, script, show, submit, wait_for
from tests.ui.conftest import agent_post, login_url, shot
from tests.ui.perf import record

MB_CHUNKS = 50


def _fifty_mb_run(split: Split) -> str:
    """A finished run whose log is 50 chunks of 1 MiB, posted as an agent would."""
    run_id = submit(split, script(split.dir, "chatty.sh", "#!/usr/bin/env bash\necho hi\n"))
    grant = agent_post(split, "/claim", {"agent_id": "fake", "capabilities": ["shell"],
                                          "wait": 5})
    assert grant["run_id"] == run_id
    line = b"\x1b[32mok\x1b[0m " + b"x" * 90 + b"\n"
    body = line * (1024 * 1024 // len(line))
    token = grant["claim_token"]
    for i in range(MB_CHUNKS):
        head = b"the very first line\n" if i == 0 else b""
        agent_post(split, f"/runs/{run_id}/logs", {
            "claim_token": token,
            "data": base64.b64encode(head + body + f"chunk {i} end\n".encode()).decode()})
    agent_post(split, f"/runs/{run_id}/finish", {"claim_token": token,
                                                   "outcome": "succeeded", "exit_code": 0})
    wait_for("the run to finish", lambda: show(split, run_id)["status"] == "succeeded")
    return run_id


def _scroll_until(page: Page, end: str, text: str) -> None:
    """Scrolls the whole-log view to its top or bottom, as a user keeps doing, until the
    rows drawn hold `text` (each scroll near an end reads the next range)."""
    page.wait_for_function("""([end, text]) => {
        const e = document.getElementById('log-pages');
        e.scrollTop = end === 'top' ? 0 : e.scrollHeight;
        e.dispatchEvent(new Event('scroll'));
        return e.textContent.includes(text);
    }""", arg=[end, text], timeout=20_000, polling=200)


def test_a_50_mb_log_opens_jumps_to_its_start_browses_and_searches(
        split: Split, page: Page) -> None:
    run_id = _fifty_mb_run(split)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    t0 = time.monotonic()
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#log")).to_contain_text(f"chunk {MB_CHUNKS - 1} end", timeout=20_000)
    first_screen = time.monotonic() - t0
    expect(page.locator("#log-info")).to_contain_text("showing the last")

    # Jump to the start: the first line, and only the rows on screen are in the page.
    pages = page.locator("#log-pages")
    t0 = time.monotonic()
    page.click("#log-start")
    expect(pages.locator(".log-row").first).to_have_text("the very first line", timeout=20_000)
    to_start = time.monotonic() - t0
    assert page.locator("#log").is_hidden()
    rows = pages.locator(".log-row").count()
    assert 0 < rows < 400, rows
    assert page.evaluate("1 + 1") == 2  # the tab answers

    # Scrolling down reads the next range on demand.
    _scroll_until(page, "bottom", "chunk 0 end")
    _scroll_until(page, "bottom", "chunk 1 end")

    # Search runs over the whole log on the server; a hit opens the range around it.
    t0 = time.monotonic()
    page.fill("#log-find", "chunk 37 end")
    expect(page.locator("#log-find-count")).to_have_text("1 of 1", timeout=20_000)
    current = pages.locator(".log-row.current")
    expect(current).to_have_text("chunk 37 end", timeout=20_000)
    searched = time.monotonic() - t0
    assert page.evaluate("1 + 1") == 2
    t0 = time.monotonic()  # the server's part of it
    status, found = http(f"{split.url}/api/v1/orgs/dev/projects/default/runs/{run_id}"
                         "/logs?find=CHUNK%2012%20END", split.user_token)
    find_api = time.monotonic() - t0
    assert status == 200 and [m["line"] for m in found["matches"]] == ["chunk 12 end"], found

    # From the end, scrolling up reads earlier ranges.
    page.click("#log-live")
    expect(page.locator("#log")).to_be_visible()
    page.click("#log-earlier")
    expect(pages).to_contain_text(f"chunk {MB_CHUNKS - 1} end", timeout=20_000)
    _scroll_until(page, "top", f"chunk {MB_CHUNKS - 2} end")
    shot(page, "log-50mb-browse")
    assert page.errors == []  # type: ignore[attr-defined]
    record(log_50mb_first_screen_s=round(first_screen, 3), log_50mb_to_start_s=round(to_start, 3),
           log_50mb_search_s=round(searched, 3), log_50mb_find_api_s=round(find_api, 3))
    print(f"50 MB log: first screen {first_screen:.2f} s, to start {to_start:.2f} s, "
          f"search {searched:.2f} s (the server's find {find_api:.2f} s)")
