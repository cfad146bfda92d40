"""A code node: a program on an agent with `polyglot`, reading its scope as JSON."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema

SCHEMA = config_schema(
    "A program (python3 by default) on an agent with polyglot; the node's scope arrives "
    "as JSON on stdin and its stdout, parsed as JSON, is the output.",
    {"script": {"type": "string"}, "interpreter": {"type": "string"}},
    ("script",))


def check(nid: str, c: dict[str, Any]) -> None:
    if not isinstance(need(nid, c, "script"), str):
        raise GraphError(f"node {nid}: config.script must be a string")
    if "interpreter" in c and not isinstance(c["interpreter"], str):
        raise GraphError(f"node {nid}: config.interpreter must be a string")


NODE = NodeType("code", SCHEMA["description"], SCHEMA, check)
