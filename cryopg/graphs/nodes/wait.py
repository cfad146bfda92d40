"""A wait node: a timer, a signal or an event, in the database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs.checks import GraphError, seconds
from cryopg.graphs.nodes.base import NodeType, config_schema

if TYPE_CHECKING:
    from cryopg.engine import PlanRow
    from cryopg.graphs.turn import Turn

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


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """The instance waits in the database; what answers it is collected in a later turn
    (or this one, for a zero sleep)."""
    from cryopg import engine

    assert p.node_id is not None and p.item is not None
    timeout = seconds(c["timeout"], "timeout") if "timeout" in c else None
    turn.timed = True  # a sleep, or a wait that may time out
    if "sleep" in c:
        await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item,
                                     "sleep", None, seconds(c["sleep"], "sleep"))
        return False
    kind = "signal" if "signal" in c else "event"
    await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item, kind,
                                 str(c[kind]), timeout)
    return False


NODE = NodeType("wait", SCHEMA["description"], SCHEMA, check, start)
