"""Small defects of the web UI (issue 41, item 5): a graph run's log lines show their
time with the timestamps toggle (`times=1` on a graph run's log); the canvas editor puts
a node added later inside the board, not past its right edge, and takes the saved name
as its heading and the tab's title."""

from __future__ import annotations

import json
import urllib.request

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import finished, http, script, submit
from tests.ui.conftest import login_url

API = "/api/v1/orgs/dev/projects/default"


def test_graph_run_log_lines_have_times(split: Split, page: Page) -> None:
    split.agent("leftovers-agent")
    doc = {"version": "cryosleep-graph/v1",
           "nodes": [{"id": "hello", "type": "shell", "config": {"run": "echo hi-there"}}],
           "edges": []}
    rid = submit(split, script(split.dir, "timed.json", json.dumps(doc)))
    finished(split, rid)
    # The API: one JSON line per chunk, prefixed lines, with the time it was stored.
    req = urllib.request.Request(f"{split.url}{API}/runs/{rid}/logs?times=1",
                                 headers={"Authorization": f"Bearer {split.user_token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"].startswith("application/x-ndjson")
        rows = [json.loads(line) for line in resp.read().decode().splitlines()]
    said = [r for r in rows if "[hello] hi-there" in r["text"]]
    assert said and said[0]["at"] and said[0]["id"] > 0, rows
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/run/{rid}")
    expect(page.locator("#log")).to_contain_text("[hello] hi-there")
    page.locator("#log-ts").check()
    stamp = page.locator("#log .ts").first
    expect(stamp).to_have_attribute("data-t", said[0]["at"][11:23])  # the browser is UTC here
    assert page.locator("#log .ts").first.evaluate(
        "e => getComputedStyle(e, '::before').display") == "inline"
    assert page.errors == []  # type: ignore[attr-defined]


def test_canvas_places_new_nodes_inside_the_board_and_titles_the_saved_graph(
        split: Split, page: Page) -> None:
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/workflows/new")
    expect(page.locator("h1")).to_contain_text("New graph")
    palette = page.locator('#palette button[data-type="shell"]')
    for i in range(1, 7):
        palette.click()
        expect(page.locator(f'#canvas [data-node="shell{i}"]')).to_have_count(1)
    board = page.locator("#board").bounding_box()
    assert board
    for i in range(1, 7):
        box = page.locator(f'#canvas [data-node="shell{i}"] rect').bounding_box()
        assert box and box["x"] + box["width"] <= board["x"] + board["width"], (i, box, board)
    # No two boxes overlap.
    boxes = [page.locator(f'#canvas [data-node="shell{i}"] rect').bounding_box()
             for i in range(1, 7)]
    for a in range(6):
        for b in range(a + 1, 6):
            p, q = boxes[a], boxes[b]
            assert p and q
            assert (p["x"] + p["width"] <= q["x"] or q["x"] + q["width"] <= p["x"]
                    or p["y"] + p["height"] <= q["y"] or q["y"] + q["height"] <= p["y"]), (a, b)
    for i in range(1, 7):
        page.locator(f'#canvas [data-node="shell{i}"] rect').click()
        page.locator("#cfg-run").fill(f"echo {i}")
    page.fill("#wf-name", "placed")
    page.click("#save")
    expect(page.locator("#save-status")).to_have_text("saved as placed")
    expect(page.locator("h1")).to_have_text("placed canvas")
    assert page.title() == "placed · canvas · cryopg"
    assert page.errors == []  # type: ignore[attr-defined]


def test_runs_found_by_a_value_of_their_sealed_input(split: Split, page: Page) -> None:
    """`cryopg submit --input` seals the input; the search finds the run by one of its
    values (a keyed digest of each, stored at submit), exactly, never by a piece of one,
    and never an untrusted run's."""
    body = "#!/usr/bin/env bash\necho hi\n"
    sealed = submit(split, script(split.dir, "inp.sh", body), "--input",
                    '{"env": "Moon-Base", "n": 42, "tags": ["blue"]}')
    untrusted = submit(split, script(split.dir, "inp2.sh", body), "--untrusted", "--input",
                       '{"env": "moon-base"}')
    other = submit(split, script(split.dir, "inp3.sh", body), "--input", '{"env": "mars"}')
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    for q in ("moon-base", "MOON-BASE", "42", "blue"):
        page.goto(f"{split.url}/#/runs?q={q}")
        # the search's answer replaces the list (slowly on a loaded machine)
        expect(page.locator("#runs-body tr[data-run]")).to_have_count(1, timeout=30_000)
        expect(page.locator(f'tr[data-run="{sealed}"]')).to_be_visible()
        expect(page.locator("#runs-total")).to_have_text("1 run")
    for q in ("moon", "ase"):  # a piece of a value finds nothing: only its digest is kept
        page.goto(f"{split.url}/#/runs?q={q}")
        expect(page.locator("#runs-body")).to_contain_text("No runs.", timeout=30_000)
    # Run again with the same input: found by it too; the untrusted run never is.
    status, again = http(f"{split.url}{API}/runs/{sealed}/run-again", split.user_token, "POST", {})
    assert status == 201, again
    status, got = http(f"{split.url}{API}/runs?q=moon-base&limit=50", split.user_token)
    ids = {r["id"] for r in got["runs"]}
    assert status == 200 and ids == {sealed, again["id"]}, got
    assert untrusted not in ids and other not in ids
    assert page.errors == []  # type: ignore[attr-defined]
