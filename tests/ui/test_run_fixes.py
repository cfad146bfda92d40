"""Issue 41's small defects on the run page, and what operators expect of re-runs: a
script run's DAG names its spawns and activities and lasts as long as they ran, a wait
on a signal ticks, nothing draws `-Infinity`, the Gantt's labels stay in the chart, a
token sign-in logs no 401, and a run re-runs with an input edited in a dialog."""

from __future__ import annotations

import re

from playwright.sync_api import ConsoleMessage, Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for
from tests.ui.conftest import login_url

PARENT = """#!/usr/bin/env bash
set -e
printf '#!/usr/bin/env bash\necho child\n' > child.sh
child=$(cryopg spawn child.sh)
cryopg activity-submit slowpoke -- sleep 1.5 >/dev/null
cryopg activity-collect slowpoke >/dev/null
cryopg wait-signal go
"""


def _console_errors(page: Page) -> list[str]:
    errors: list[str] = []

    def seen(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            errors.append(msg.text)
    page.on("console", seen)
    return errors


def test_a_script_runs_dag_names_children_times_them_and_ticks_a_wait(
        split: Split, page: Page) -> None:
    errors = _console_errors(page)
    wait_only = submit(split, script(split.dir, "empty.sh", "#!/usr/bin/env bash\necho x\n"))
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    # Before any checkpoint (no agent yet): the DAG has nothing to draw, and draws no
    # `-Infinity` box.
    page.goto(f"{split.url}/#/run/{wait_only}")
    page.click("#tab-dag")
    expect(page.locator("#dag")).to_contain_text("No checkpoints yet.")
    run_id = submit(split, script(split.dir, "parent.sh", PARENT))
    split.agent("fixes-agent")
    wait_for("the run to wait for its signal",
             lambda: show(split, run_id)["substate"] == "awaiting-signal", timeout=90)
    page.goto(f"{split.url}/#/run/{run_id}")
    page.click("#tab-dag")
    nodes = page.locator("#dag g.dag-node")
    expect(nodes).to_have_count(4, timeout=20_000)
    spawn = page.locator("#dag g.dag-node", has_text="spawn")
    expect(spawn.locator("text.t1")).to_have_text(re.compile(r"spawn · child\.sh"))
    activity = page.locator("#dag g.dag-node", has_text="slowpoke").first
    # The activity lasted as long as its child ran (about 1.5 s), never "0 ms".
    expect(activity.locator("text.t2")).to_have_text(re.compile(r"\d+\.\d s"), timeout=20_000)
    assert "0 ms" not in activity.locator("text.t2").text_content()  # type: ignore[operator]
    wait = page.locator("#dag g.dag-node", has_text="go").locator("text.t2")
    first = wait.text_content()
    expect(wait).not_to_have_text(first or "", timeout=10_000)  # it ticks
    # The Gantt's every label ends inside the chart.
    page.click("#tab-gantt")
    page.wait_for_selector("#gantt svg.gantt text.gantt-dur")
    over = page.evaluate("""() => { const s = document.querySelector('#gantt svg.gantt');
        const right = s.getBoundingClientRect().right;
        return [...s.querySelectorAll('text')]
          .filter((t) => t.getBoundingClientRect().right > right + 0.5)
          .map((t) => t.textContent); }""")
    assert over == []
    assert not [e for e in errors if "Infinity" in e or "401" in e], errors
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_token_sign_in_logs_no_error(split: Split, page: Page) -> None:
    errors = _console_errors(page)
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.evaluate("sessionStorage.clear()")
    page.goto(f"{split.url}/")
    page.fill("#login-token", split.user_token)
    page.click("#login-submit")
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    assert errors == []


def test_a_run_re_runs_with_an_input_edited_in_a_dialog(split: Split, page: Page) -> None:
    wf = script(split.dir, "greet.sh", "#!/usr/bin/env bash\necho hi\n")
    run_id = submit(split, wf, "--input", '{"who": "ann"}')
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    page.click("#rerun-edit")
    box = page.locator("#rerun-input")
    expect(box).to_have_value(re.compile(r'"who": "ann"'))
    box.fill("{not json")
    page.click("#rerun-submit")
    expect(page.locator("#rerun-error")).to_contain_text("not JSON")
    box.fill('{"who": "bob"}')
    page.click("#rerun-submit")
    expect(page).not_to_have_url(re.compile(re.escape(run_id.split(":")[-1]) + "$"), timeout=15_000)
    expect(page.locator("#run-input")).to_contain_text('"bob"', timeout=15_000)
    new_id = page.url.split("/run/")[-1].replace("%3A", ":")
    assert new_id != run_id and show(split, new_id)["input"] == {"who": "bob"}


def test_the_runs_list_shows_its_total(split: Split, page: Page) -> None:
    wf = script(split.dir, "counted.sh", "#!/usr/bin/env bash\necho hi\n")
    for _ in range(3):
        submit(split, wf)
    page.goto(login_url(split))
    expect(page.locator("#runs-total")).to_have_text("3 runs", timeout=15_000)
    page.goto(f"{split.url}/#/runs?q=nothing-matches-this")
    expect(page.locator("#runs-total")).to_have_text("0 runs", timeout=15_000)
