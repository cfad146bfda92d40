"""A wait node: a timer, a signal or an event, in the database."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, seconds
from cryopg.graphs.nodes.base import NodeType, config_schema

DURATION = {"anyOf": [{"type": "number", "minimum": 0},
                      {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"}]}

SCHEMA = config_schema(
    "Waits in the database for exactly one of a sleep, a signal or an event, with an "
    "optional timeout; output the payload, {} for a sleep, or {\"timed_out\": true}.",
    {"sleep": DURATION, "signal": {"type": "string", "minLength": 1},
     "event": {"type": "string", "minLength": 1}, "timeout": DURATION})


def check(nid: str, c: dict[str, Any]) -> None:
    kinds = [k for k in ("sleep", "signal", "event") if k in c]
    if len(kinds) != 1:
        raise GraphError(f"node {nid}: config needs exactly one of sleep, signal, event")
    if kinds[0] == "sleep":
        seconds(c["sleep"], f"node {nid}: config.sleep")
    elif not isinstance(c[kinds[0]], str) or not c[kinds[0]]:
        raise GraphError(f"node {nid}: config.{kinds[0]} must be a name")
    if "timeout" in c:
        seconds(c["timeout"], f"node {nid}: config.timeout")


NODE = NodeType("wait", SCHEMA["description"], SCHEMA, check)
