"""The canvas's figures, measured in headless Chromium by tests/ui/test_canvas.py: a
500-node graph run's layout and drawing on the DAG view (median of three, in the page),
the run page from navigation to all 500 nodes drawn, and a click on a node to its panel.
`python -m bench.canvas_bench` runs that test and writes bench/results/canvas.json;
report.py renders it with `section()`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __package__:  # `python -m bench.canvas_bench`
    from bench import ui_bench
else:  # imported by report.py, which runs with bench/ on its path
    import ui_bench

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "canvas.json"
TESTS = ["tests/ui/test_canvas.py::test_500_node_graph_renders_under_a_second_and_stays_responsive"]
ROWS = (("dag_500_render_ms", "500-node DAG: layout and drawing (median of 3)", "under 1000 ms"),
        ("dag_500_page_ms", "500-node run page: navigation to every node drawn", "—"),
        ("dag_500_click_ms", "500-node DAG: click on a node to its panel", "under 1000 ms"))


def measure() -> dict[str, Any]:
    return ui_bench.measure(OUT, TESTS)


def section(path: Path = OUT) -> list[str]:
    """The report's lines for the canvas, or none when its bench did not run."""
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    rows = [f"| {label} | {r[key]:.0f} ms | {target} |" for key, label, target in ROWS
            if isinstance(r.get(key), (int, float))]
    return ["## Canvas (DAG view)", "",
            "Measured in headless Chromium by tests/ui/test_canvas.py against a real server.",
            "", "| figure | measured | target |", "|---|---:|---:|", *rows, ""]


if __name__ == "__main__":
    figures = measure()
    print("\n".join(section()))
    sys.exit(0 if figures.get("tests_passed") else 1)
