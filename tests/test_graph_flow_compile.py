"""A node's loop, stop_if and cache checked at submit (one line naming the node and the
field), in graphs and pipelines alike, and served in the node fields' schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from cryopg.graphs import node_keys
from cryopg.graphs.document import GraphError, compile_graph
from cryopg.graphs.flow import CACHE_CONFIG
from cryopg.pipelines.compile import PipelineError, compile_pipeline


def _graph(**fields: Any) -> dict[str, Any]:
    return {"version": "cryosleep-graph/v1", "nodes": [
        {"id": "a", "type": fields.pop("type", "shell"), "config": fields.pop(
            "config", {"run": "echo"}), **fields}]}


def test_flow_fields_compile_into_the_structure_and_the_config() -> None:
    got = compile_graph(_graph(loop={"until": "nodes.a.output.text == 'ok'",
                                     "max_iterations": 3},
                               stop_if="node.iteration > 1"))
    node = got.structure["nodes"][0]
    assert node["loop"]["max_iterations"] == 3 and "until" in node["loop"]
    assert node["stop_if"]["op"] == ">"
    got = compile_graph(_graph(cache={"key": "k-{{ input.v }}", "ttl": "10m"}))
    assert got.structure["nodes"][0]["cache"] == {"ttl": 600.0}
    assert got.document["configs"]["a"][CACHE_CONFIG]["ttl"] == 600.0
    assert "$template" in got.document["configs"]["a"][CACHE_CONFIG]["key"]


@pytest.mark.parametrize("fields, said", [
    ({"loop": {"while": "true"}}, "node a: loop.max_iterations is required"),
    ({"loop": {"while": "true", "until": "true", "max_iterations": 2}}, "exactly one of"),
    ({"loop": {"while": "true", "max_iterations": 0}}, "max_iterations is required"),
    ({"loop": {"while": "nodes.zz.output", "max_iterations": 2}}, "no node 'zz'"),
    ({"loop": {"while": "true", "max_iterations": 2}, "fan_out": {"items": "input.x"}},
     "loop and fan_out"),
    ({"stop_if": 1}, "stop_if must be an expression"),
    ({"cache": {"key": "k"}}, "node a: cache is"),
    ({"cache": {"key": "k", "ttl": "soon"}}, "cache.ttl"),
    ({"cache": {"key": "k", "ttl": 0}}, "more than 0"),
    ({"cache": {"key": "k", "ttl": "1h"}, "type": "wait", "config": {"sleep": "1s"}},
     "a wait node has no cache"),
])
def test_bad_flow_fields_are_one_line(fields: dict[str, Any], said: str) -> None:
    with pytest.raises(GraphError) as err:
        compile_graph(_graph(**fields))
    assert said in str(err.value) and "\n" not in str(err.value)


def test_a_pipeline_job_takes_the_same_fields() -> None:
    got = compile_pipeline(
        "version: cryosleep/pipeline/v1\njobs:\n  poll:\n    steps: [./poll.sh]\n"
        "    loop: {until: \"nodes.poll.output.text == 'done'\", max_iterations: 5}\n"
        "    stop_if: \"nodes.poll.output.text == 'gone'\"\n"
        "  build:\n    steps: [make]\n    cache: {key: \"b-{{ input.id }}\", ttl: 1h}\n")
    nodes = {n["id"]: n for n in got.structure["nodes"]}
    assert set(nodes["poll"]) >= {"loop", "stop_if"} and nodes["build"]["cache"]["ttl"] == 3600
    with pytest.raises(PipelineError) as err:
        compile_pipeline("version: cryosleep/pipeline/v1\n"
                         "jobs:\n  a: {steps: [x], loop: {while: x}}\n")
    assert str(err.value).startswith("job a: loop.max_iterations is required")


def test_the_node_keys_schema_takes_the_documented_flow_forms() -> None:
    schema = node_keys.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(schema)
    node = {"id": "a", "type": "shell"}
    assert check.is_valid({**node, "loop": {"until": "x", "max_iterations": 3}, "stop_if": "y",
                           "cache": {"key": "k-{{ input.v }}", "ttl": "1h"}})
    assert not check.is_valid({**node, "loop": {"until": "x"}})
    assert not check.is_valid({**node, "loop": {"while": "x", "until": "y",
                                                "max_iterations": 1}})
