"""A workflow node: a stored graph (or pipeline) run as a child graph run."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema

SCHEMA = config_schema(
    "A stored graph or pipeline run as a child graph run; its output is the output.",
    {"graph": {"type": "string", "minLength": 1}, "input": {}}, ("graph",))


def check(nid: str, c: dict[str, Any]) -> None:
    if not isinstance(need(nid, c, "graph"), str):
        raise GraphError(f"node {nid}: config.graph must be a stored graph's name")


NODE = NodeType("workflow", SCHEMA["description"], SCHEMA, check)
