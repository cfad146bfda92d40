"""An http node: a request made by an agent with `connector`, under the egress policy."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")

SCHEMA = config_schema(
    "An HTTP request made on an agent with connector; output {status, headers, body}, a "
    "status of 400 or more fails the node.",
    {"method": {"enum": list(METHODS) + [m.lower() for m in METHODS]},
     "url": dyn({"type": "string"}),
     "headers": {"type": "object", "additionalProperties": dyn({"type": "string"})},
     "body": {}},
    ("url",))


def check(nid: str, c: dict[str, Any]) -> None:
    need(nid, c, "url")
    method = c.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise GraphError(f"node {nid}: config.method must be GET, POST, PUT, PATCH, "
                         "DELETE or HEAD")
    if "headers" in c and not isinstance(c["headers"], dict):
        raise GraphError(f"node {nid}: config.headers must be an object")


NODE = NodeType("http", SCHEMA["description"], SCHEMA, check)
