"""deploy/'s operations kit (issue 40, item 5): the Prometheus alert rules pass
`promtool check rules` and their unit tests, and the Grafana dashboard's queries parse
and name only metrics cryopg serves."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cryopg.paths import REPO_ROOT
from cryopg.server import metrics

PROM = REPO_ROOT / "deploy" / "prometheus"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "cryopg-dashboard.json"


def promtool() -> str:
    """Debian's promtool (scripts/setup installs the prometheus package). Missing in CI is
    a failure, never a skip."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no promtool: scripts/setup installs Debian's prometheus package")
        pytest.skip("no promtool here: run scripts/setup (it installs Debian's prometheus)")
    return found


def _run(*args: str, cwd: Path = PROM) -> str:
    done = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def served_names() -> set[str]:
    """Every series name /metrics can carry (counters end in _total, histograms in
    _bucket/_sum/_count)."""
    pm = metrics.ProcessMetrics()
    names: set[str] = set()
    for fam in pm.registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
        names |= {fam.name + s for s in suffixes.get(fam.type, ("",))}
    for name, _, _ in metrics._COUNTERS.values():
        names.add(name + "_total")
    for name, _, _ in metrics._GAUGES.values():
        names.add(name)
    for name, _ in metrics._HISTOGRAMS.values():
        names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(cryopg_[a-z_]+)", expr))


def test_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    assert "SUCCESS: 5 rules found" in _run("check", "rules", "cryopg-alerts.yml")
    assert "SUCCESS" in _run("test", "rules", "cryopg-alerts.test.yml")
    rules = yaml.safe_load((PROM / "cryopg-alerts.yml").read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {"CryopgQueueAge", "CryopgClaimsLapsing",
                                           "CryopgLogMoveBacklog",
                                           "CryopgNoLiveAgentForCapability"}
    for r in rules:
        assert _metric_names(r["expr"]) <= served_names(), r["alert"]


def test_dashboard_queries_parse_and_name_served_metrics(tmp_path: Path) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 14
    served = served_names()
    for e in exprs:
        assert _metric_names(e) and _metric_names(e) <= served, e
    # promtool parses PromQL only in rule files: each query becomes a recording rule
    # ($org, the dashboard's variable, as Grafana would expand it)
    group = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": e.replace("$org", ".*")}
        for i, e in enumerate(exprs)]}]}
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(group))
    assert f"SUCCESS: {len(exprs)} rules found" in _run("check", "rules", "dash.yml",
                                                        cwd=tmp_path)
