"""Triggers made and changed in a real headless Chromium against a real server:
schedules (create, a refused cron, edit, next fire times, run now, pause, delete),
webhooks (create with the secret shown once, redeliver, pause, point at the bus) and
handlers (create, edit, pause, delete); a Viewer sees no buttons and the server refuses
the calls anyway; bad input is a 4xx with a JSON error."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from playwright.sync_api import Page, expect

from cryopg.triggers import webhook
from tests.e2e.conftest import Split
from tests.e2e.helpers import http, token
from tests.ui.conftest import login_url
from tests.ui.test_ui import _open_dev_link

API = "/api/v1/orgs/dev/projects/default"


def _put(split: Split, name: str) -> None:
    status, _ = http(f"{split.url}{API}/workflows/{name}", split.user_token, "PUT",
                     {"source": "#!/usr/bin/env bash\necho hi\n", "filename": f"{name}.sh"})
    assert status == 200


def _deliver(split: Split, name: str, secret: str, body: dict) -> int:
    raw = json.dumps(body).encode()
    req = urllib.request.Request(
        f"{split.url}/api/v1/hooks/dev/default/{name}", data=raw, method="POST",
        headers={"Content-Type": "application/json", "X-Cryo-Event": "push",
                 "X-Cryo-Signature": webhook.sign(secret, raw)})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_schedules_from_the_ui(split: Split, page: Page) -> None:
    _put(split, "greet")
    _put(split, "report")
    _open_dev_link(page, split)
    page.click("nav >> text=Schedules")
    page.click("#new-schedule")
    form = page.locator("#schedule-form")
    form.locator('input[name="name"]').fill("nightly")
    form.locator('select[name="workflow"]').select_option("greet")
    form.locator('input[name="cron"]').fill("61 3 * * *")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("cron")  # the server's own check
    form.locator('input[name="cron"]').fill("0 3 * * *")
    form.locator("button[type=submit]").click()
    row = page.locator('tr[data-schedule="nightly"]')
    expect(row).to_contain_text("0 3 * * * (UTC)")
    expect(row.locator("ol.fires li")).to_have_count(5)
    fires = row.locator("ol.fires li time").evaluate_all("ts => ts.map(t => t.dateTime)")
    assert all("T03:00:00" in f for f in fires), fires
    assert fires == sorted(fires) and len(set(fires)) == 5

    # Edit: another workflow and time; the next fire times follow.
    row.locator("button.edit").click()
    edit = page.locator("#schedule-edit")
    edit.locator('select[name="workflow"]').select_option("report")
    edit.locator('input[name="cron"]').fill("30 4 * * *")
    edit.locator("button[type=submit]").click()
    expect(row).to_contain_text("30 4 * * * (UTC)")
    expect(row).to_contain_text("report")
    fires = row.locator("ol.fires li time").evaluate_all("ts => ts.map(t => t.dateTime)")
    assert all("T04:30:00" in f for f in fires), fires

    # Run now: a run of the schedule's workflow, marked as started by the schedule.
    row.locator("button.run-now").click()
    expect(page.locator("#trigger-msg")).to_contain_text("Started")
    run_id = page.locator("#trigger-msg a").inner_text()
    runs = http(f"{split.url}{API}/runs?workflow=report", split.user_token)[1]["runs"]
    assert len(runs) == 1 and runs[0]["id"].endswith(run_id)
    shown = http(f"{split.url}{API}/runs/{runs[0]['id']}", split.user_token)[1]
    assert shown["triggered_by"]["name"] == "nightly", shown
    assert shown["input"]["trigger"]["manual"] is True

    # Pause, resume, delete.
    row.locator("button.pause-resume").click()
    expect(row).to_contain_text("paused")
    row.locator("button.pause-resume").click()
    expect(row.locator("ol.fires li")).to_have_count(5)
    row.locator("button.delete").click()  # the confirm dialog is accepted (conftest)
    expect(page.locator('tr[data-schedule="nightly"]')).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]


def test_webhooks_and_handlers_from_the_ui(split: Split, page: Page) -> None:
    _put(split, "greet")
    _open_dev_link(page, split)
    page.click("nav >> text=Webhooks")
    page.click("#new-webhook")
    form = page.locator("#webhook-form")
    form.locator('input[name="name"]').fill("gh")
    form.locator('select[name="workflow"]').select_option("greet")
    form.locator("button[type=submit]").click()
    secret = page.locator("#webhook-secret").inner_text()
    assert len(secret) > 16
    expect(page.locator('tr[data-webhook="gh"]')).to_contain_text("/api/v1/hooks/dev/default/gh")

    # A delivery, then "redeliver": a second run from the same body, shown as a redelivery.
    assert _deliver(split, "gh", secret, {"n": 1}) == 201
    page.reload()
    first = page.locator('#webhook-deliveries tr[data-outcome="started"]')
    expect(first).to_have_count(1)
    first.locator("button.redeliver").click()
    expect(page.locator("#trigger-msg")).to_contain_text("Delivered again: started")
    expect(page.locator('#webhook-deliveries tr[data-outcome="started"]')).to_have_count(2)
    expect(page.locator("#webhook-deliveries")).to_contain_text("redelivery of #")
    runs = http(f"{split.url}{API}/runs?workflow=greet", split.user_token)[1]["runs"]
    assert len(runs) == 2

    # Paused, a delivery is kept and starts nothing; resumed, it is redelivered.
    row = page.locator('tr[data-webhook="gh"]')
    row.locator("button.pause-resume").click()
    expect(row).to_contain_text("paused")
    assert _deliver(split, "gh", secret, {"n": 2}) == 202
    row.locator("button.pause-resume").click()
    expect(row.locator("button.pause-resume")).to_have_text("Pause")
    held = page.locator('#webhook-deliveries tr[data-outcome="paused"]')
    expect(held).to_contain_text("the webhook was paused")
    held.locator("button.redeliver").click()
    expect(page.locator('#webhook-deliveries tr[data-outcome="started"]')).to_have_count(3)

    # Edit: no workflow, so deliveries go to the bus.
    row.locator("button.edit").click()
    edit = page.locator("#webhook-edit")
    edit.locator('select[name="workflow"]').select_option("")
    edit.locator("button[type=submit]").click()
    expect(row).to_contain_text("the bus")

    # Handlers: create, edit, pause, delete.
    page.click("nav >> text=Handlers")
    page.click("#new-handler")
    hform = page.locator("#handler-form")
    hform.locator('input[name="name"]').fill("on-push")
    hform.locator("button[type=submit]").click()  # no event named
    expect(hform.locator(".error")).to_contain_text("event")
    hform.locator('input[name="event"]').fill("push")
    hform.locator("button[type=submit]").click()
    hrow = page.locator('tr[data-handler="on-push"]')
    expect(hrow).to_contain_text("push")
    hrow.locator("button.edit").click()
    page.locator('#handler-edit input[name="event"]').fill("deploy.done")
    page.locator("#handler-edit button[type=submit]").click()
    expect(hrow).to_contain_text("deploy.done")
    hrow.locator("button.pause-resume").click()
    expect(hrow).to_contain_text("paused")
    # A paused handler starts nothing for an event published meanwhile.
    assert http(f"{split.url}{API}/events/deploy.done", split.user_token, "POST",
                {"payload": {}})[0] in (200, 201)
    assert len(http(f"{split.url}{API}/runs?workflow=greet", split.user_token)[1]["runs"]) == 3
    hrow.locator("button.delete").click()
    expect(page.locator('tr[data-handler="on-push"]')).to_have_count(0)
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_viewer_sees_no_trigger_buttons_and_the_server_refuses(split: Split,
                                                                  page: Page) -> None:
    _put(split, "greet")
    owner = split.user_token
    assert http(f"{split.url}{API}/schedules", owner, "POST",
                {"name": "hourly", "workflow": "greet", "every": "1h"})[0] == 201
    assert http(f"{split.url}{API}/handlers", owner, "POST",
                {"name": "h", "event": "push", "workflow": "greet"})[0] == 201
    status, hook = http(f"{split.url}{API}/webhooks", owner, "POST", {"name": "gh",
                                                                       "workflow": "greet"})
    assert status == 201
    assert _deliver(split, "gh", hook["secret"], {"n": 1}) == 201
    viewer = token(split.dsn, "user", member="vic", role="viewer")
    page.goto(login_url(split, viewer))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/schedules")
    expect(page.locator('tr[data-schedule="hourly"] ol.fires li')).to_have_count(5)
    assert page.locator("#new-schedule, button.run-now, button.edit, button.delete").count() == 0
    page.goto(f"{split.url}/#/webhooks")
    expect(page.locator('#webhook-deliveries tr[data-outcome="started"]')).to_have_count(1)
    assert page.locator("#new-webhook, button.redeliver, button.pause-resume").count() == 0
    page.goto(f"{split.url}/#/handlers")
    expect(page.locator('tr[data-handler="h"]')).to_be_visible()
    assert page.locator("#new-handler, button.edit, button.pause-resume").count() == 0
    # The server refuses them whatever the page shows.
    delivery = http(f"{split.url}{API}/webhook-deliveries", viewer)[1]["deliveries"][0]["id"]
    for method, path, body in [
            ("POST", "/schedules/hourly/run", {}), ("PUT", "/schedules/hourly",
                                                     {"workflow": "greet", "every": "2h"}),
            ("PUT", "/handlers/h", {"event": "x", "workflow": "greet"}),
            ("POST", "/handlers/h/pause", {}), ("POST", "/webhooks/gh/pause", {}),
            ("PUT", "/webhooks/gh", {}), ("POST", f"/webhook-deliveries/{delivery}/redeliver", {})]:
        status, got = http(f"{split.url}{API}{path}", viewer, method, body)
        assert status == 403 and got["error"]["code"], (path, status, got)
    # Bad input: a 4xx with a JSON error, never a 5xx.
    for method, path, body, want in [
            ("PUT", "/schedules/nope", {"workflow": "greet", "every": "1h"}, 404),
            ("PUT", "/schedules/hourly", {"workflow": "greet", "cron": "x y"}, 400),
            ("PUT", "/schedules/hourly", {"workflow": "greet"}, 400),
            ("PUT", "/schedules/hourly", {"workflow": "gone", "every": "1h"}, 404),
            ("POST", "/schedules/nope/run", {}, 404),
            ("POST", "/webhook-deliveries/abc/redeliver", {}, 400),
            ("POST", "/webhook-deliveries/999999/redeliver", {}, 404),
            ("PUT", "/webhooks/gh", {"status_url": "https://x.example/s"}, 400),
            ("PUT", "/handlers/h", {"event": "e" * 201, "workflow": "greet"}, 400),
            ("POST", "/handlers/nope/resume", {}, 404)]:
        status, got = http(f"{split.url}{API}{path}", owner, method, body)
        assert status == want and got["error"]["message"], (path, status, got)
    assert page.errors == []  # type: ignore[attr-defined]
