"""A shell node: a bash script on an agent with the `shell` capability."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, need, string_or_expr
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

SCHEMA = config_schema(
    "A bash -eu script on an agent with shell; output {stdout, text, exit_code}, a "
    "non-zero exit fails the node.",
    {"run": dyn({"type": "string"}),
     "env": {"type": "object", "additionalProperties": dyn({"type": "string"})}},
    ("run",))


def check(nid: str, c: dict[str, Any]) -> None:
    need(nid, c, "run")
    string_or_expr(nid, c, "run")
    if "env" in c and not isinstance(c["env"], dict):
        raise GraphError(f"node {nid}: config.env must be an object of strings")


NODE = NodeType("shell", SCHEMA["description"], SCHEMA, check)
