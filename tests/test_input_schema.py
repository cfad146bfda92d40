"""A stored workflow's declared input (`input_schema`): a graph document or a pipeline
may carry one, checked when it is compiled and kept in the structure for the server."""

from __future__ import annotations

from typing import Any

import pytest

from cryopg.graphs.document import GraphError, compile_graph
from cryopg.pipelines import PipelineError, compile_pipeline

SCHEMA = {"type": "object", "required": ["env"], "properties": {"env": {"type": "string"}}}


def _graph(schema: Any) -> dict[str, Any]:
    return {"version": "cryosleep-graph/v1", "input_schema": schema,
            "nodes": [{"id": "a", "type": "wait", "config": {"sleep": 1}}]}


def test_a_graph_keeps_its_input_schema() -> None:
    assert compile_graph(_graph(SCHEMA)).structure["input_schema"] == SCHEMA


@pytest.mark.parametrize(("schema", "said"), [
    ([], "must be a JSON Schema"),
    ({"type": "string"}, "must be a JSON Schema"),
    ({"type": "object", "properties": {"n": {"type": 5}}}, "not a JSON Schema"),
    ({"type": "object", "properties": {"n": {"type": "string", "pattern": "(a)\\1"}}},
     "input_schema: pattern"),
])
def test_a_bad_input_schema_is_refused_in_one_line(schema: Any, said: str) -> None:
    with pytest.raises(GraphError, match=said.replace("(", r"\(")):
        compile_graph(_graph(schema))


def test_a_pipeline_carries_its_input_schema() -> None:
    got = compile_pipeline("version: cryosleep/pipeline/v1\n"
                           "input_schema: {type: object, properties: {env: {type: string}}}\n"
                           "jobs:\n  a:\n    steps:\n      - run: echo hi\n")
    assert got.structure["input_schema"]["properties"] == {"env": {"type": "string"}}
    with pytest.raises(PipelineError, match="input_schema"):
        compile_pipeline("version: cryosleep/pipeline/v1\ninput_schema: 3\n"
                         "jobs:\n  a:\n    steps:\n      - run: echo hi\n")
