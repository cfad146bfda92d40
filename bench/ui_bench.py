"""The web UI's figures, measured in headless Chromium by its browser tests: the runs
list's page load (route to rows drawn, median of five), how long a line printed inside
a step takes to reach the screen (printed, by the script's clock, to the frame that drew
it, by the page's: median and worst of the lines sampled), a 50 MB log's first screen,
jump to start and search (to the match drawn), the requests an idle finished run's
page makes once loaded (script and graph run, over 8 s each), and a 2,000-node run's DAG:
navigation to it drawn, its layout and first screen, frames per second while panning and
while zooming with the wheel (medians of 3 rounds) and the load average they were taken
under. `python -m bench.ui_bench` runs those tests and writes bench/results/ui.json;
report.py renders it with `section()`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "ui.json"
TESTS = [
    "tests/ui/test_operators.py::test_phone_and_wide_layouts_accessibility_favicon_and_load_time",
    "tests/ui/test_run_page.py::test_step_output_live_checkpoint_times_passes_and_log_tools",
    "tests/ui/test_log_viewer.py",
    "tests/ui/test_run_settles.py",
    "tests/ui/test_dag_2000.py",
]
TARGETS = {"runs_list_load_ms": 300, "log_line_in_step_ms": 250, "log_line_in_step_max_ms": 250,
           "log_50mb_first_screen_s": 1.0, "log_50mb_to_start_s": 1.0, "log_50mb_search_s": 2.0,
           "finished_run_idle_requests": 0, "dag_2000_draw_ms": 1500, "dag_2000_pan_fps": 30,
           "dag_2000_zoom_fps": 30}


def measure(out: Path = OUT, tests: list[str] = TESTS) -> dict[str, Any]:
    """Runs browser tests that record figures (CRYOPG_UI_PERF names the file they write
    to) and returns those figures with whether the tests passed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    env = dict(os.environ, CRYOPG_UI_PERF=str(out))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *tests], cwd=ROOT, env=env)
    got = json.loads(out.read_text()) if out.exists() else {}
    got["tests_passed"] = done.returncode == 0
    out.write_text(json.dumps(got, indent=1))
    return got


def section(path: Path = OUT) -> list[str]:
    """The report's lines for the UI, or none when the UI bench did not run."""
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    n = r.get("log_line_in_step_samples")
    of = f" of {n}" if isinstance(n, int) else ""
    rows = [f"| {label} | {r[key]:.0f} ms | under {TARGETS[key]} ms |"
            for key, label in (
                ("runs_list_load_ms", "runs list page load (median of 5)"),
                ("log_line_in_step_ms", f"new log line on screen, inside a step (median{of})"),
                ("log_line_in_step_max_ms", f"new log line on screen, inside a step (worst{of})"))
            if isinstance(r.get(key), (int, float))]
    rows += [f"| {label} | {r[key]:.2f} s | under {TARGETS[key]:.0f} s |"
             for key, label in (
                 ("log_50mb_first_screen_s", "50 MB log: first screen"),
                 ("log_50mb_to_start_s", "50 MB log: jump to start"),
                 ("log_50mb_search_s", "50 MB log: search, to the match drawn"))
             if isinstance(r.get(key), (int, float))]
    rows += [f"| {label} | {r[key]:.0f} ms | {target} |" for key, label, target in (
        ("dag_2000_draw_ms", "2,000-node DAG: navigation to it drawn (median of 3)",
         f"under {TARGETS['dag_2000_draw_ms']} ms"),
        ("dag_2000_layout_draw_ms", "2,000-node DAG: layout and first screen, in the page", "—"),
        ("dag_2000_pan_worst_ms", "2,000-node DAG: longest frame while panning", "—"),
        ("dag_2000_zoom_rest_ms", "2,000-node DAG: longest frame zooming (drawn at rest)", "—"))
        if isinstance(r.get(key), (int, float))]
    rows += [f"| {label} | {r[key]:.0f} fps | at least {TARGETS[key]} fps |" for key, label in (
        ("dag_2000_pan_fps", "2,000-node DAG: panning (median frame)"),
        ("dag_2000_zoom_fps", "2,000-node DAG: zooming with the wheel (median frame)"))
        if isinstance(r.get(key), (int, float))]
    if isinstance(r.get("dag_2000_load_avg"), (int, float)):
        rows.append(f"| load average (1 min) when the DAG figures were taken | "
                    f"{r['dag_2000_load_avg']:.1f} | — |")
    if isinstance(r.get("finished_run_idle_requests"), int):
        rows.append(f"| requests of an idle finished run's page after its load | "
                    f"{r['finished_run_idle_requests']} | 0 |")
    return ["## Web UI", "",
            "Measured in headless Chromium by the browser tests against a real server and "
            "agent (tests/ui).", "", "| figure | measured | target |", "|---|---:|---:|",
            *rows, ""]


if __name__ == "__main__":
    figures = measure()
    print("\n".join(section()))
    sys.exit(0 if figures.get("tests_passed") else 1)
