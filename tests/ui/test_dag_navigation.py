"""A 500-node run: the DAG has zoom, fit, pan and a minimap, and many outputs stay in a
box of bounded height instead of pushing the graph below the fold."""

from __future__ import annotations

import json

from playwright.sync_api import Page, Route, expect

from tests.e2e.conftest import Split
from tests.e2e.helpers import script, submit
from tests.ui.conftest import login_url
from tests.ui.test_canvas import big_graph


def _width(page: Page) -> float:
    return float(page.locator("#dag svg.dag").get_attribute("width") or 0)


def test_a_500_node_dag_zooms_fits_pans_and_has_a_minimap(split: Split, page: Page) -> None:
    run_id = submit(split, script(split.dir, "big.json", json.dumps(big_graph())))

    def many_outputs(route: Route) -> None:
        real = route.fetch()
        body = real.json()
        route.fulfill(response=real, json={**body, "outputs": {f"key-{i}": i for i in range(300)}})

    page.goto(login_url(split))
    expect(page.locator("#live-state")).to_have_text("live", timeout=15_000)
    page.route(f"**/runs/{run_id.replace(':', '%3A')}", many_outputs)
    page.goto(f"{split.url}/#/run/{run_id}")
    expect(page.locator("#run-outputs")).to_contain_text("key-299")
    assert page.locator("#run-outputs").bounding_box()["height"] <= 260  # type: ignore[index]
    page.unroute_all(behavior="ignoreErrors")

    page.click("#tab-dag")
    dag = page.locator("#dag")
    expect(dag.locator("g.dag-node")).to_have_count(500, timeout=20_000)
    expect(page.locator("#dag-minimap")).to_be_visible(timeout=30_000)
    full = _width(page)
    box_w = dag.evaluate("e => e.clientWidth")
    assert full > box_w  # wider than its box at 100%
    page.click("#dag-fit")
    assert _width(page) <= box_w
    expect(page.locator("#dag-zoom-level")).not_to_have_text("100%")
    fitted = _width(page)
    page.click("#dag-zoom-in")
    assert _width(page) > fitted
    page.click("#dag-actual")
    assert _width(page) == full
    # A click on the minimap moves the view there; dragging the background pans.
    page.locator("#dag-minimap").click(position={"x": 3, "y": 3})
    assert dag.evaluate("e => e.scrollLeft") == 0
    node = dag.locator('[data-node="n1-0"]').bounding_box()
    assert node
    x, y = node["x"] + node["width"] + 20, node["y"] + node["height"] / 2  # between ranks
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 150, y, steps=5)
    page.mouse.up()
    panned = dag.evaluate("e => e.scrollLeft")
    assert panned > 0
    page.locator("#dag-minimap").click(position={"x": 215, "y": 125})
    assert dag.evaluate("e => e.scrollLeft") > panned
    # A node still opens its panel.
    dag.locator('[data-node="n49-9"]').click()
    expect(page.locator("#dag-detail h3")).to_contain_text("n49-9", timeout=5_000)
    assert page.errors == []  # type: ignore[attr-defined]
