"""Forms generated from a JSON Schema (an approval's fields; a workflow's input uses the
same module, schemafields.js): an array field is sent as an array, a non-integer in an
integer field gets the page's own message (not the browser's bubble beside a stale
message), and a required boolean must be answered."""

from __future__ import annotations

import json

from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import login_url

FIELDS = {"type": "object", "required": ["ticket", "replicas", "regions", "confirm"],
          "properties": {
              "ticket": {"type": "string", "minLength": 3},
              "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
              "regions": {"type": "array", "items": {"type": "string"}, "minItems": 1},
              "ports": {"type": "array", "items": {"type": "integer"}},
              "confirm": {"type": "boolean", "title": "I checked the canary"},
              "notify": {"type": "boolean"}}}
GRAPH = {"kind": "graph", "graph": {
    "nodes": [{"id": "approve", "type": "approval", "status": "waiting", "attempt": 0,
               "output": None, "approval": {"fields": FIELDS}}],
    "edges": []}}


def test_approval_form_arrays_integers_and_required_booleans(split: Split, page: Page) -> None:
    """The run JSON gains an approval node as the graph contract serves it (as in
    test_ui.py), and the approval POST is answered by a stand-in that records it."""
    run_id = submit(split, script(split.dir, "pipe.sh", "#!/usr/bin/env bash\necho hi\n"))
    answers: list[dict] = []

    def run_json(route: Route) -> None:
        real = route.fetch()
        route.fulfill(response=real, json={**real.json(), **GRAPH})

    def approve(route: Route) -> None:
        answers.append(json.loads(route.request.post_data or "{}"))
        route.fulfill(status=200, json={})

    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.route(f"**/runs/{run_id.replace(':', '%3A')}", run_json)
    page.route(f"**/runs/{run_id}", run_json)
    page.route("**/approvals/approve", approve)
    page.goto(f"{split.url}/#/run/{run_id}")
    form = page.locator("#approval-approve")
    error = page.locator("#approval-error-approve")
    submit_button = form.locator("button[type=submit]")
    submit_button.click()
    expect(error).to_have_text("ticket is required")
    form.locator('[name="ticket"]').fill("OPS-1")
    expect(error).to_have_text("")  # typing clears the old message
    form.locator('[name="replicas"]').fill("2.5")
    submit_button.click()
    expect(error).to_have_text("replicas must be an integer")
    form.locator('[name="replicas"]').fill("3")
    form.locator('[name="regions"]').fill("eu-west, us-east")
    form.locator('[name="ports"]').fill("80, x")
    submit_button.click()
    expect(error).to_have_text("ports[1] must be an integer")
    form.locator('[name="ports"]').fill("[80, 443]")
    submit_button.click()  # the required boolean is still unanswered
    expect(error).to_have_text("confirm is required")
    assert answers == []  # nothing left the browser yet
    form.locator('[name="confirm"]').select_option(label="yes")
    submit_button.click()
    expect(error).to_have_text("approved")
    assert answers == [{"ticket": "OPS-1", "replicas": 3, "regions": ["eu-west", "us-east"],
                        "ports": [80, 443], "confirm": True, "notify": False}]
    # No field carries the browser's own constraints (its bubble would stop the submit).
    assert form.evaluate("f => f.noValidate") is True
    page.unroute_all(behavior="ignoreErrors")
    assert page.errors == []  # type: ignore[attr-defined]
