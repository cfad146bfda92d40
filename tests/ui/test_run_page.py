"""The run page of a script run, in headless Chromium against a real server and agent:
the defects an operator found (durations, checkpoint times, output inside a step, exit
codes, empty signal names, passes after a wake, ticking times) and the log's features."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, show, submit, wait_for
from tests.ui.conftest import login_url
from tests.ui.perf import record

# The step prints lines about a second apart, each stamped with the wall clock in ms, so
# the page can tell how long each took to reach the screen (the browser and the script
# share the machine's clock). The step begins once the test says the page is watching
# (the file GATE exists; a replay finds it at once), so on a loaded machine too every line
# is printed live. It waits a second first: the page opens the step's section when the
# step's marker arrives (50 ms in, then a push), and a line printed before that lands
# above the section.
STEPS = r"""#!/usr/bin/env bash
set -e
echo "before steps"
for _ in $(seq 1200); do [ -e GATE ] && break; sleep 0.05; done
cryopg step slow --label 'the slow one' -- \
  bash -c 'sleep 1; for i in 1 2 3 4 5; do echo "inside-step $i $(date +%s%3N)"; sleep 0.8; done
           echo step-end'
cryopg sleep 1s
echo "after wake"
for i in 1 2 3; do echo "tick $i $(date +%s%3N)"; sleep 0.5; done
cryopg wait-signal go >/dev/null
echo finished
"""


# Installed in the page once its stream is up: for each stamped line, when its text first
# entered the log (a MutationObserver, called before the next paint) and the frame that
# drew it (requestAnimationFrame), in the page's own clock. Polling from the test would
# add its own granularity (expect() polls at 100, 250, 500, 1000 ms).
WATCH_LINES = r"""() => {
  const log = document.querySelector('#log');
  const seen = window.__lines = {};
  window.__watchFrom = Date.now();
  const scan = () => {
    for (const m of log.textContent.matchAll(/inside-step (\d+) (\d+)\n/g)) {
      if (seen[m[1]]) continue;
      const line = seen[m[1]] = { printed: Number(m[2]), inserted: Date.now() };
      requestAnimationFrame(() => { line.drawn = Date.now(); });
    }
  };
  scan();  // lines already there came with the tail: they are not counted
  for (const k in seen) seen[k].before = true;
  new MutationObserver(scan).observe(log, { childList: true, subtree: true, characterData: true });
}"""


def _line_delays(page: Page) -> list[int]:
    """Printed-to-drawn delays (ms) of the stamped lines printed after the watch began."""
    lines = page.evaluate("() => ({ from: window.__watchFrom, lines: window.__lines })")
    return sorted(v["drawn"] - v["printed"] for v in lines["lines"].values()
                  if not v.get("before") and "drawn" in v and v["printed"] >= lines["from"])


def _open(page: Page, split: Split, run_id: str) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-header h1")).to_contain_text(run_id)


def test_step_output_live_checkpoint_times_passes_and_log_tools(split: Split, page: Page) -> None:
    split.agent("ui-agent")
    gate = split.dir / "page-watching"
    run_id = submit(split, script(split.dir, "steps.sh", STEPS.replace("GATE", str(gate))))
    _open(page, split, run_id)
    # 1. Durations: seconds are floored, never "60 s" or "60 m".
    fmt = page.evaluate("""async () => { const t = await import('/ui/time.js');
        return [t.fmtMs(119600), t.fmtMs(7199999), t.fmtMs(59960), t.fmtMs(3599999)]; }""")
    assert fmt == ["1 m 59 s", "1 h 59 m", "59.9 s", "59 m 59 s"], fmt
    # 3. Output printed inside a step is on screen while the step still runs.
    log = page.locator("#log")
    expect(log).to_contain_text("before steps", timeout=20_000)  # the stream is up
    page.evaluate(WATCH_LINES)
    gate.touch()
    expect(log).to_contain_text("inside-step", timeout=20_000)
    assert "step-end" not in log.inner_text()
    expect(page.locator('#checkpoints li[data-status="running"]')).to_contain_text("slow")
    # ... folded under its step's section.
    expect(page.locator("#log details.log-section summary").first).to_contain_text("step slow")
    assert "inside-step" in page.locator("#log details.log-section").first.inner_text()
    # 11. The run's duration ticks while it runs.
    dur = page.locator("#run-duration")
    first = dur.inner_text()
    expect(dur).not_to_have_text(first, timeout=3_000)
    # 2. A completed step's checkpoint shows how long it ran (about 5 s), not 0 ms.
    expect(page.locator('#checkpoints li[data-status="succeeded"] .cp-dur').first).to_have_text(
        re.compile(r"^[4-7]\.\d s$"), timeout=20_000)
    delays = _line_delays(page)
    assert delays, "no line printed inside the step was seen arriving live"
    record(log_line_in_step_ms=delays[len(delays) // 2], log_line_in_step_max_ms=delays[-1],
           log_line_in_step_samples=len(delays))
    print(f"log line inside a step, printed to drawn: {delays} ms")
    # 10. After the sleep's wake the script replays: a marker says so, and the timeline
    # says "pass 2, woken by", never "attempt 2".
    expect(page.locator("#log .pass-marker")).to_contain_text("pass 2", timeout=20_000)
    expect(log).to_contain_text("tick 3", timeout=20_000)
    assert "attempt 2" not in page.locator("#timeline").inner_text()
    expect(page.locator("#timeline")).to_contain_text("pass 2 begins, woken by its timer")

    # 5. An empty signal name is refused in the page, in words.
    page.click("#signal-form button[type=submit]")
    expect(page.locator("#signal-error")).to_have_text("give the signal a name")
    # Log tools: timestamps, find with next/previous, download.
    stamp = "e => getComputedStyle(e, '::before').display"
    assert page.locator("#log .ts").first.evaluate(stamp) == "none"
    page.check("#log-ts")
    assert page.locator("#log .ts").first.evaluate(stamp) == "inline"
    page.fill("#log-find", "tick")
    expect(page.locator("#log-find-count")).to_have_text(re.compile(r"^1 of [3-9]"))
    page.click("#log-next")
    expect(page.locator("#log-find-count")).to_have_text(re.compile(r"^2 of "))
    page.click("#log-prev")
    expect(page.locator("#log-find-count")).to_have_text(re.compile(r"^1 of "))
    with page.expect_download() as dl:
        page.click("#log-download")
    with open(dl.value.path()) as f:
        assert "before steps" in f.read()
    page.fill("#signal-name", "go")
    page.click("#signal-form button[type=submit]")
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=20_000)
    # A finished run stops ticking.
    d1 = dur.inner_text()
    time.sleep(1.2)  # a stretch over which a ticking duration would change
    assert dur.inner_text() == d1
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_failed_run_shows_exit_code_and_reason_and_runs_again(split: Split, page: Page) -> None:
    split.agent("ui-agent")
    run_id = submit(split, script(split.dir, "bad.sh", "#!/usr/bin/env bash\necho oops\nexit 3\n"))
    _open(page, split, run_id)
    expect(page.locator("#run-status")).to_contain_text("failed", timeout=20_000)
    expect(page.locator("#run-exit-code")).to_have_text("3")
    expect(page.locator("#run-error")).not_to_be_empty()
    page.click("#run-again")
    # A loaded machine (the suite's two workers) took over 10 s once: the same 20 s as
    # the other waits here, and the page's own error line is empty throughout.
    expect(page.locator("#run-header h1")).not_to_contain_text(run_id, timeout=20_000)
    expect(page.locator("#run-again-error")).to_be_empty()
    expect(page.locator("#run-status")).to_contain_text("failed", timeout=20_000)
    expect(page.locator("#timeline")).to_contain_text("rerun of")


def test_log_lines_carry_the_time_they_were_written(split: Split, page: Page) -> None:
    """4. A line's timestamp is when the server stored it, also for lines that were
    printed before the page opened (the tail) and for the whole log loaded on demand."""
    split.agent("ui-agent")
    body = "#!/usr/bin/env bash\necho first-line\nsleep 2\necho second-line\n"
    run_id = submit(split, script(split.dir, "stamped.sh", body))
    wait_for("the run to finish", lambda: show(split, run_id)["status"] == "succeeded")
    _open(page, split, run_id)
    expect(page.locator("#log")).to_contain_text("second-line", timeout=20_000)
    page.check("#log-ts")

    def stamps() -> list[float]:
        ts = page.evaluate("""() => [...document.querySelectorAll('#log .ts')]
            .filter(e => /first-line|second-line/.test(e.nextSibling?.textContent || ''))
            .map(e => e.dataset.t)""")
        assert len(ts) == 2 and all(ts), ts  # both lines stamped, though printed before
        parts = [t.split(":") for t in ts]  # HH:MM:SS.mmm
        return [int(h) * 3600 + int(m) * 60 + float(s) for h, m, s in parts]

    first, second = stamps()
    assert 1.5 <= (second - first) % 86400 < 10, (first, second)


QUICK_STEPS = """#!/usr/bin/env bash
set -e
cryopg step quick -- true
cryopg step second -- sleep 1
"""


def test_a_completed_checkpoint_shows_its_real_duration(split: Split, page: Page) -> None:
    """2. The agent passes when a step began with its record: a step too quick to be
    marked still has a start before its end, and a marked one counts from its real start."""
    split.agent("ui-agent")
    run_id = submit(split, script(split.dir, "quick.sh", QUICK_STEPS))
    wait_for("the run to finish", lambda: show(split, run_id)["status"] == "succeeded")
    _open(page, split, run_id)
    got = page.evaluate("""async (base) => {
        const { api } = await import('/ui/api.js');
        return (await api(base + '/checkpoints')).checkpoints.map(
            c => [c.name, Date.parse(c.completed_at) - Date.parse(c.created_at)]); }""",
                        f"/api/v1/orgs/dev/projects/default/runs/{run_id}")
    took = dict(got)
    assert took["quick"] > 0, got  # not the same time twice
    assert took["second"] >= 1000, got  # from its start, not from its marker
    durs = page.locator("#checkpoints .cp-dur")
    expect(durs.first).to_have_text(re.compile(r"^\d+ ms$"))
    expect(durs.nth(1)).to_have_text(re.compile(r"^1\.\d s$"))
