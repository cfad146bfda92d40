"""A run's artifacts on its page (issue 25): listed with size and digest once the run
put them, and downloaded with the page's own credentials (a bearer token, which a plain
link would not send) to exactly the bytes that were put."""

from __future__ import annotations

import hashlib

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import axe_serious, login_url, shot

PUTS = """#!/usr/bin/env bash
set -e
printf 'artifact bytes \\x00\\xff\\n%.0s' $(seq 1 200) > report.bin
cryopg artifact put report report.bin
echo hello > notes.txt
cryopg artifact put notes/today notes.txt
"""


def test_run_page_lists_artifacts_and_downloads_their_bytes(split: Split,
                                                           axe_page: Page) -> None:
    page = axe_page
    split.agent("artifact-agent")
    run_id = submit(split, script(split.dir, "puts.sh", PUTS))
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=60_000)
    rows = page.locator("#artifacts li[data-artifact]")
    expect(rows).to_have_count(2, timeout=10_000)
    want = b"artifact bytes \x00\xff\n" * 200
    report = page.locator('#artifacts li[data-artifact="report"]')
    expect(report).to_contain_text("3.5 KiB")
    expect(report.locator("code")).to_have_text(hashlib.sha256(want).hexdigest()[:12])
    with page.expect_download() as dl:
        report.locator("a").click()
    assert dl.value.suggested_filename == "report"
    with open(dl.value.path(), "rb") as f:
        assert f.read() == want
    # A name with a slash: its last part names the file.
    with page.expect_download() as dl:
        page.locator('#artifacts li[data-artifact="notes/today"] a').click()
    assert dl.value.suggested_filename == "today"
    with open(dl.value.path(), "rb") as f:
        assert f.read() == b"hello\n"
    expect(page.locator("#artifacts-error")).to_have_text("")
    assert axe_serious(page) == []
    shot(page, "run-artifacts")
    assert page.errors == []  # type: ignore[attr-defined]
