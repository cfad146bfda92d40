"""Workflows edited in the browser, in a real headless Chromium against a real server:
versions (who and when), a diff between two, the CodeMirror editor saving through the
server's own checks (an error shown at its line, nothing stored), a save over a newer
version refused, and a Viewer who can read but not edit."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import http, token
from tests.ui.conftest import login_url
from tests.ui.test_ui import _open_dev_link

API = "/api/v1/orgs/dev/projects/default"

GREET = "#!/usr/bin/env bash\necho hello\n"
# `needs` names a job that is not there: the compiler refuses it, naming job deploy.
BAD_PIPELINE = """version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: echo build
  deploy:
    needs: [buidl]
    steps:
      - run: echo deploy
"""
GOOD_PIPELINE = BAD_PIPELINE.replace("buidl", "build")


def _put(split: Split, name: str, source: str, filename: str, tok: str | None = None,
         **extra: object) -> tuple[int, dict]:
    return http(f"{split.url}{API}/workflows/{name}", tok or split.user_token, "PUT",
                {"source": source, "filename": filename, **extra})


PASTE = """([text]) => {
    const dt = new DataTransfer();
    dt.setData("text/plain", text);
    document.querySelector("#code-editor .cm-content").dispatchEvent(
        new ClipboardEvent("paste", {clipboardData: dt, bubbles: true, cancelable: true}));
}"""


def _replace_source(page: Page, text: str) -> None:
    """Pastes a new source over the whole of the CodeMirror editor, as a person would."""
    page.locator("#code-editor .cm-content").click()
    page.keyboard.press("Control+A")
    page.evaluate(PASTE, [text])
    expect(page.locator("#code-editor .cm-content")).to_contain_text(text.splitlines()[-1].strip())


def test_versions_diff_and_the_code_editor(split: Split, page: Page) -> None:
    assert _put(split, "greet", GREET, "greet.sh")[1]["version"] == 1
    # The same definition again is no new version; the server says which it is.
    assert _put(split, "greet", GREET, "greet.sh")[1]["version"] == 1
    _open_dev_link(page, split)
    page.click("nav >> text=Workflows")
    expect(page.locator('tr[data-workflow="greet"] .version')).to_have_text("v1")
    page.locator('tr[data-workflow="greet"] a').click()
    expect(page.locator("#workflow-versions tbody tr")).to_have_count(1)
    expect(page.locator('#workflow-versions tr[data-version="1"]')).to_contain_text("owner")

    # Edit the script in the browser; the save is a new version by this member.
    page.click("#edit-code")
    expect(page.locator("#code-editor .cm-editor")).to_be_visible()
    expect(page.locator("#code-editor .cm-content")).to_contain_text("echo hello")
    _replace_source(page, "#!/usr/bin/env bash\necho hello\necho bye\n")
    page.click("#edit-save")
    expect(page.locator("main h1")).to_contain_text("v2")
    expect(page.locator("#workflow-source")).to_contain_text("echo bye")
    expect(page.locator("#workflow-versions tbody tr")).to_have_count(2)
    expect(page.locator('#workflow-versions tr[data-version="2"]')).to_contain_text("owner")
    # The diff between the two versions: one line added.
    page.click("#diff-show")
    diff = page.locator("#version-diff")
    expect(diff.locator(".d-add")).to_have_text(["+echo bye"])
    assert diff.locator(".d-del").count() == 0
    page.locator('#workflow-versions tr[data-version="1"] button.diff-to-current').click()
    expect(page.locator("#version-diff .d-add")).to_have_text(["+echo bye"])

    # A pipeline that does not compile: the server's error at its line, nothing stored.
    page.goto(f"{split.url}/#/workflows")
    page.click("#new-file")
    page.fill("#edit-name", "ship")
    page.fill("#edit-filename", "ship.yaml")
    _replace_source(page, BAD_PIPELINE)
    page.click("#edit-save")
    error = page.locator("#edit-error")
    # The server compiles in a worker process: on a loaded machine that takes a while.
    expect(error).to_contain_text("line 6", timeout=30_000)
    expect(error).to_contain_text("buidl")
    marked = page.locator("#code-editor .cm-lintRange-error")
    expect(marked).to_have_count(1)
    assert "deploy:" in marked.inner_text()
    assert http(f"{split.url}{API}/workflows/ship", split.user_token)[0] == 404
    # Fixed, it is stored as version 1 of a pipeline.
    _replace_source(page, GOOD_PIPELINE)
    page.click("#edit-save")
    expect(page.locator("main h1")).to_contain_text("pipeline", timeout=30_000)
    expect(page.locator("main h1")).to_contain_text("v1")
    expect(page.locator("#workflow-nodes")).to_contain_text("deploy")
    # A graph or pipeline also opens on the canvas.
    expect(page.locator("#open-canvas")).to_be_visible()

    # Someone else saves while the editor is open: this save is refused, not lost.
    page.goto(f"{split.url}/#/workflows/greet/code")
    expect(page.locator("#code-editor .cm-content")).to_contain_text("echo bye")
    assert _put(split, "greet", "#!/usr/bin/env bash\necho theirs\n", "greet.sh")[1]["version"] == 3
    _replace_source(page, "#!/usr/bin/env bash\necho mine\n")
    page.click("#edit-save")
    expect(page.locator("#edit-error")).to_contain_text("changed since you opened it")
    assert "echo theirs" in http(f"{split.url}{API}/workflows/greet?source=1",
                                 split.user_token)[1]["source"]
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_viewer_reads_versions_but_cannot_edit(split: Split, page: Page) -> None:
    assert _put(split, "greet", GREET, "greet.sh")[0] == 200
    assert _put(split, "greet", GREET + "echo two\n", "greet.sh")[1]["version"] == 2
    viewer = token(split.dsn, "user", member="vic", role="viewer")
    page.goto(login_url(split, viewer))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/workflows/greet")
    expect(page.locator("#workflow-versions tbody tr")).to_have_count(2)
    assert page.locator("#edit-code").count() == 0
    assert page.locator("#diff-show").count() == 0
    page.goto(f"{split.url}/#/workflows/greet/code")
    expect(page.locator("#page-error")).to_contain_text("Member")
    # The server refuses the viewer whatever the page shows.
    status, body = _put(split, "greet", "echo no\n", "greet.sh", tok=viewer)
    assert status == 403 and body["error"]["code"], body
    assert http(f"{split.url}{API}/workflows/greet/versions/1", viewer)[0] == 403
    # Bad input is a 4xx with a JSON error, never a 5xx.
    status, body = http(f"{split.url}{API}/workflows/greet/versions/x", split.user_token)
    assert status == 400 and body["error"]["code"] == "invalid_argument", body
    assert http(f"{split.url}{API}/workflows/greet/versions/9", split.user_token)[0] == 404
    status, body = _put(split, "greet", GREET, "greet.sh", base_version="one")
    assert status == 400 and "base_version" in body["error"]["message"], body
    assert page.errors == []  # type: ignore[attr-defined]
