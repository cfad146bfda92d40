"""axe-core (tests/ui/vendor, the current release) on every page of the UI, with a script
run, a graph run (its strip, DAG and Gantt views) and the canvas editor: no serious or
critical violation anywhere. 4.10 let DAG and canvas nodes whose names differ from their
text (label-content-name-mismatch) and a Gantt chart that scrolls but cannot be focused
(scrollable-region-focusable) through; an 11-node chain, wider than 1280 px, also says
that it scrolls."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for
from tests.ui.conftest import axe_serious, login_url

CHAIN = "version: cryosleep/pipeline/v1\njobs:\n" + "".join(
    f"  j{i:02d}:\n" + (f"    needs: [j{i - 1:02d}]\n" if i else "")
    + f"    steps:\n      - run: echo job-{i}\n" for i in range(11))
STEPS = "#!/usr/bin/env bash\ncryopg step build -- echo built\ncryopg step ship -- echo shipped\n"


def _check(page: Page, where: str, found: dict[str, list[str]]) -> None:
    page.wait_for_timeout(300)  # let a live re-render land before axe reads the page
    got = axe_serious(page)
    if got:
        found[where] = got


def test_every_page_has_no_serious_accessibility_violation(split: Split,
                                                           axe_page: Page) -> None:
    page = axe_page
    split.agent("ui-agent")
    chain = script(split.dir, "chain.yaml", CHAIN)
    split.cli("workflow", "put", "chain", str(chain))
    plain = submit(split, script(split.dir, "steps.sh", STEPS))
    graph = submit(split, chain)
    wait_for("the script run to finish", lambda: show(split, plain)["status"] == "succeeded",
             timeout=60)
    found: dict[str, list[str]] = {}
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    _check(page, "runs", found)
    for run_id, name in ((plain, "script run"), (graph, "graph run")):
        page.goto(f"{split.url}/#/run/{run_id}")
        expect(page.locator("#run-header h1")).to_contain_text(run_id)
        _check(page, name, found)
        for view in ("dag", "gantt"):
            page.click(f"#tab-{view}")
            expect(page.locator(f"#view-{view}")).to_be_visible()
            if view == "dag":
                expect(page.locator("#dag .dag-node").first).to_be_visible(timeout=20_000)
                # Named by their <title>: label, status and what the box shows.
                expect(page.locator("#dag .dag-node title").first).to_contain_text("succeeded")
            _check(page, f"{name} {view}", found)
    # The chain is wider than the page at 1280 px: the DAG view says it scrolls.
    page.click("#tab-dag")
    expect(page.locator("#dag-scroll-hint")).to_be_visible()
    for path in ("workflows", "workflows/chain", "workflows/chain/edit",
                 "workflows/chain/code", "workflows/new", "schedules", "webhooks", "handlers",
                 "events", "secrets", "members", "connections", "agents"):
        page.goto(f"{split.url}/#/{path}")
        expect(page.locator("#main h1").first).to_be_visible(timeout=10_000)
        if path.endswith("/edit"):
            expect(page.locator("#canvas [data-node]").first).to_be_visible(timeout=10_000)
        if path.endswith("/code"):  # CodeMirror, loaded on first use
            expect(page.locator(".cm-editor").first).to_be_visible(timeout=20_000)
        _check(page, path, found)
    assert found == {}, found
    assert page.errors == []  # type: ignore[attr-defined]
