"""Fixtures for the web UI tests: a real server and agent (tests/e2e's split deployment)
and Debian's headless Chromium driven by playwright. Screenshots go to
tests/ui/artifacts/ (or $CRYOPG_UI_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def agent_post(stack: Split, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POSTs to the agent API as an agent would (a test playing the agent)."""
    req = urllib.request.Request(f"{stack.url}/api/v1/agent{path}", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {stack.agent_token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else {}
