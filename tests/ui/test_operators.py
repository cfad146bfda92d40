"""Finding and acting on runs, the triggers and definitions pages, role rules, the layout
at 390 px and 1920 px, accessibility (axe-core), a server that went away, the favicon,
and the runs list's load time."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from cryopg.triggers import webhook
from tests.e2e.conftest import Split
from tests.e2e.helpers import http, script, submit, token
from tests.ui.conftest import login_url, shot
from tests.ui.perf import record

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
API = "/api/v1/orgs/dev/projects/default"


def _live(page: Page, split: Split, tok: str | None = None) -> None:
    page.goto(login_url(split, tok))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)


WIDER = """w => [...document.querySelectorAll('body *')].filter(e => {
    const r = e.getBoundingClientRect();
    return r.right > w + 1 && !e.closest('.scroll-x');
}).slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' +
                     Math.round(e.getBoundingClientRect().right))"""


def _fits(page: Page, width: int) -> None:
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, page.evaluate(WIDER, width)


def _axe_serious(page: Page) -> list[str]:
    page.add_script_tag(content=AXE.read_text())
    got = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']}))"
                        ".violations.filter(v => ['serious', 'critical'].includes(v.impact))"
                        ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))")
    return got


def test_search_multi_cancel_start_and_trigger_pages(split: Split, page: Page) -> None:
    waiter = script(split.dir, "waiter.sh", "#!/usr/bin/env bash\ncryopg wait-signal never\n")
    a, b = submit(split, waiter), submit(split, waiter)  # no agent: both stay pending
    other = submit(split, script(split.dir, "nightly-report.sh", "#!/usr/bin/env bash\n"))
    _live(page, split)
    # Search by a piece of the id, by a workflow substring; the URL keeps the filter.
    page.fill("#filter-q", a[-8:])  # the random end of the id
    page.press("#filter-q", "Enter")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(1)
    assert "q=" in page.url
    page.goto(f"{split.url}/#/runs?match=report")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(1)
    expect(page.locator(f'tr[data-run="{other}"]')).to_be_visible()
    expect(page.locator("#filter-workflow")).to_have_value("report")
    page.goto(f"{split.url}/#/runs?trigger=schedule")
    expect(page.locator("#runs-body")).to_contain_text("No runs.")
    page.goto(f"{split.url}/#/runs?since=2000-01-01&until=2000-01-02")
    expect(page.locator("#runs-body")).to_contain_text("No runs.")
    status, body = http(f"{split.url}{API}/runs?since=yesterday", split.user_token)
    assert status == 400 and "since" in body["error"]["message"]
    # Cancel two at once.
    page.goto(f"{split.url}/#/runs")
    for rid in (a, b):
        page.locator(f'tr[data-run="{rid}"] input.pick').check()
    page.click("#cancel-selected")
    expect(page.locator("#bulk-msg")).to_have_text("cancelled 2 of 2")
    for rid in (a, b):
        badge = page.locator(f'tr[data-run="{rid}"] .badge')
        expect(badge).to_have_text("cancelled", timeout=10_000)

    # A stored workflow: its page, and starting it with an input.
    split.cli("workflow", "put", "greet", str(script(split.dir, "greet.sh",
              "#!/usr/bin/env bash\necho hello\n")))
    assert http(f"{split.url}{API}/schedules", split.user_token, "POST",
                {"name": "hourly", "workflow": "greet", "every": "1h"})[0] == 201
    assert http(f"{split.url}{API}/handlers", split.user_token, "POST",
                {"name": "on-push", "event": "push", "workflow": "greet"})[0] in (200, 201)
    assert http(f"{split.url}{API}/webhooks", split.user_token, "POST",
                {"name": "gh", "workflow": "greet"})[0] == 201
    page.click("nav >> text=Workflows")
    page.locator('tr[data-workflow="greet"] a').click()
    expect(page.locator("#workflow-source")).to_contain_text("echo hello")
    page.fill("#start-input", "{not json")
    page.click("#start-submit")
    expect(page.locator("#start-error")).to_have_text("the input is not JSON")
    page.fill("#start-input", '{"who": "ann"}')
    page.click("#start-submit")
    expect(page.locator("#run-input")).to_contain_text('"who": "ann"', timeout=10_000)
    # 13. Schedules and webhooks have pages (not the runs list); pause and resume.
    page.goto(f"{split.url}/#/schedules")
    row = page.locator('tr[data-schedule="hourly"]')
    expect(row).to_contain_text("every 3600 s")
    row.locator("button.pause-resume").click()
    expect(row).to_contain_text("paused")
    row.locator("button.pause-resume").click()
    expect(row.locator("button.pause-resume")).to_have_text("Pause")
    page.goto(f"{split.url}/#/webhooks")
    expect(page.locator('tr[data-webhook="gh"]')).to_contain_text("/api/v1/hooks/dev/default/gh")
    page.goto(f"{split.url}/#/handlers")
    expect(page.locator("#handlers")).to_contain_text("push")
    page.goto(f"{split.url}/#/nowhere")
    expect(page.locator("main h1")).to_have_text("Not found")
    # 13. A Viewer sees no Secrets link and no buttons that would be refused.
    viewer = token(split.dsn, "user", member="vic", role="viewer")
    page.evaluate("sessionStorage.clear()")
    _live(page, split, viewer)
    expect(page.locator("#nav")).not_to_contain_text("Secrets")
    assert page.locator("#cancel-selected").count() == 0
    page.goto(f"{split.url}/#/schedules")
    expect(page.locator('tr[data-schedule="hourly"]')).to_be_visible()
    assert page.locator("button.pause-resume").count() == 0
    assert page.errors == []  # type: ignore[attr-defined]


def test_phone_and_wide_layouts_accessibility_favicon_and_load_time(
        split: Split, browser: Browser) -> None:
    split.agent("ui-agent")
    run_id = submit(split, script(split.dir, "wide.sh",
                                  "#!/usr/bin/env bash\ncryopg step a -- echo a\n"
                                  "cryopg wait-signal go >/dev/null\n"))
    for width, height in ((390, 844), (1920, 1080)):
        # bypass_csp only so the test can inject axe-core; the app runs under its CSP.
        ctx = browser.new_context(viewport={"width": width, "height": height}, bypass_csp=True)
        page = ctx.new_page()
        asked: list[str] = []
        page.on("request", lambda r, asked=asked: asked.append(r.url))
        _live(page, split)
        expect(page.locator(f'tr[data-run="{run_id}"]')).to_be_visible(timeout=15_000)
        # 12. Nothing wider than the screen; Sign out is on it.
        _fits(page, width)
        box = page.locator("#sign-out").bounding_box()
        assert box and box["x"] + box["width"] <= width
        assert _axe_serious(page) == []
        shot(page, f"runs-{width}")
        page.goto(f"{split.url}/#/run/{run_id}")
        expect(page.locator("#run-status")).to_contain_text("awaiting signal", timeout=20_000)
        _fits(page, width)
        tl = page.locator("#timeline").bounding_box()
        assert tl and tl["x"] >= 0 and tl["x"] + tl["width"] <= width
        form = page.locator("#signal-form").bounding_box()
        assert form and form["x"] + form["width"] <= width
        # Times: relative, with UTC on hover.
        assert page.locator("#run-started time").get_attribute("title").endswith("UTC")
        assert _axe_serious(page) == []
        shot(page, f"run-{width}")
        # 14. A favicon, and no request for /favicon.ico.
        assert not any(u.endswith("/favicon.ico") for u in asked)
        with urllib.request.urlopen(f"{split.url}/ui/favicon.svg", timeout=10) as resp:
            assert resp.status == 200
        ctx.close()

    # The runs list's load time, measured in the page (from the route to rows drawn).
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    _live(page, split)
    times = []
    for _ in range(5):
        page.goto(f"{split.url}/#/events")
        expect(page.locator("#events")).to_be_visible()
        page.goto(f"{split.url}/#/runs")
        expect(page.locator("#main[data-loaded-ms]")).to_have_count(1)
        times.append(int(page.locator("#main").get_attribute("data-loaded-ms")))
        page.evaluate("delete document.getElementById('main').dataset.loadedMs")
    times.sort()
    record(runs_list_load_ms=times[len(times) // 2])
    # The 300 ms target is reported by bench/run (bench/ui_bench.py); on a shared machine
    # the test only bounds it loosely.
    assert times[len(times) // 2] < 3_000, times

    # 14. The server goes away: the run page says so and offers a retry, then recovers.
    page.route("**/api/v1/**", lambda route: route.abort())
    page.goto(f"{split.url}/#/run/{run_id}")
    page.reload()
    expect(page.locator("main h1")).to_have_text("Server unreachable", timeout=10_000)
    expect(page.locator("#retry")).to_be_visible()
    page.unroute("**/api/v1/**")
    page.click("#retry")
    expect(page.locator("#run-header h1")).to_contain_text(run_id, timeout=10_000)
    http(f"{split.url}{API}/runs/{run_id}/signal/go", split.user_token, "POST", {})
    ctx.close()


def _agent_post(split: Split, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{split.url}/api/v1/agent{path}", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {split.agent_token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else {}


def test_log_window_starts_at_a_line_and_its_size_follows_the_run(
        split: Split, page: Page) -> None:
    run_id = submit(split, script(split.dir, "chatty.sh", "#!/usr/bin/env bash\necho hi\n"))
    grant = _agent_post(split, "/claim", {"agent_id": "fake", "capabilities": ["shell"],
                                          "wait": 5})

    def put(text: str) -> None:
        _agent_post(split, f"/runs/{run_id}/logs", {
            "claim_token": grant["claim_token"],
            "data": base64.b64encode(text.encode()).decode()})

    # The split deployment's claims last 2 s: like a real agent, this one renews its
    # claim (an empty log post) while the page loads, however slow the machine is.
    done = threading.Event()

    def renew() -> None:
        while not done.wait(0.3):
            put("")

    threading.Thread(target=renew, daemon=True).start()
    try:
        for i in range(8):  # 8 chunks of ~100 KiB, lines of 100 bytes
            put("".join(f"line {i:02d}-{j:05d} " + "x" * 82 + "\n" for j in range(1000)))
        _live(page, split)
        page.goto(f"{split.url}/#/run/{run_id}")
        log = page.locator("#log")
        expect(log).to_contain_text("line 07-00999", timeout=20_000)
        info = page.locator("#log-info")
        expect(info).to_contain_text("showing the last")
        before = info.inner_text()
        # 9. The window's first line is a whole line.
        first = page.evaluate("document.getElementById('log').textContent.split('\\n')[0]")
        assert first.startswith("line ") and len(first) == 14 + 82, first
        # ... and the label follows what the run prints.
        put("".join(f"more {j} " + "y" * 90 + "\n" for j in range(1000)))
        expect(log).to_contain_text("more 999", timeout=10_000)
        expect(info).not_to_have_text(before)
        # Jumping to the start brings the start of the log, browsed by ranges.
        page.click("#log-start")
        expect(page.locator("#log-pages")).to_contain_text("line 00-00000", timeout=20_000)
        expect(info).to_contain_text("browsing the whole log")
    finally:
        done.set()


SCHEMA_PIPELINE = """version: cryosleep/pipeline/v1
input_schema:
  type: object
  required: [env]
  properties:
    env: {type: string, enum: [staging, prod]}
    replicas: {type: integer, title: Replicas}
    dry_run: {type: boolean}
jobs:
  ship:
    steps:
      - run: echo shipping
"""


def test_start_a_stored_workflow_from_its_input_schema(split: Split, page: Page) -> None:
    split.cli("workflow", "put", "ship", str(script(split.dir, "ship.yaml", SCHEMA_PIPELINE)))
    # The server checks an input against the declared schema: a 400 names the field.
    status, body = http(f"{split.url}{API}/workflows/ship/runs", split.user_token, "POST",
                        {"input": {"env": "moon"}})
    assert status == 400 and "env" in body["error"]["message"], body
    status, body = http(f"{split.url}{API}/workflows/ship/runs", split.user_token, "POST",
                        {"input": {"replicas": 2}})
    assert status == 400 and "'env' is a required property" in body["error"]["message"], body
    _live(page, split)
    page.goto(f"{split.url}/#/workflows/ship")
    form = page.locator("#start-form")
    expect(form.locator('select[name="env"]')).to_be_visible()
    expect(form).to_contain_text("Replicas")
    assert form.locator("#start-input").count() == 0  # a form, not a JSON box
    page.click("#start-submit")
    expect(page.locator("#start-error")).to_have_text("env is required")
    form.locator('select[name="env"]').select_option("staging")
    form.locator('input[name="replicas"]').fill("3")
    form.locator('input[name="dry_run"]').check()
    page.click("#start-submit")
    expect(page.locator("#run-input")).to_contain_text('"replicas": 3', timeout=10_000)
    expect(page.locator("#run-input")).to_contain_text('"env": "staging"')
    assert page.errors == []  # type: ignore[attr-defined]


ON_PUSH = """version: cryosleep/pipeline/v1
on: {webhook: [push]}
jobs:
  ci:
    steps:
      - run: echo ci
"""


def _deliver(split: Split, name: str, secret: str, event: str, body: dict) -> int:
    raw = json.dumps(body).encode()
    req = urllib.request.Request(
        f"{split.url}/api/v1/hooks/dev/default/{name}", data=raw, method="POST",
        headers={"Content-Type": "application/json", "X-Cryo-Event": event,
                 "X-Cryo-Signature": webhook.sign(secret, raw)})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_webhook_page_lists_deliveries_and_their_outcomes(split: Split, page: Page) -> None:
    split.cli("workflow", "put", "ci", str(script(split.dir, "ci.yaml", ON_PUSH)))
    status, hook = http(f"{split.url}{API}/webhooks", split.user_token, "POST",
                        {"name": "forge", "workflow": "ci"})
    assert status == 201
    status, bus = http(f"{split.url}{API}/webhooks", split.user_token, "POST", {"name": "bus"})
    assert status == 201
    assert _deliver(split, "forge", hook["secret"], "push", {"n": 1}) == 201
    assert _deliver(split, "forge", hook["secret"], "issues", {"n": 2}) == 202
    assert _deliver(split, "bus", bus["secret"], "ping", {"n": 3}) == 202
    assert _deliver(split, "forge", "not-the-secret", "push", {"n": 4}) == 401
    _live(page, split)
    page.goto(f"{split.url}/#/webhooks")
    rows = page.locator("#webhook-deliveries tbody tr")
    expect(rows).to_have_count(3)  # the refused one is not stored
    started = page.locator('#webhook-deliveries tr[data-outcome="started"]')
    expect(started).to_contain_text("accepted: started a run")
    expect(started.locator("a")).to_be_visible()
    expect(page.locator('#webhook-deliveries tr[data-outcome="ignored"]')).to_contain_text(
        "leaves this event out")
    expect(page.locator('#webhook-deliveries tr[data-outcome="published"]')).to_contain_text("ping")
    expect(page.locator("main")).to_contain_text("not recorded")
    assert page.errors == []  # type: ignore[attr-defined]
