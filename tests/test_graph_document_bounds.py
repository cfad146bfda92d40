"""Big and odd documents: checked iteratively (no recursion at any size), refused over a
documented bound with one line, unknown config keys named; `pipeline compile` says the
same in one line, exit 2, with no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from cryopg.graphs.document import MAX_NODES, GraphError, compile_graph, load
from cryopg.pipelines import PipelineError, compile_pipeline
from tests.test_cli_errors import cryopg


def _chain(n: int, *, reverse: bool = False, cycle: bool = False) -> dict:
    nodes = [{"id": f"n{i}", "type": "state", "config": {"op": "get", "key": "k"}}
             for i in range(n)]
    edges = [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(n - 1)]
    if cycle:
        edges.append({"from": f"n{n - 1}", "to": "n0"})
    return {"version": "cryosleep-graph/v1", "nodes": nodes[::-1] if reverse else nodes,
            "edges": edges}


def test_a_ten_thousand_node_cycle_is_one_line() -> None:
    with pytest.raises(GraphError) as got:
        compile_graph(_chain(10_000, cycle=True))
    assert "cycle" in str(got.value)


def test_a_large_graph_listed_backwards_compiles() -> None:
    compiled = compile_graph(_chain(1_200, reverse=True))
    assert len(compiled.structure["nodes"]) == 1_200


def test_over_the_bound_is_refused_in_one_line() -> None:
    with pytest.raises(GraphError) as got:
        compile_graph(_chain(MAX_NODES + 1))
    assert f"at most {MAX_NODES}" in str(got.value) and "\n" not in str(got.value)
    with pytest.raises(GraphError, match="MiB"):
        load(" " * (9 << 20) + "{}")


def test_an_unknown_config_key_is_named() -> None:
    doc = {"version": "cryosleep-graph/v1",
           "nodes": [{"id": "a", "type": "shell", "config": {"run": "true", "evn": {"A": "1"}}}]}
    with pytest.raises(GraphError, match="unknown key 'evn'"):
        compile_graph(doc)


def _pipeline(n: int) -> str:
    lines = ["version: cryosleep/pipeline/v1", "jobs:"]
    for i in range(n):
        lines += [f"  j{i}:", "    steps: [\"true\"]"]
        lines += [f"    needs: j{(i + 1) % n}"]
    return "\n".join(lines) + "\n"


def test_a_long_pipeline_cycle_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="cycle"):
        compile_pipeline(_pipeline(3_000))
    path = tmp_path / "p.yaml"
    path.write_text(_pipeline(3_000))
    got = cryopg(tmp_path, "pipeline", "compile", str(path))
    assert got.returncode == 2, got
    assert "Traceback" not in got.stderr and "cycle" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1, got.stderr
