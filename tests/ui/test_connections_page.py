"""The Connections page in a real headless Chromium: an Admin creates one with the form
and deletes it; a name from a hostile source stays text; no secret value is shown."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import http
from tests.ui.test_ui import HOSTILE, _open_dev_link

PROJECT = "/api/v1/orgs/dev/projects/default"


def test_an_admin_creates_and_deletes_a_connection(split: Split, page: Page) -> None:
    assert http(f"{split.url}{PROJECT}/secrets/GH_TOKEN", split.user_token, "PUT",
                {"value": "ghp-never-shown-value"})[0] == 201
    _open_dev_link(page, split)
    page.click("text=Connections")
    form = page.locator("#connection-form")
    form.locator('input[name="name"]').fill("gh")
    form.locator('input[name="base_url"]').fill("https://api.github.com")
    form.locator('select[name="auth"]').select_option("bearer")
    form.locator('input[name="secret"]').fill("GH_TOKEN")
    form.locator('textarea[name="headers"]').fill(f"X-Note: {HOSTILE}")
    form.locator("button[type=submit]").click()
    expect(page.locator("#connections")).to_contain_text("bearer (GH_TOKEN)")
    assert http(f"{split.url}{PROJECT}/connections/gh", split.user_token)[1]["headers"] == {
        "X-Note": HOSTILE}
    form = page.locator("#connection-form")
    form.locator('input[name="name"]').fill("bad")
    form.locator('input[name="base_url"]').fill("ftp://x.example")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("base URL")
    page.locator("#connections button", has_text="Delete").click()
    expect(page.locator("#connections tbody tr")).to_have_count(0)
    assert "ghp-never-shown-value" not in page.content()
    assert page.evaluate("window.__pwned") is None
