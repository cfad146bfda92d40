"""A script node: a stored or inline script, as a child run with its own durable calls."""

from __future__ import annotations

from typing import Any

from cryopg.graphs import artifacts
from cryopg.graphs.checks import GraphError
from cryopg.graphs.nodes.base import NodeType, config_schema

SCHEMA = config_schema(
    "A stored script (workflow) or an inline one (source and filename) as a child run "
    "with its own durable calls; its run outputs are the output. artifacts are uploaded "
    "after it succeeds, artifacts_from's downloaded before it starts.",
    {"workflow": {"type": "string"}, "source": {"type": "string"},
     "filename": {"type": "string"}, "interpreter": {"type": "string"}, "input": {},
     "artifacts": artifacts.ARTIFACTS_SCHEMA, "artifacts_from": artifacts.ARTIFACTS_FROM_SCHEMA})


def check(nid: str, c: dict[str, Any]) -> None:
    if ("workflow" in c) == ("source" in c):
        raise GraphError(f"node {nid}: config needs a stored workflow name, "
                         "or source and filename")
    if "source" in c and not isinstance(c.get("filename"), str):
        raise GraphError(f"node {nid}: config.filename is required with source")
    artifacts.check(nid, c)


NODE = NodeType("script", SCHEMA["description"], SCHEMA, check)
