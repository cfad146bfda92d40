"""A real YAML pipeline with an approval in the browser: graph runs show their jobs and
log (not an empty checkpoint list), job runs are named for their job, a rejection with a
comment fails the run (and the jobs it never reached say so), approve with a comment,
re-run from a node."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import login_url, shot

PIPELINE = """version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: echo built-it
  approve:
    needs: [build]
    approval: {fields: {type: object, properties: {go: {type: boolean}}}}
  deploy:
    needs: [approve]
    steps:
      - run: echo deployed-it
"""


def test_pipeline_reject_with_comment_then_rerun_and_approve(split: Split, page: Page) -> None:
    split.agent("ui-agent")
    run_id = submit(split, script(split.dir, "ship.yaml", PIPELINE))
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    strip = page.locator("#strip")
    expect(strip.locator('[data-node="approve"]')).to_have_class("node s-waiting", timeout=30_000)
    # 8. No "no durable calls yet" and no empty log box: the jobs' log is there.
    expect(page.locator("#checkpoints-section")).to_be_hidden()
    expect(page.locator("#log")).to_contain_text("[build]", timeout=15_000)
    # 15. The job's run is named for its job, here and on its own page.
    expect(page.locator("#children-list")).to_contain_text("ship.yaml › build")
    assert "node.sh" not in page.locator("#children-list").inner_text()
    page.locator("#children-list a").first.click()
    expect(page.locator("#run-header h1")).to_contain_text("ship.yaml › build")
    page.go_back()
    # 6. Reject, with a comment: the run fails and does not deploy.
    form = page.locator("#approval-approve")
    expect(form).to_be_visible(timeout=15_000)
    form.locator("textarea[name=comment]").fill("not on a Friday")
    page.click("#reject-approve")
    expect(page.locator("#run-status")).to_contain_text("failed", timeout=20_000)
    # 7. The job the failed run never reached is skipped (the run failed), not "pending".
    expect(strip.locator('[data-node="deploy"]')).to_have_class("node s-skipped")
    rejected = page.locator('#timeline li[data-kind="node_rejected"]')
    expect(rejected).to_contain_text("not on a Friday")
    expect(rejected).to_contain_text("by ")
    assert "deployed-it" not in page.locator("#log").inner_text()
    shot(page, "pipeline-rejected")
    # Re-run from the approval: build is seeded, the approval waits again.
    strip.locator('[data-node="approve"]').click()
    page.click("#rerun-from")
    expect(page.locator("#run-header h1")).not_to_contain_text(run_id, timeout=10_000)
    seeded = page.locator('#strip [data-node="build"]')
    expect(seeded).to_have_class("node s-seeded", timeout=20_000)
    form = page.locator("#approval-approve")
    expect(form).to_be_visible(timeout=30_000)
    form.locator('input[name="go"]').check()
    form.locator("textarea[name=comment]").fill("ship it")
    form.locator("button[type=submit]").click()
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=30_000)
    expect(page.locator('#timeline li[data-kind="node_approved"]')).to_contain_text("ship it")
    expect(page.locator("#log")).to_contain_text("deployed-it", timeout=15_000)
    assert page.errors == []  # type: ignore[attr-defined]


TWO_JOBS = """version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: sleep 4 && echo built-it
  test:
    needs: [build]
    steps:
      - run: sleep 8 && echo tested-it
"""


def test_node_moves_reach_the_page_while_the_run_stays_running(split: Split, page: Page) -> None:
    """The run stays `running-nodes` while build ends and test starts: the stream must
    still say it changed (the page has no timed re-read to fall back on)."""
    split.agent("ui-agent")
    run_id = submit(split, script(split.dir, "two.yaml", TWO_JOBS))
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    strip = page.locator("#strip")
    expect(strip.locator('[data-node="test"]')).to_have_class("node s-running", timeout=30_000)
    expect(strip.locator('[data-node="build"]')).to_have_class("node s-succeeded")
    # the header may take its change a moment after the strip took the node's
    expect(page.locator("#run-status")).to_contain_text("running", timeout=30_000)
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=30_000)
    expect(strip.locator('[data-node="test"]')).to_have_class("node s-succeeded")
