"""The web UI in a real headless Chromium against a real server and agent."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.request
from typing import Any

import psycopg
from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import http, script, show, submit, token, wait_for
from tests.ui.conftest import agent_post, login_url, shot

HOSTILE = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=1>"

WORKFLOW = r"""#!/usr/bin/env bash
set -e
cryopg step prep --label 'prep <b>label</b>' -- echo 'prepared'
cryopg state set note '"<b>cell</b><script>window.__pwned=1</script>"'
cryopg state set balance '{"n": 1, "html": "<i>x</i>"}' --entity cust-1
cryopg state set balance '{"n": 2, "html": "<i>x</i>"}' --entity cust-1
for i in 1 2 3 4 5 6; do
  printf '\033[31mred line %s\033[0m <script>window.__pwned=1</script>\n' "$i"
  sleep 0.4
done
cryopg annotate '**Deployed** to `prod` <img src=x onerror=window.__pwned=1> [docs](https://example.com)'
cryopg step slow -- sleep 3
cryopg sleep 3s
cryopg step finish -- echo done
echo all-done
"""


def _open_dev_link(page: Page, split: Split) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    assert "login=" not in page.url  # the fragment login is taken and removed


def test_live_list_run_page_log_timeline_and_escaping(split: Split, page: Page) -> None:
    split.agent("ui-agent")
    _open_dev_link(page, split)
    shot(page, "runs-empty")
    wf = script(split.dir, "deploy<b>x.sh", WORKFLOW)
    run_id = submit(split, wf)
    # The run appears without a reload, pushed through the project stream.
    row = page.locator(f'tr[data-run="{run_id}"]')
    expect(row).to_be_visible(timeout=15_000)
    expect(row.locator(".workflow")).to_have_text("deploy<b>x.sh")
    row.locator("a").click()
    expect(page.locator("#run-header h1")).to_contain_text(run_id)

    # The log streams while the run runs: a line arrives, then later ones, in colour.
    log = page.locator("#log")
    expect(log).to_contain_text("red line 1", timeout=20_000)
    assert "running" in page.locator("#run-status").inner_text()
    expect(log).to_contain_text("red line 4", timeout=20_000)
    assert log.locator("span.ansi-31").count() >= 1
    assert "<script>window.__pwned=1</script>" in log.inner_text()
    assert log.locator("script").count() == 0

    # The step running now is drawn as running among the checkpoints, in order.
    running = page.locator('#checkpoints li[data-status="running"]')
    expect(running).to_contain_text("slow", timeout=20_000)
    shot(page, "run-step-running")
    cps = page.locator("#checkpoints li.checkpoint")
    assert cps.nth(0).inner_text().startswith("succeeded")
    assert "prep" in cps.nth(0).inner_text() and "prep <b>label</b>" in cps.nth(0).inner_text()

    # Then the sleep: parked, sleeping until a time, on the header and as a checkpoint.
    expect(page.locator("#run-status")).to_contain_text("sleeping until", timeout=20_000)
    expect(page.locator('#checkpoints li[data-status="waiting"]')).to_contain_text("sleep")
    shot(page, "run-sleeping")
    # ... and its completion on the timeline, live.
    expect(page.locator('#timeline li[data-kind="succeeded"]')).to_be_visible(timeout=30_000)
    expect(page.locator("#run-status")).to_contain_text("succeeded")
    kinds = page.locator("#timeline li").evaluate_all("els => els.map(e => e.dataset.kind)")
    assert kinds[0] == "submitted" and "timer_scheduled" in kinds and kinds[-1] == "succeeded"
    assert [c.split()[1] for c in page.locator("#checkpoints li.checkpoint").all_inner_texts()] == [
        "step", "step", "sleep", "step"]
    expect(log).to_contain_text("all-done")

    # Annotations are markdown, sanitised: markup from the text stays text.
    note = page.locator("#timeline .note").first  # one per pass: annotate is no memo
    expect(note.locator("strong")).to_have_text("Deployed")
    expect(note.locator("code")).to_have_text("prod")
    expect(note.locator("a")).to_have_attribute("href", "https://example.com")
    assert note.locator("img").count() == 0
    assert "<img src=x onerror=window.__pwned=1>" in note.inner_text()
    # State cells with their versions; a value holding HTML is shown as text.
    cells = page.locator("#state-cells")
    expect(cells).to_contain_text("<b>cell</b><script>window.__pwned=1</script>")
    assert cells.locator("b, script").count() == 0
    entity = page.locator("#entity-cells tbody tr")
    expect(entity).to_have_count(1)
    assert entity.locator("td").all_inner_texts()[:2] == ["cust-1", "balance"]
    assert '"html": "<i>x</i>"' in entity.inner_text() and entity.locator("i").count() == 0
    assert int(entity.locator("td").nth(3).inner_text()) >= 2  # each pass writes it again
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []  # type: ignore[attr-defined]
    shot(page, "run-finished")

    page.goto(f"{split.url}/#/runs")
    expect(page.locator(f'tr[data-run="{run_id}"] .badge')).to_have_text("succeeded")
    shot(page, "runs-list")


def test_filters_children_and_signal_and_cancel(split: Split, page: Page) -> None:
    split.agent("ui-agent")
    kid = script(split.dir, "kid.sh", "#!/usr/bin/env bash\necho kid\n")
    parent = script(split.dir, "parent.sh",
                    f"#!/usr/bin/env bash\ncryopg spawn {kid} >/dev/null\n"
                    "cryopg wait-signal go >/dev/null\necho got-go\n")
    other = script(split.dir, "other.sh", "#!/usr/bin/env bash\nexit 3\n")
    run_id = submit(split, parent)
    failed = submit(split, other)
    _open_dev_link(page, split)
    row = page.locator(f'tr[data-run="{run_id}"]')
    expect(row.locator(".substate")).to_have_text("awaiting signal", timeout=20_000)
    # Its child sits under it, not among the top-level runs.
    expect(row.locator("button.expand")).to_be_visible()
    assert page.locator("tr.child").count() == 0
    row.locator("button.expand").click()
    expect(page.locator("tr.child")).to_have_count(1)
    expect(page.locator("tr.child td").nth(4)).to_have_text("parent")  # after the select box
    # Filters: by status, by workflow.
    page.select_option("#filter-status", "failed")
    expect(page.locator("#runs-body tr")).to_have_count(1)
    expect(page.locator(f'tr[data-run="{failed}"]')).to_be_visible()
    page.goto(f"{split.url}/#/runs?workflow=parent.sh")
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(1)
    # A Member signals the waiting run from its page, and it finishes.
    page.goto(f"{split.url}/#/run/{run_id}")
    page.fill("#signal-name", "go")
    page.fill("#signal-payload", '{"ok": true}')
    page.click("#signal-form button")
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=20_000)
    expect(page.locator("#log")).to_contain_text("got-go")
    assert page.locator("#cancel").count() == 0  # a finished run has no cancel button


def test_viewer_gets_no_buttons_and_cancel_for_a_member(split: Split, page: Page) -> None:
    wf = script(split.dir, "wait.sh", "#!/usr/bin/env bash\ncryopg wait-signal never\n")
    run_id = submit(split, wf)  # no agent: it stays pending
    viewer = token(split.dsn, "user", member="vic", role="viewer")
    page.goto(login_url(split, viewer))
    expect(page.locator(f'tr[data-run="{run_id}"]')).to_be_visible(timeout=60_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-status")).to_contain_text("pending", timeout=60_000)
    assert page.locator("#cancel").count() == 0 and page.locator("#signal-form").count() == 0
    page.evaluate("sessionStorage.clear()")
    page.goto(login_url(split))
    # Let the sign-in land (the list shows) before moving on, or the page may still
    # hold the viewer's role.
    expect(page.locator(f'tr[data-run="{run_id}"]')).to_be_visible(timeout=60_000)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-status")).to_contain_text("pending", timeout=60_000)
    # Live hellos and changes re-render nothing the button depends on: it stays the same
    # element (issue 38: a click landed on a Cancel being replaced), so one click sends.
    # Counted in the page: Cancel taken out of the header, and the State section (drawn
    # after the header) replaced by a refresh that read the run after this began.
    page.evaluate(r"""() => {
        window.__churn = 0; window.__reads = 0; window.__fresh = 0;
        const real = window.fetch;
        window.fetch = (url, o) => {
            if (/\/runs\/[^/?]+$/.test(String(url))) window.__reads++;
            return real(url, o);
        };
        new MutationObserver((ms) => { for (const m of ms) for (const n of m.removedNodes)
            if (n.nodeType === 1 && (n.id === 'cancel' || n.querySelector('#cancel')))
                window.__churn++; })
          .observe(document.getElementById('run-header'), { childList: true, subtree: true });
        new MutationObserver(() => { if (window.__reads) window.__fresh++; })
          .observe(document.getElementById('state'), { childList: true });
        document.getElementById('cancel').__first = true;
    }""")
    http(f"{split.url}/api/v1/orgs/dev/projects/default/runs/{run_id}/signal/poke",
         split.user_token, "POST", {"payload": None})
    # (a stream that dropped on a loaded machine reconnects after up to 30 s)
    page.wait_for_function("() => window.__fresh > 0", timeout=90_000)
    assert page.evaluate("window.__churn") == 0
    assert page.evaluate("document.getElementById('cancel').__first === true")
    with page.expect_request(lambda r: r.method == "POST" and "/cancel" in r.url):
        page.click("#cancel")
    # The server cancelled it; the page, which re-reads the run after the cancel, says so.
    wait_for("the run cancelled", lambda: show(split, run_id)["status"] == "cancelled")
    expect(page.locator("#run-status")).to_contain_text("cancelled", timeout=60_000)


def test_another_orgs_run_is_absent_and_sign_in_with_a_token(split: Split, page: Page) -> None:
    wf = script(split.dir, "secret-plan.sh", "#!/usr/bin/env bash\necho hidden\n")
    run_id = submit(split, wf)
    with psycopg.connect(split.dsn, autocommit=True) as db:
        db.execute("SELECT cryo.ensure_org('acme', 'Acme'),"
                   " cryo.ensure_project('acme', 'default', 'D')")
    eve = token(split.dsn, "user", org="acme", member="eve", role="owner")
    page.goto(f"{split.url}/")
    page.fill("#login-token", "cryo_u_not-a-token")
    page.fill("#login-org", "acme")
    page.click("#login-submit")
    expect(page.locator("#login-error")).not_to_be_empty()
    page.fill("#login-token", eve)
    page.click("#login-submit")
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    expect(page.locator("#runs-body")).to_contain_text("No runs.")
    # The dev org's run, asked for by id under acme's project: absent, not forbidden.
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#page-error")).to_be_visible()
    expect(page.locator("main h1")).to_have_text("Not found")
    assert "hidden" not in page.content() and "secret-plan" not in page.content()
    shot(page, "other-org-absent")


def test_ten_thousand_runs_load_one_bounded_page(split: Split, page: Page) -> None:
    with psycopg.connect(split.dsn, autocommit=True) as db:
        db.execute("SELECT cryo.submit_script('dev', 'default', 'bulk-' || i || '.sh', NULL, "
                   "'\\x00', NULL, NULL, '{shell}') FROM generate_series(1, 10000) i")
    lists: list[tuple[str, int]] = []
    page.on("requestfinished", lambda r: lists.append((r.url, r.sizes()["responseBodySize"]))
            if "/runs?" in r.url else None)
    t0 = time.monotonic()
    _open_dev_link(page, split)
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(50)
    elapsed = time.monotonic() - t0
    assert len(lists) == 1, lists
    assert lists[0][1] < 64 * 1024, lists
    assert elapsed < 10, elapsed
    first = page.locator("#runs-body tr[data-run]").first.get_attribute("data-run")
    page.click("#next-page")
    expect(page.locator("#runs-body tr[data-run]").first).not_to_have_attribute("data-run", first)
    expect(page.locator("#runs-body tr[data-run]")).to_have_count(50)


def test_a_50_mb_log_shows_a_tail_window_and_the_tab_stays_responsive(
        split: Split, page: Page) -> None:
    run_id = submit(split, script(split.dir, "chatty.sh", "#!/usr/bin/env bash\necho hi\n"))
    grant = agent_post(split, "/claim", {"agent_id": "fake", "capabilities": ["shell"],
                                          "wait": 5})
    assert grant["run_id"] == run_id
    line = b"\x1b[32mok\x1b[0m " + b"x" * 90 + b"\n"
    chunk = line * (1024 * 1024 // len(line))
    for i in range(50):
        agent_post(split, f"/runs/{run_id}/logs",
                    {"claim_token": grant["claim_token"],
                     "data": base64.b64encode(chunk + f"chunk {i} end\n".encode()).decode()})
    _open_dev_link(page, split)
    t0 = time.monotonic()
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#log")).to_contain_text("chunk 49 end", timeout=20_000)
    expect(page.locator("#log-info")).to_contain_text("showing the last")
    loaded = time.monotonic() - t0
    kept = page.evaluate("document.getElementById('log').textContent.length")
    assert kept <= 600 * 1024, kept
    assert "chunk 0 end" not in page.locator("#log").inner_text()
    # The tab answers at once: a script round trip is quick while the stream stays open.
    t1 = time.monotonic()
    assert page.evaluate("1 + 1") == 2
    assert time.monotonic() - t1 < 1.0
    assert loaded < 15, loaded
    shot(page, "run-big-log")


GRAPH = {
    "kind": "graph",
    "graph": {
        "nodes": [
            {"id": "build", "type": "shell", "status": "succeeded", "attempt": 1,
             "output": {"artifact": "app-1.2.tar", "html": "<b>not bold</b>"}},
            {"id": "test", "type": "shell", "status": "succeeded", "attempt": 1, "output": None},
            {"id": "approve", "type": "approval", "status": "waiting", "attempt": 0,
             "output": None,
             "approval": {"fields": {"type": "object", "required": ["ticket", "replicas"],
                                     "properties": {
                                         "ticket": {"type": "string", "title": "Ticket",
                                                    "minLength": 3},
                                         "replicas": {"type": "integer", "minimum": 1,
                                                      "maximum": 10},
                                         "canary": {"type": "boolean"}}}}},
            {"id": "deploy", "type": "shell", "status": "pending", "attempt": 0, "output": None},
            {"id": "notify", "type": "http", "status": "skipped", "attempt": 0, "output": None},
        ],
        "edges": [{"from": "build", "to": "test"}, {"from": "test", "to": "approve"},
                  {"from": "approve", "to": "deploy"}, {"from": "deploy", "to": "notify"}],
    },
}


def test_pipeline_strip_and_approval_form_on_the_graph_contract(
        split: Split, page: Page) -> None:
    """Until the graph tier serves it, the run JSON gains the contract's graph here: the
    browser's request for the run is answered with the real run plus GRAPH, and the
    approval POST by a stand-in that answers as the contract says."""
    run_id = submit(split, script(split.dir, "pipe.sh", "#!/usr/bin/env bash\necho hi\n"))
    answers: list[dict] = []

    def run_json(route: Route) -> None:
        real = route.fetch()
        route.fulfill(response=real, json={**real.json(), **GRAPH})

    def approve(route: Route) -> None:
        body = json.loads(route.request.post_data or "{}")
        answers.append(body)
        if not str(body.get("ticket", "")).startswith("OPS-"):
            route.fulfill(status=400, json={"error": {
                "code": "invalid_argument", "message": "ticket: must start with OPS-"}})
        else:
            route.fulfill(status=200, json={})

    _open_dev_link(page, split)
    page.route(f"**/runs/{run_id.replace(':', '%3A')}", run_json)
    page.route(f"**/runs/{run_id}", run_json)
    page.route("**/approvals/approve", approve)
    page.goto(f"{split.url}/#/run/{run_id}")
    strip = page.locator("#strip")
    expect(strip.locator(".node")).to_have_count(5)
    assert strip.locator(".node").evaluate_all("els => els.map(e => e.dataset.node)") == [
        "build", "test", "approve", "deploy", "notify"]
    for node, status in [("build", "succeeded"), ("approve", "waiting"), ("deploy", "pending"),
                         ("notify", "skipped")]:
        expect(strip.locator(f'[data-node="{node}"]')).to_have_class(f"node s-{status}")
    strip.locator('[data-node="build"]').click()
    expect(page.locator("#node-output")).to_contain_text('"artifact": "app-1.2.tar"')
    expect(page.locator("#node-output")).to_contain_text("<b>not bold</b>")
    shot(page, "pipeline-strip")

    form = page.locator("#approval-approve")
    error = page.locator("#approval-error-approve")
    form.locator("button[type=submit]").click()  # empty: refused in the browser
    expect(error).to_have_text("ticket is required")
    form.locator('input[name="ticket"]').fill("TK-1")
    form.locator('input[name="replicas"]').fill("40")
    form.locator("button[type=submit]").click()
    expect(error).to_have_text("replicas must be at most 10")
    assert answers == []  # nothing left the browser yet
    form.locator('input[name="replicas"]').fill("3")
    form.locator("button[type=submit]").click()  # the server refuses, naming the field
    expect(error).to_have_text("ticket: must start with OPS-")
    shot(page, "approval-refused")
    form.locator('input[name="ticket"]').fill("OPS-7")
    form.locator('input[name="canary"]').check()
    form.locator("button[type=submit]").click()
    expect(error).to_have_text("approved")
    assert answers[-1] == {"ticket": "OPS-7", "replicas": 3, "canary": True}
    page.unroute_all(behavior="ignoreErrors")  # a refresh still in flight may outlive us


def test_project_pages_events_secrets_members(split: Split, page: Page) -> None:
    assert http(f"{split.url}/api/v1/orgs/dev/projects/default/events/deploy<x>",
                split.user_token, "POST", {"payload": {"v": HOSTILE}})[0] == 201
    assert http(f"{split.url}/api/v1/orgs/dev/projects/default/secrets/API_KEY",
                split.user_token, "PUT", {"value": "s3cr3t-value"})[0] == 201
    _open_dev_link(page, split)
    page.click("text=Events")
    expect(page.locator("#events")).to_contain_text("deploy<x>")
    expect(page.locator("#events")).to_contain_text(HOSTILE.replace('"', '\\"'))
    page.click("text=Secrets")
    expect(page.locator("#secrets")).to_contain_text("API_KEY")
    assert "s3cr3t-value" not in page.content()
    page.click("text=Members")
    expect(page.locator("#members")).to_contain_text("owner")
    assert page.evaluate("window.__pwned") is None
    shot(page, "members")


def test_the_page_and_files_are_served_without_a_token(split: Split) -> None:
    for path in ("/", "/ui/app.js", "/ui/style.css"):
        with urllib.request.urlopen(f"{split.url}{path}", timeout=10) as resp:
            assert resp.status == 200
            assert "script-src 'self'" in resp.headers["Content-Security-Policy"]
    status, body = http(f"{split.url}/ui/../pyproject.toml", "x")
    assert status == 404 or (isinstance(body, dict) and "error" in body)


def test_cryopg_dev_prints_the_ui_link_with_a_dev_login(stack: Any, page: Page) -> None:
    err = stack.dir / "dev.stderr"
    link = wait_for("the UI link", lambda: re.search(r"web UI (\S+)", err.read_text()))[1]
    assert link.startswith(f"{stack.url}/#login=cryo_u_") and "&org=dev&project=default" in link
    page.goto(link)
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    expect(page.locator("#who")).to_contain_text("dev/default")
    assert "login=" not in page.url
