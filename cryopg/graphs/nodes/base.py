"""What every node type module is made of: its config schema and its checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

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

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(self.schema["properties"])

    def listing(self) -> dict[str, Any]:
        return {"type": self.type, "description": self.description, "schema": self.schema}
