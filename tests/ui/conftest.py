"""Fixtures for the web UI tests: a real server and agent (tests/e2e's split deployment)
and Debian's headless Chromium driven by playwright. Screenshots go to
tests/ui/artifacts/ (or $CRYOPG_UI_ARTIFACTS)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Split, split  # noqa: F401 - the deployment fixture

CHROMIUM = os.environ.get("CRYOPG_CHROMIUM", "/usr/bin/chromium")
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
ARTIFACTS = Path(os.environ.get("CRYOPG_UI_ARTIFACTS", Path(__file__).parent / "artifacts"))


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no {CHROMIUM}: scripts/setup installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


def _page(browser: object, **ctx: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **ctx)  # type: ignore[attr-defined]
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda d: d.accept())  # the UI's only dialog: "Cancel this run?"
    pg.errors = errors  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    yield from _page(browser)


@pytest.fixture
def axe_page(browser: object) -> Iterator[object]:
    """A page axe-core can be injected into: bypass_csp only for that; the app still
    sends its CSP."""
    yield from _page(browser, bypass_csp=True)


def axe_serious(page: object) -> list[str]:
    """The serious and critical accessibility violations axe-core finds on the page."""
    if not page.evaluate("typeof axe !== 'undefined'"):  # type: ignore[attr-defined]
        page.add_script_tag(content=AXE.read_text())  # type: ignore[attr-defined]
    return page.evaluate(  # type: ignore[attr-defined,no-any-return]
        "async () => (await axe.run(document, {resultTypes: ['violations']}))"
        ".violations.filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))")


def shot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def login_url(stack: Split, token: str | None = None, org: str = "dev",
              project: str = "default") -> str:
    """The link `cryopg dev` prints: the login rides in the fragment."""
    return f"{stack.url}/#login={token or stack.user_token}&org={org}&project={project}"


def click_until_sent(page: object, selector: str, method: str, path_part: str,
                     tries: int = 5, wait_ms: int = 10_000) -> None:
    """Clicks `selector` until the page sends `method` to a URL holding `path_part`.

    A live page re-renders its header when its stream says hello or a change arrives;
    a click landing while the button is taken out and put back is lost (no handler runs,
    nothing is sent), and waiting on what the click should change then waits forever.
    The request is what the click must cause, so that is what is waited for."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        try:
            with page.expect_request(  # type: ignore[attr-defined]
                    lambda r: r.method == method and path_part in r.url, timeout=wait_ms):
                page.click(selector)  # type: ignore[attr-defined]
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
