"""A shell node: a bash script on an agent with the `shell` capability."""

from __future__ import annotations

from typing import Any

from cryopg.graphs import artifacts
from cryopg.graphs.checks import GraphError, need, string_or_expr
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

SCHEMA = config_schema(
    "A bash -eu script on an agent with shell; output {stdout, text, exit_code}, a "
    "non-zero exit fails the node. artifacts are uploaded after it succeeds, "
    "artifacts_from's downloaded before it starts.",
    {"run": dyn({"type": "string"}),
     "env": {"type": "object", "additionalProperties": dyn({"type": "string"})},
     "artifacts": artifacts.ARTIFACTS_SCHEMA, "artifacts_from": artifacts.ARTIFACTS_FROM_SCHEMA},
    ("run",))


def check(nid: str, c: dict[str, Any]) -> None:
    need(nid, c, "run")
    string_or_expr(nid, c, "run")
    if "env" in c and not isinstance(c["env"], dict):
        raise GraphError(f"node {nid}: config.env must be an object of strings")
    artifacts.check(nid, c)


NODE = NodeType("shell", SCHEMA["description"], SCHEMA, check)
