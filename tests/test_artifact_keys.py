"""Artifacts as pipeline and graph keys, checked without a database: what a job or node
may declare, the one-line refusals naming the job and key, what `needs` compiles to, and
the wrapper a node's job runs (downloads before, the command in a subshell, a check and
an upload per file after)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jsonschema
import pytest

from cryopg.graphs import artifacts
from cryopg.graphs.document import GraphError, compile_graph
from cryopg.graphs.nodes import TYPES
from cryopg.pipelines import PipelineError, compile_pipeline

PIPE = """\
version: cryosleep/pipeline/v1
jobs:
  build:
    steps: [make]
    artifacts: ARTS
  test: {needs: build, steps: [make test]}
"""


def configs(source: str) -> dict:
    return compile_pipeline(source).document["configs"]


def test_needs_downloads_unless_the_need_says_artifacts_false() -> None:
    got = configs(PIPE.replace("ARTS", "[dist/a.tar, {name: rep, path: out/r.html}]")
                  + "  note: {needs: [{job: build, artifacts: false}], steps: [echo]}\n"
                  + "  gate: {needs: build, approval: {fields: {type: object}}}\n")
    assert got["build"]["artifacts"] == ["dist/a.tar", {"name": "rep", "path": "out/r.html"}]
    assert got["test"]["artifacts_from"] == ["build"]
    assert "artifacts_from" not in got["note"] and "artifacts_from" not in got["gate"]
    # a need on a job without artifacts downloads nothing
    plain = configs(PIPE.replace("    artifacts: ARTS\n", ""))
    assert "artifacts_from" not in plain["test"]


@pytest.mark.parametrize(("arts", "error"), [
    ("[/etc/passwd]", "job build: artifacts[0].path: '/etc/passwd' must be relative to the "
                      "job's working directory"),
    ("[ok, ../up]", "job build: artifacts[1].path: '../up' must name a file inside the "
                    "working directory"),
    ("[dist/]", "job build: artifacts[0].path: 'dist/' must name a file inside the working "
                "directory"),
    ("dist/a", "job build: artifacts must be a list of at most 50 paths or {name, path}"),
    ("[{name: a}]", "job build: artifacts[0]: an artifact is a path or {name, path}"),
    ("[{name: '', path: x}]", "job build: artifacts[0].name: must be 1 to 128 printable "
                              "characters"),
    ("[a, {name: a, path: b}]", "job build: artifacts[1]: the name 'a' is declared twice"),
])
def test_bad_artifacts_are_refused_in_one_line_naming_job_and_key(arts: str, error: str) -> None:
    with pytest.raises(PipelineError) as exc:
        compile_pipeline(PIPE.replace("ARTS", arts))
    assert str(exc.value) == error


def test_other_refusals() -> None:
    with pytest.raises(PipelineError, match=r"^job w: artifacts: only steps and script jobs"):
        compile_pipeline("version: cryosleep/pipeline/v1\njobs:\n"
                         "  w: {sleep: 1s, artifacts: [x]}\n")
    with pytest.raises(PipelineError, match=r"^job b: needs\[0\]: a job name, or \{job, "):
        compile_pipeline("version: cryosleep/pipeline/v1\njobs:\n  a: {steps: [x]}\n"
                         "  b: {needs: [{job: a, artifacts: maybe}], steps: [y]}\n")
    with pytest.raises(PipelineError, match=r"^job b: artifacts: a node with fan_out cannot "):
        compile_pipeline("version: cryosleep/pipeline/v1\njobs:\n"
                         "  b: {fan_out: {items: input.xs}, steps: [y], artifacts: [x]}\n")


def _graph(a_config: dict, b_config: dict, edge: bool = True) -> dict:
    return {"version": "cryosleep-graph/v1",
            "nodes": [{"id": "a", "type": "shell", "config": a_config},
                      {"id": "b", "type": "script", "config": b_config}],
            "edges": [{"from": "a", "to": "b"}] if edge else []}


def test_graph_nodes_check_artifacts_from_against_the_edges() -> None:
    ok = compile_graph(_graph({"run": "x", "artifacts": ["f"]},
                              {"source": "y", "filename": "y.py", "artifacts_from": ["a"]}))
    assert ok.document["configs"]["b"]["artifacts_from"] == ["a"]
    with pytest.raises(GraphError, match="'a' is not a node it depends on"):
        compile_graph(_graph({"run": "x", "artifacts": ["f"]},
                             {"source": "y", "filename": "y.py", "artifacts_from": ["a"]},
                             edge=False))
    with pytest.raises(GraphError, match="node a declares no artifacts"):
        compile_graph(_graph({"run": "x"},
                             {"source": "y", "filename": "y.py", "artifacts_from": ["a"]}))


def test_the_node_schemas_list_the_keys() -> None:
    for kind, base in (("shell", {"run": "x"}), ("script", {"workflow": "w"})):
        schema = jsonschema.Draft202012Validator(TYPES[kind].schema)
        assert schema.is_valid({**base, "artifacts": ["a", {"name": "n", "path": "p"}],
                                "artifacts_from": ["up"]})
        assert not schema.is_valid({**base, "artifacts": [{"path": "p", "mode": 1}]})
        assert not schema.is_valid({**base, "artifacts_from": "up"})
    assert "artifacts" not in TYPES["http"].keys


def test_the_wrapper_checks_each_file_after_the_command(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "cryopg"  # records the verbs instead of talking to an agent
    fake.write_text('#!/bin/sh\necho "$@" >> "$CALLS"\n')
    fake.chmod(0o755)
    cfgs = {"a": {"artifacts": ["out.txt", {"name": "r", "path": "d/r.txt"}]},
            "b": {"artifacts_from": ["a"], "artifacts": ["made.txt"]}}
    script = artifacts.wrap(cfgs["b"], cfgs, "o:p:run-1", "echo made > made.txt\nexit 0")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls")}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        "artifact get a/out.txt out.txt --run o:p:run-1",
        "artifact get a/r d/r.txt --run o:p:run-1",
        "artifact put made.txt made.txt"]
    missing = artifacts.wrap(cfgs["b"], cfgs, "o:p:run-1", "true")
    (tmp_path / "made.txt").unlink()
    done = subprocess.run(["bash", "-c", missing], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1
    assert done.stderr == "artifacts: made.txt was not written by the job (no such file)\n"
    failed = artifacts.wrap(cfgs["b"], cfgs, "o:p:run-1", "echo made > made.txt; false")
    (tmp_path / "calls").unlink()
    done = subprocess.run(["bash", "-c", failed], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 1 and "put" not in (tmp_path / "calls").read_text()


def test_a_script_node_runs_under_its_interpreter_or_by_suffix() -> None:
    py = artifacts.script_command("x.py", None, "print(1)")
    assert py.endswith('python3 "$cryo_node_dir"/x.py')
    rb = artifacts.script_command("x.rb", "ruby -w", "p")
    assert rb.endswith('ruby -w "$cryo_node_dir"/x.rb')
    with pytest.raises(ValueError, match="not main.go"):
        artifacts.script_command("main.go", None, "package main")
