"""An approval node: waits in the database until a Member answers its form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs import schemas
from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema

if TYPE_CHECKING:
    from cryopg.engine import PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "Waits in the database until a Member answers; fields is the JSON Schema the answer "
    "must match; output the answer plus approved_by.",
    {"fields": {"type": "object"}}, ("fields",))


def check(nid: str, c: dict[str, Any]) -> None:
    fields = need(nid, c, "fields")
    if not isinstance(fields, dict):
        raise GraphError(f"node {nid}: config.fields must be a JSON Schema object")
    schemas.check(fields, f"node {nid}: config.fields")


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """The instance waits in the database for a Member's answer (cryo.approve_node)."""
    from cryopg import engine

    assert p.node_id is not None and p.item is not None
    await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item,
                                 "approval", None, None)
    return False


NODE = NodeType("approval", SCHEMA["description"], SCHEMA, check, start)
