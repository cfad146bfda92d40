"""A dark theme that follows the system (prefers-color-scheme) with a switch in the header
(auto, light, dark; kept across reloads), with no serious axe violation in either; and at
390 px every nav link and the runs list's workflow column are on screen."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import axe_serious, login_url

DARK_BG = "rgb(15, 20, 27)"
LIGHT_BG = "rgb(250, 250, 250)"


def _bg(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")  # type: ignore[no-any-return]


def _live(page: Page, split: Split) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)


def test_dark_theme_follows_the_system_and_the_switch(split: Split, browser: Browser) -> None:
    run_id = submit(split, script(split.dir, "hi.sh", "#!/usr/bin/env bash\necho hi\n"))
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="dark",
                              bypass_csp=True)  # bypass_csp only to inject axe-core
    page = ctx.new_page()
    _live(page, split)
    assert _bg(page) == DARK_BG
    assert axe_serious(page) == []
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-header h1")).to_contain_text(run_id)
    assert axe_serious(page) == []
    switch = page.locator("#theme-switch")
    expect(switch).to_have_text("theme: auto")
    switch.click()
    expect(switch).to_have_text("theme: light")
    assert _bg(page) == LIGHT_BG
    page.reload()
    expect(page.locator("#run-header h1")).to_contain_text(run_id)
    assert _bg(page) == LIGHT_BG  # kept
    page.locator("#theme-switch").click()
    expect(page.locator("#theme-switch")).to_have_text("theme: dark")
    assert _bg(page) == DARK_BG
    page.locator("#theme-switch").click()  # auto: the system's again (dark here)
    expect(page.locator("#theme-switch")).to_have_text("theme: auto")
    assert _bg(page) == DARK_BG
    ctx.close()


def test_at_390_px_nav_links_and_the_workflow_column_are_on_screen(
        split: Split, browser: Browser) -> None:
    submit(split, script(split.dir, "a-rather-long-workflow-name.sh",
                         "#!/usr/bin/env bash\necho hi\n"))
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    _live(page, split)
    links = page.locator("#nav a")
    assert links.count() >= 6
    for i in range(links.count()):
        box = links.nth(i).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (i, box)
    cell = page.locator("#runs td.workflow").first
    expect(cell).to_be_visible()
    box = cell.bounding_box()
    assert box and box["x"] + box["width"] <= 390, box
    ctx.close()
