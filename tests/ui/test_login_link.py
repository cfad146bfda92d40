"""Login CSRF (issue 20): a `#login=` link must not silently replace an open session.

Anyone can send such a link; followed while signed in, it asks in the page (naming the
login it would sign in as), keeps the session unless told otherwise, and leaves no
token in the URL either way."""

from __future__ import annotations

import psycopg
from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import token
from tests.ui.conftest import login_url


def _session_token(page: Page) -> str | None:
    return page.evaluate("sessionStorage.getItem('cryo.token')")  # type: ignore[no-any-return]


def test_a_login_link_asks_before_replacing_the_session(split: Split, page: Page) -> None:
    with psycopg.connect(split.dsn, autocommit=True) as db:
        db.execute("SELECT cryo.ensure_org('acme', 'Acme'),"
                   " cryo.ensure_project('acme', 'default', 'D')")
    mallory = token(split.dsn, "user", org="acme", member="mallory", role="owner")
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    expect(page.locator("#who")).to_contain_text("dev/default")
    assert _session_token(page) == split.user_token

    # The attack: the sender's link, opened in the signed-in tab. Declining keeps A.
    page.goto(login_url(split, token=mallory, org="acme"))
    ask = page.locator("#switch-login")
    expect(ask).to_be_visible(timeout=15_000)
    expect(ask).to_contain_text("mallory in acme/default")
    assert "login=" not in page.url and mallory not in page.url
    expect(page.locator("#switch-keep")).to_be_focused()  # keeping is the default
    page.click("#switch-keep")
    expect(ask).to_have_count(0)
    expect(page.locator("#who")).to_contain_text("dev/default")
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    assert _session_token(page) == split.user_token
    assert "login=" not in page.url

    # Escape (dismissing the question) keeps it too.
    page.goto(login_url(split, token=mallory, org="acme"))
    expect(ask).to_be_visible(timeout=15_000)
    page.keyboard.press("Escape")
    expect(ask).to_have_count(0)
    expect(page.locator("#who")).to_contain_text("dev/default")
    assert _session_token(page) == split.user_token and "login=" not in page.url

    # A link with a token that does not work replaces nothing and asks nothing.
    page.goto(login_url(split, token="cryo_u_not-a-token", org="acme"))
    expect(page.locator("#who")).to_contain_text("dev/default")
    assert _session_token(page) == split.user_token and "login=" not in page.url
    expect(ask).to_have_count(0)

    # Only an explicit "Switch" replaces the session.
    page.goto(login_url(split, token=mallory, org="acme"))
    expect(ask).to_be_visible(timeout=15_000)
    page.click("#switch-accept")
    expect(page.locator("#who")).to_contain_text("acme/default", timeout=15_000)
    assert _session_token(page) == mallory and "login=" not in page.url
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_login_link_for_the_same_session_asks_nothing(split: Split, page: Page) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(login_url(split))
    expect(page.locator("#who")).to_contain_text("dev/default")
    expect(page.locator("#switch-login")).to_have_count(0)
    assert _session_token(page) == split.user_token and "login=" not in page.url
