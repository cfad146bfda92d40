"""An http node: a request made by an agent with `connector`, under the egress policy."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

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


_JOB: str | None = None  # the http job with the egress policy inlined, made once


def job() -> str:
    """The http job's source (the connector node's too), made once."""
    global _JOB
    from cryopg.graphs.http_request import job_source

    if _JOB is None:
        _JOB = job_source()
    return _JOB


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child run of the http job on a connector agent: the agent need not have cryopg
    installed. Named not http.py: a script of that name would shadow the http package
    it imports."""
    from cryopg.graphs.turn import start_job

    job_input = {"method": str(c.get("method", "GET")).upper(), "url": str(c["url"]),
                 "headers": {str(k): str(v) for k, v in (c.get("headers") or {}).items()},
                 "body": c.get("body"), "secrets": list(c.get("secrets") or [])}
    await start_job(turn, p, filename="cryo_http_node.py", interpreter="python3",
                    source=job(), caps=["connector"], job_input=job_input)
    return False


async def result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    """{status, headers, body} from the job's last line; a status of 400 or more fails."""
    from cryopg.graphs.turn import failure, stdout_of

    ok = r.job_status == "succeeded"
    why = None if ok else failure(r)
    stdout = await stdout_of(turn, r)
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    try:
        value = json.loads(lines[-1])
    except (ValueError, IndexError):
        if not ok and lines:  # its one-line refusal or failure
            return False, None, lines[-1][:500]
        return False, {"stdout": stdout}, why or "http node printed no JSON"
    if isinstance(value, dict) and int(value.get("status") or 0) >= 400:
        return False, value, f"HTTP {value.get('status')}"
    return ok, value, why


NODE = NodeType("http", SCHEMA["description"], SCHEMA, check, start, result)
