"""An approval node: waits in the database until a Member answers its form."""

from __future__ import annotations

from typing import Any

import jsonschema

from cryopg.graphs.checks import GraphError, check_patterns, need
from cryopg.graphs.nodes.base import NodeType, config_schema

SCHEMA = config_schema(
    "Waits in the database until a Member answers; fields is the JSON Schema the answer "
    "must match; output the answer plus approved_by.",
    {"fields": {"type": "object"}}, ("fields",))


def check(nid: str, c: dict[str, Any]) -> None:
    fields = need(nid, c, "fields")
    if not isinstance(fields, dict):
        raise GraphError(f"node {nid}: config.fields must be a JSON Schema object")
    try:
        jsonschema.Draft202012Validator.check_schema(fields)
    except jsonschema.SchemaError as exc:
        raise GraphError(
            f"node {nid}: config.fields is not a JSON Schema: {exc.message}") from None
    check_patterns(nid, fields)


NODE = NodeType("approval", SCHEMA["description"], SCHEMA, check)
