"""A connector node: a request to a stored connection of the project (`cryopg connection
create`), by method, path, query and body, made like an http node's on an agent with
`connector` under the egress policy. The connection gives the base URL, default headers
and the credential's scheme; the credential itself (a project secret) reaches only the
connector agent doing the request, in its claim grant (cryo._grant_run_secrets)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes import http
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

if TYPE_CHECKING:
    from cryopg.engine import PlanRow
    from cryopg.graphs.turn import Turn

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # as cryo.connections.name
HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
SCALAR = {"type": ["string", "number", "boolean"]}

SCHEMA = config_schema(
    "An HTTP request to a stored connection of the project (cryopg connection create), "
    "made on an agent with connector: method, path (under the connection's base URL), "
    "query and body; output {status, headers, body}, a status of 400 or more fails the "
    "node. The connection's credential reaches only the agent that makes the request.",
    {"connection": {"type": "string", "pattern": NAME.pattern},
     "method": {"enum": list(http.METHODS) + [m.lower() for m in http.METHODS]},
     "path": dyn({"type": "string"}),
     "query": {"type": "object", "additionalProperties": dyn(SCALAR)},
     "headers": {"type": "object", "additionalProperties": dyn({"type": "string"})},
     "body": {}},
    ("connection",))


def check(nid: str, c: dict[str, Any]) -> None:
    name = need(nid, c, "connection")
    if not isinstance(name, str) or not NAME.match(name):
        raise GraphError(f"node {nid}: config.connection must be a connection's name "
                         "(lower-case letters, digits, _ and -), given literally")
    method = c.get("method", "GET")
    if not isinstance(method, str) or method.upper() not in http.METHODS:
        raise GraphError(f"node {nid}: config.method must be GET, POST, PUT, PATCH, "
                         "DELETE or HEAD")
    for key in ("query", "headers"):
        if key in c and not isinstance(c[key], dict):
            raise GraphError(f"node {nid}: config.{key} must be an object")
    if not all(isinstance(k, str) and HEADER.match(k) for k in c.get("headers") or {}):
        raise GraphError(f"node {nid}: config.headers names must be header tokens")
    path = c.get("path", "")
    if isinstance(path, str):
        joined(nid, "http://h", path)


def joined(nid: str, base: str, path: str, query: dict[str, Any] | None = None) -> str:
    """The request's URL: `path` below the base URL, never out of it (no scheme, host,
    `..` segment, query or fragment in the path: query parameters go in `query`, sorted
    by name, as the document's order is not kept)."""
    if not isinstance(path, str) or any(ch in path for ch in "?#\\") or "://" in path \
            or path.startswith("//") or ".." in path.split("/") \
            or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in path):
        raise ValueError(f"node {nid}: config.path must be a path below the connection's "
                         "base URL (no scheme, host, .., space, ? or #; put parameters "
                         "in query)")
    url = base.rstrip("/") + ("/" + path.lstrip("/") if path else "")
    if query:
        pairs = sorted((str(k), _scalar(v)) for k, v in query.items() if v is not None)
        if pairs:
            url += "?" + urlencode(pairs)
    return url


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, int, float)):
        return str(v)
    raise ValueError("config.query values must be strings, numbers or booleans")


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child run of the http job on a connector agent, given the connection's URL,
    headers and auth scheme with the NAME of its secret; an untrusted run, a deleted
    connection or a missing secret fails the node here (cryo.connection_for_run)."""
    from cryopg import engine
    from cryopg.graphs.turn import start_job

    assert p.node_id is not None
    conn = await engine.connection_for_run(turn.conn, turn.run_id, str(c["connection"]))
    headers = {**conn.headers, **{str(k): str(v) for k, v in (c.get("headers") or {}).items()}}
    job_input = {
        "method": str(c.get("method", "GET")).upper(),
        "url": joined(p.node_id, conn.base_url, c.get("path", ""), c.get("query")),
        "headers": headers, "body": c.get("body"), "secrets": [],
        "auth": {"connection": conn.name, "scheme": conn.auth, "secret": conn.secret,
                 "username": conn.username, "header": conn.header}}
    await start_job(turn, p, filename="cryo_http_node.py", interpreter="python3",
                    source=http.job(), caps=["connector"], job_input=job_input)
    return False


NODE = NodeType("connector", SCHEMA["description"], SCHEMA, check, start, http.result)
