"""A script node: a stored or inline script, as a child run with its own durable calls."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError
from cryopg.graphs.nodes.base import NodeType, config_schema

SCHEMA = config_schema(
    "A stored script (workflow) or an inline one (source and filename) as a child run "
    "with its own durable calls; its run outputs are the output.",
    {"workflow": {"type": "string"}, "source": {"type": "string"},
     "filename": {"type": "string"}, "interpreter": {"type": "string"}, "input": {}})


def check(nid: str, c: dict[str, Any]) -> None:
    if ("workflow" in c) == ("source" in c):
        raise GraphError(f"node {nid}: config needs a stored workflow name, "
                         "or source and filename")
    if "source" in c and not isinstance(c.get("filename"), str):
        raise GraphError(f"node {nid}: config.filename is required with source")


NODE = NodeType("script", SCHEMA["description"], SCHEMA, check)
