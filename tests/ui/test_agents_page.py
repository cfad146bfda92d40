"""The agents page (issue 40, item 2): each agent's state (idle, busy with which run,
draining, gone), build, replica and last contact, following changes within seconds
without a reload; and `cryopg agents` says the same."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit, wait_for
from tests.ui.conftest import login_url, shot


def test_agents_page_follows_idle_busy_draining_and_gone(split: Split, page: Page) -> None:
    agent = split.agent("pager-1")
    page.goto(login_url(split))
    expect(page.locator("#nav a", has_text="Agents")).to_be_visible(timeout=15_000)
    page.locator("#nav a", has_text="Agents").click()
    row = page.locator('tr[data-agent^="pager-1"]')  # --id ID names ID-1 (--count 1)
    expect(row).to_have_attribute("data-state", "idle", timeout=20_000)
    expect(row.locator(".replica")).not_to_have_text("—")
    expect(row.locator("time")).to_be_visible()

    go = split.dir / "go"
    job = script(split.dir, "hold.sh", f"while [ ! -f {go} ]; do sleep 0.1; done\necho done\n")
    run_id = submit(split, job)
    expect(row).to_have_attribute("data-state", "busy", timeout=20_000)
    expect(row.locator("a.agent-run")).to_have_text(run_id.split(":")[-1])
    listed = split.cli("agents")
    assert listed.returncode == 0, listed.stderr
    assert "REPLICA" in listed.stdout and "LAST CONTACT" in listed.stdout
    assert any(line.startswith("pager-1") and "\tbusy\t" in line and run_id in line
               for line in listed.stdout.splitlines()), listed.stdout

    drained = split.cli("agents", "drain", "--id", "pager-1")
    assert drained.returncode == 0, drained.stderr
    expect(row).to_have_attribute("data-state", "draining", timeout=20_000)
    shot(page, "agents-draining")

    go.write_text("")  # the run ends, the draining agent exits and says goodbye
    wait_for("the drained agent to exit", lambda: agent.poll() is not None, timeout=30)
    expect(row).to_have_attribute("data-state", "gone", timeout=20_000)
    assert page.errors == []  # type: ignore[attr-defined]
