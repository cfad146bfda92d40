"""The canvas (issue 27) in headless Chromium against a real server and agent: a three-node
graph built with the mouse (palette, drag to connect, schema forms, inline expression
checks, undo/redo, JSON in sync), one node of every type the server serves filled in
through its schema's form and saved, refused with the server's line on the node it names,
saved, run and watched to the end on the DAG view (node panel, Gantt); a stored pipeline
read-only with its source; a 500-node graph laid out and drawn in under a second."""

from __future__ import annotations

import json
import time
from typing import Any

from playwright.sync_api import Page, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import http, script, submit
from tests.ui.conftest import axe_serious, login_url, shot
from tests.ui.perf import record

TYPES_PATH = "/api/v1/graphs/node-types"


def drag(page: Page, source: Any, target: Any) -> None:
    a, b = source.bounding_box(), target.bounding_box()
    page.mouse.move(a["x"] + a["width"] / 2, a["y"] + a["height"] / 2)
    page.mouse.down()
    page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] / 2, steps=8)
    page.mouse.up()


def test_build_three_nodes_with_the_mouse_save_run_and_watch_the_dag(split: Split,
                                                                    axe_page: Page) -> None:
    page = axe_page
    split.agent("canvas-agent")
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/workflows/new")
    palette = page.locator('#palette button[data-type="shell"]')
    for _ in range(3):
        palette.click()
    canvas = page.locator("#canvas")
    for i in (1, 2, 3):
        expect(canvas.locator(f'[data-node="shell{i}"]')).to_be_visible()
    # Connect by dragging from a node's port onto the next node.
    drag(page, canvas.locator('[data-port="shell1"]'), canvas.locator('[data-node="shell2"] rect'))
    drag(page, canvas.locator('[data-port="shell2"]'), canvas.locator('[data-node="shell3"] rect'))
    expect(canvas.locator('[data-edge="shell1>shell2"]')).to_have_count(1)
    expect(canvas.locator('[data-edge="shell2>shell3"]')).to_have_count(1)
    # Undo takes the last edge away, redo puts it back; the JSON follows.
    page.click("#undo")
    expect(canvas.locator('[data-edge="shell2>shell3"]')).to_have_count(0)
    page.click("#redo")
    expect(canvas.locator('[data-edge="shell2>shell3"]')).to_have_count(1)
    doc = json.loads(page.locator("#doc-json").input_value())
    assert doc["edges"] == [{"from": "shell1", "to": "shell2"}, {"from": "shell2", "to": "shell3"}]
    # Configure from the type's schema; `if` is checked as it is typed.
    for i, word in ((1, "one"), (2, "two")):
        canvas.locator(f'[data-node="shell{i}"] rect').click()
        page.locator("#cfg-run").fill(f"echo canvas-{word}")
    canvas.locator('[data-node="shell3"] rect').click()
    page.locator("#node-if").fill("nodes.nope.output")
    expect(page.locator("#node-if-error")).to_have_text("no node 'nope' in this graph")
    page.locator("#node-if").fill("nodes.shell2.output.exit_code == 0")
    expect(page.locator("#node-if-error")).to_have_text("")
    page.locator("#cfg-run-mode").select_option("$template")
    page.locator("#cfg-run").fill("echo canvas-{{ nodes.shell2.output.text ")
    expect(page.locator("#cfg-err-run")).to_contain_text("unbalanced")
    page.locator("#retry-attempts").fill("2")
    # The JSON side is edited too: the canvas follows.
    doc = json.loads(page.locator("#doc-json").input_value())
    assert doc["nodes"][2]["retry"] == {"attempts": 2}
    run = {"$template": "echo canvas-{{ nodes.shell2.output.text "}
    assert doc["nodes"][2]["config"]["run"] == run
    # Saved as it is, the server refuses it in one line, written on the node it names.
    page.locator("#wf-name").fill("canvas-three")
    page.click("#save")
    expect(page.locator("#save-status")).to_contain_text("node shell3", timeout=10_000)
    expect(canvas.locator('[data-error="shell3"]')).to_contain_text("unbalanced")
    expect(canvas.locator('[data-node="shell3"]')).to_have_class("cnode selected has-error")
    page.locator("#cfg-run").fill("echo canvas-{{ nodes.shell2.output.text }}-three")
    shot(page, "canvas-editor")
    page.click("#run-it")  # saves, then starts the stored workflow
    expect(page.locator("#run-header")).to_be_visible(timeout=15_000)
    page.click("#tab-dag")
    dag = page.locator("#dag")
    for i in (1, 2, 3):
        expect(dag.locator(f'[data-node="shell{i}"]')).to_have_class("dag-node s-succeeded",
                                                                       timeout=60_000)
    expect(page.locator("#run-status")).to_contain_text("succeeded", timeout=20_000)
    assert dag.locator("path.dag-edge").count() == 2
    dag.locator('[data-node="shell3"]').click()
    detail = page.locator("#dag-detail")
    expect(detail.locator("#dag-node-config")).to_contain_text("nodes.shell2.output.text")
    expect(detail.locator("#dag-node-log")).to_contain_text("canvas-two-three", timeout=10_000)
    expect(detail.locator("#dag-node-output")).to_contain_text("canvas-two-three")
    expect(detail.locator("#dag-rerun-from")).to_be_visible()
    assert axe_serious(page) == []
    shot(page, "canvas-dag")
    page.click("#tab-gantt")
    expect(page.locator("#gantt .gantt-row")).to_have_count(3)
    assert axe_serious(page) == []
    shot(page, "canvas-gantt")
    # The stored graph opens on the canvas again, as written.
    page.goto(f"{split.url}/#/workflows/canvas-three/edit")
    expect(page.locator("#canvas [data-node]")).to_have_count(3)
    assert json.loads(page.locator("#doc-json").input_value())["nodes"][2]["if"] == \
        "nodes.shell2.output.exit_code == 0"
    assert page.errors == []  # type: ignore[attr-defined]


def fill_every_type(page: Page, t: str) -> None:
    """Fills the form of a node of type `t` the way a user would (the node is selected)."""
    f = page.locator
    if t == "state":
        f("#cfg-op").select_option("set")
        f("#cfg-key").fill("greeting")
        f("#cfg-value").fill('{"n": 1}')
    elif t == "shell":
        f("#cfg-run").fill("echo $GREETING")
        page.click("#cfg-env-add")
        f("#cfg-env-k0").fill("GREETING")
        f("#cfg-env-v0").fill("hello")
    elif t == "code":
        f("#cfg-script").fill("print(1)")
    elif t == "script":
        f("#cfg-source").fill("echo inline")
        f("#cfg-filename").fill("inline.sh")
    elif t == "http":
        f("#cfg-method").select_option("POST")
        f("#cfg-url").fill("https://example.com/hook")
        page.click("#cfg-headers-add")
        f("#cfg-headers-k0").fill("Authorization")
        f("#cfg-headers-v0").fill("Bearer ${API_TOKEN}")
        page.click("#cfg-headers-add")
        f("#cfg-headers-k1").fill("X-Run")
        f("#cfg-headers-v1-mode").select_option("$expr")
        f("#cfg-headers-v1").fill("run.id")
        f("#cfg-secrets").fill("API_TOKEN")
    elif t == "connector":
        f("#cfg-connection").fill("github")
        f("#cfg-method").select_option("POST")
        f("#cfg-path").fill("/repos/acme/app/issues")
    elif t == "wait":
        f("#cfg-sleep").fill("2s")
        f("#cfg-timeout").fill("30")
    elif t == "approval":
        f("#cfg-fields").fill('{"type": "object", "properties": {"ok": {"type": "boolean"}}}')
    elif t == "workflow":
        f("#cfg-graph").fill("every-type-child")
    else:
        raise AssertionError(f"a node type this test does not know: {t}")


EXPECTED = {
    "state": {"op": "set", "key": "greeting", "value": {"n": 1}},
    "shell": {"run": "echo $GREETING", "env": {"GREETING": "hello"}},
    "code": {"script": "print(1)"},
    "script": {"source": "echo inline", "filename": "inline.sh"},
    "http": {"method": "POST", "url": "https://example.com/hook",
             "headers": {"Authorization": "Bearer ${API_TOKEN}", "X-Run": {"$expr": "run.id"}},
             "secrets": ["API_TOKEN"]},
    "connector": {"connection": "github", "method": "POST", "path": "/repos/acme/app/issues"},
    "wait": {"sleep": "2s", "timeout": 30},
    "approval": {"fields": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
    "workflow": {"graph": "every-type-child"},
}


def test_one_node_of_every_type_filled_from_its_schema_saves(split: Split,
                                                             axe_page: Page) -> None:
    page = axe_page
    status, body = http(split.url + TYPES_PATH, split.user_token)
    assert status == 200, body
    types = [t["type"] for t in body["node_types"]]
    assert sorted(types) == sorted(EXPECTED)  # a new type needs its line here
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/workflows/new")
    for t in types:
        page.locator(f'#palette button[data-type="{t}"]').click()
        expect(page.locator("#inspector h3")).to_contain_text(f"{t}1")
        fill_every_type(page, t)
        errors = page.locator("#config-form .invalid").all_inner_texts()
        assert not any(errors), (t, errors)
        if t == "http":  # the richest form: maps, a list, an expression, an enum
            assert axe_serious(page) == []
            shot(page, "canvas-every-type-http")
    page.locator("#wf-name").fill("every-type")
    page.click("#save")
    expect(page.locator("#save-status")).to_have_text("saved as every-type", timeout=10_000)
    doc = json.loads(page.locator("#doc-json").input_value())
    assert {n["type"]: n["config"] for n in doc["nodes"]} == EXPECTED
    # What the server stored is what the forms wrote.
    status, stored = http(f"{split.url}/api/v1/orgs/dev/projects/default/workflows/every-type"
                          "?source=1", split.user_token)
    assert status == 200, stored
    assert {n["type"]: n["config"] for n in json.loads(stored["source"])["nodes"]} == EXPECTED
    page.locator('#canvas [data-node="wait1"] rect').click()
    assert page.locator("#cfg-sleep").input_value() == "2s"
    assert axe_serious(page) == []
    assert page.errors == []  # type: ignore[attr-defined]


PIPELINE = """version: cryosleep/pipeline/v1
jobs:
  build:
    steps:
      - run: echo built
  test:
    needs: [build]
    steps:
      - run: echo tested
  ship:
    needs: [test]
    steps:
      - run: echo shipped
"""


def test_stored_pipeline_opens_read_only_with_its_source(split: Split, page: Page) -> None:
    path = script(split.dir, "ship.yaml", PIPELINE)
    done = split.cli("workflow", "put", "ship", str(path))
    assert done.returncode == 0, done.stderr
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.goto(f"{split.url}/#/workflows/ship")
    page.click("#open-canvas")
    expect(page.locator("#canvas [data-node]")).to_have_count(3)
    expect(page.locator('#canvas [data-edge="build>test"]')).to_have_count(1)
    expect(page.locator("#pipeline-source")).to_contain_text("cryosleep/pipeline/v1")
    expect(page.locator("#canvas [data-port]")).to_have_count(0)  # nothing to connect
    expect(page.locator("#save")).to_have_count(0)
    page.locator('#canvas [data-node="test"] rect').click()
    expect(page.locator("#inspector")).to_contain_text("needs build")
    shot(page, "canvas-pipeline")
    assert page.errors == []  # type: ignore[attr-defined]


def big_graph(width: int = 10, depth: int = 50) -> dict[str, Any]:
    """500 nodes in 50 layers of 10; each node waits on two of the layer before."""
    ids = [[f"n{d}-{w}" for w in range(width)] for d in range(depth)]
    nodes = [{"id": i, "type": "wait", "config": {"signal": "go"}} for layer in ids for i in layer]
    edges = [{"from": ids[d - 1][(w + k) % width], "to": ids[d][w]}
             for d in range(1, depth) for w in range(width) for k in (0, 1)]
    return {"version": "cryosleep-graph/v1", "nodes": nodes, "edges": edges}


def test_500_node_graph_renders_under_a_second_and_stays_responsive(split: Split,
                                                                    page: Page) -> None:
    run_id = submit(split, script(split.dir, "big.json", json.dumps(big_graph())))
    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    started = time.monotonic()
    page.goto(f"{split.url}/#/run/{run_id}")
    page.click("#tab-dag")
    dag = page.locator("#dag")
    expect(dag.locator("g.dag-node")).to_have_count(500, timeout=20_000)
    page_ms = (time.monotonic() - started) * 1000
    # The figure: layout and drawing of the run's 500 nodes in the page, median of three.
    timings = page.evaluate("""async (base) => {
      const { drawDag, paintBox, shapeOf } = await import('/ui/run/dag.js');
      const { api } = await import('/ui/api.js');
      const run = await api(base);
      const shape = await shapeOf(run, base);
      const out = [];
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const d = drawDag(shape, () => {});
        for (const n of shape.nodes) paintBox(d.boxes[n.id], n);
        document.body.append(d.svg);
        d.svg.getBoundingClientRect();  // forces layout of the drawn svg
        out.push(performance.now() - t0);
        d.svg.remove();
      }
      return out.sort((a, b) => a - b);
    }""", f"/api/v1/orgs/dev/projects/default/runs/{run_id}")
    render_ms = timings[1]
    # Responsive: a click on a node deep in the graph opens its panel at once.
    t0 = time.monotonic()
    dag.locator('[data-node="n49-9"]').click()
    expect(page.locator("#dag-detail h3")).to_contain_text("n49-9", timeout=2_000)
    click_ms = (time.monotonic() - t0) * 1000
    record(dag_500_render_ms=render_ms, dag_500_page_ms=page_ms, dag_500_click_ms=click_ms)
    # The 1 s target is checked by bench/run (bench/canvas_bench.py) on a quiet machine; a
    # shared one only bounds it loosely here, so a layout gone quadratic still fails.
    assert render_ms < 10_000, timings
    assert click_ms < 5_000, click_ms
    page.click("#tab-gantt")
    expect(page.locator("#gantt svg")).to_have_count(1)
    assert page.errors == []  # type: ignore[attr-defined]
