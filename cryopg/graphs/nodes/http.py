"""An http node: a request made by an agent with `connector`, under the egress policy."""

from __future__ import annotations

import re
from typing import Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
# Project secrets a header may use as ${NAME}: resolved only in the grant of the
# connector agent that claims the node's job, never in the document or the input.
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

SCHEMA = config_schema(
    "An HTTP request made on an agent with connector; output {status, headers, body}, a "
    "status of 400 or more fails the node. Header values may use ${NAME} for the project "
    "secrets listed in secrets, given only to the agent that makes the request.",
    {"method": {"enum": list(METHODS) + [m.lower() for m in METHODS]},
     "url": dyn({"type": "string"}),
     "headers": {"type": "object", "additionalProperties": dyn({"type": "string"})},
     "body": {},
     "secrets": {"type": "array", "items": {"type": "string", "pattern": SECRET_NAME.pattern},
                 "maxItems": 20}},
    ("url",))


def check(nid: str, c: dict[str, Any]) -> None:
    need(nid, c, "url")
    method = c.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in METHODS:
        raise GraphError(f"node {nid}: config.method must be GET, POST, PUT, PATCH, "
                         "DELETE or HEAD")
    if "headers" in c and not isinstance(c["headers"], dict):
        raise GraphError(f"node {nid}: config.headers must be an object")
    names = c.get("secrets", [])
    if not isinstance(names, list) or len(names) > 20 or not all(
            isinstance(n, str) and SECRET_NAME.match(n) for n in names):
        raise GraphError(f"node {nid}: config.secrets must be a list of at most 20 secret names")


NODE = NodeType("http", SCHEMA["description"], SCHEMA, check)
