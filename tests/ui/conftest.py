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


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("dialog", lambda d: d.accept())  # the UI's only dialog: "Cancel this run?"
    pg.errors = errors  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()


def shot(page: object, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def login_url(stack: Split, token: str | None = None, org: str = "dev",
              project: str = "default") -> str:
    """The link `cryopg dev` prints: the login rides in the fragment."""
    return f"{stack.url}/#login={token or stack.user_token}&org={org}&project={project}"
