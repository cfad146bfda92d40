"""What every node type module is made of: its config schema, its checks, how the driver
starts an instance of it and what output a finished instance's job gives.

The modules import what a start or a result needs inside those functions, so the
document compiler (the CLI's submit and pipeline compile) loads no database code."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

# start(turn, plan row, rendered config): starts one instance in the driver's turn;
# True when it also ended there (a database node), False when it runs or waits on.
Start = Callable[["Turn", "PlanRow", dict[str, Any]], Awaitable[bool]]
# result(turn, node row): what the ended child run of an instance came to:
# (succeeded, output, why it failed).
Result = Callable[["Turn", "NodeRow"], Awaitable[tuple[bool, Any, "str | None"]]]

# A config value may be given literally or computed: {"$expr": "..."} or
# {"$template": "..."} stands in for any value.
EXPR = {"type": "object", "properties": {"$expr": {"type": "string"}},
        "required": ["$expr"], "additionalProperties": False}
TEMPLATE = {"type": "object", "properties": {"$template": {"type": "string"}},
            "required": ["$template"], "additionalProperties": False}


def dyn(schema: dict[str, Any]) -> dict[str, Any]:
    """A property that is `schema` or an expression or template standing in for it."""
    return {"anyOf": [schema, {"$ref": "#/$defs/expr"}, {"$ref": "#/$defs/template"}]}


def config_schema(description: str, properties: dict[str, Any],
                  required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "description": description, "properties": properties,
            "required": list(required), "additionalProperties": False,
            "$defs": {"expr": EXPR, "template": TEMPLATE}}


@dataclasses.dataclass(frozen=True)
class NodeType:
    type: str
    description: str
    schema: dict[str, Any]  # JSON Schema of the node's config
    # The checks beyond the schema's keys, in one-line GraphErrors naming the node.
    check: Callable[[str, dict[str, Any]], None]
    start: Start
    # None: the instance ends in the database (state, wait, approval), not as a job.
    result: Result | None = None

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self.schema["properties"])

    def listing(self) -> dict[str, Any]:
        return {"type": self.type, "description": self.description, "schema": self.schema}
