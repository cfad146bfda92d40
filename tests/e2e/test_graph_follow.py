"""Following graph and pipeline runs through a real `cryopg dev` and its agents: each
node job's log arrives prefixed with its node, a failed pipeline shows its failing job's
last lines and exits with that job's code, and a one-node document is named by its type."""

from __future__ import annotations

import json
from typing import Any

import pytest


@pytest.mark.agents(2)
def test_submit_follow_streams_a_pipelines_jobs_and_exits_with_the_failing_code(
        stack: Any) -> None:
    (stack.dir / "ci.yaml").write_text("""\
version: cryosleep/pipeline/v1
jobs:
  lint: {steps: [{run: "echo lint clean"}]}
  build:
    needs: lint
    steps:
      - run: echo compiling
      - run: "echo 'main.c:3: error: expected ;' >&2; exit 2"
  ship: {needs: build, steps: [{run: echo never}]}
""")
    done = stack.cli("submit", "ci.yaml", "--follow", timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout.splitlines()
    assert out[:2] == ["[lint] lint clean", "[lint] succeeded"], done.stdout
    assert out[2:] == ["[build] compiling", "[build] main.c:3: error: expected ;",
                       "[build] failed: exit code 2"], done.stdout
    err = done.stderr.splitlines()
    assert err[-3].endswith("failed (node build failed: exit code 2)"), done.stderr
    assert err[-2:] == ["  compiling", "  main.c:3: error: expected ;"], done.stderr


def test_a_one_node_document_follows_under_its_type(stack: Any) -> None:
    (stack.dir / "node.json").write_text(json.dumps({
        "version": "cryosleep-node/v1", "type": "shell", "config": {"run": "echo hello"}}))
    done = stack.cli("submit", "node.json", "--follow", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["[shell] hello", "[shell] succeeded"]
    (stack.dir / "v2.json").write_text('{"version": "cryosleep-graph/v2", "nodes": []}')
    refused = stack.cli("submit", "v2.json")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused
