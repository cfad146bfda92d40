"""Signing in through an OpenID provider in headless Chromium: a real `cryopg server`
configured with CRYOPG_OIDC_*, oidc-provider-mock on loopback, the provider's own page.
The session lives in an HttpOnly cookie the page cannot read; sign-out ends it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from oidc_provider_mock import User
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.oidc_mock import Provider, running_provider
from tests.ui.conftest import shot


@pytest.fixture
def provider() -> Iterator[Provider]:
    with running_provider([User(sub="alice", claims={"email": "alice@example.com"})]) as p:
        yield p


@pytest.fixture
def oidc_split(dsn: str, tmp_path: Path, provider: Provider,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[Split]:
    for name, value in provider.env().items():
        monkeypatch.setenv(name, value)
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("SELECT cryo.ensure_org('dev', 'Dev'),"
                   " cryo.ensure_project('dev', 'default', 'D'),"
                   " cryo.put_member('dev', 'alice@example.com', 'member')")
    deployment = Split(dsn, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()


def test_sign_in_with_the_provider_and_sign_out(oidc_split: Split, page: Page) -> None:
    page.goto(oidc_split.url + "/")
    page.click("#sign-in-oidc")
    # The provider's own page: choose the user to sign in as.
    page.get_by_role("button", name="alice").click()
    expect(page.locator("#who")).to_contain_text("alice@example.com (member)", timeout=15_000)
    expect(page.locator("#nav")).to_contain_text("Runs")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: the page never sees it
    assert page.evaluate("sessionStorage.getItem('cryo.token')") is None
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["cryo_session"]["httpOnly"] and cookies["cryo_session"]["sameSite"] == "Lax"
    shot(page, "oidc-signed-in")

    page.click("#sign-out")
    expect(page.locator("#login-token")).to_be_visible(timeout=15_000)
    page.reload()  # the session ended at the server, not only in this tab
    expect(page.locator("#sign-in-oidc")).to_be_visible(timeout=15_000)
    expect(page.locator("#who")).to_have_text("")
    assert page.errors == []  # type: ignore[attr-defined]
