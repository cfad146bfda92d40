"""A state node: a durable cell operation, in the database, within the driver's turn."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import STATE_OPS, WRITE_OPS, GraphError, need, string_or_expr
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

SCHEMA = config_schema(
    "A durable cell operation, in the database: get {value, version}, set {version}, "
    "delete {deleted}, add {claimed}, cas {swapped}, incr {value, version}.",
    {"op": {"enum": sorted(STATE_OPS)},
     "key": dyn({"type": "string", "minLength": 1}),
     "entity": dyn({"type": "string"}),
     "value": {},
     "expected": dyn({"type": "integer"}),
     "by": dyn({"type": "number"})},
    ("op", "key"))


def check(nid: str, c: dict[str, Any]) -> None:
    op = need(nid, c, "op")
    if op not in STATE_OPS:
        raise GraphError(f"node {nid}: config.op must be one of {', '.join(sorted(STATE_OPS))}")
    key = need(nid, c, "key")
    string_or_expr(nid, c, "key")
    string_or_expr(nid, c, "entity")
    if op in ("add", "cas") and "entity" not in c:
        raise GraphError(f"node {nid}: config.entity is required for {op} (a run-scoped "
                         "cell has nobody to race; give the shared entity)")
    if op in WRITE_OPS and isinstance(key, str) and key.startswith("_cryo/"):
        raise GraphError(f"node {nid}: config.key {key!r} is reserved for the engine")
    if op in ("set", "cas"):
        need(nid, c, "value")
    if op == "cas":
        need(nid, c, "expected")
    if op == "incr" and "by" in c and not isinstance(c["by"], (int, float, dict)):
        raise GraphError(f"node {nid}: config.by must be a number")


NODE = NodeType("state", SCHEMA["description"], SCHEMA, check)
