"""The node registry: one module per node type (nodes/<type>.py), each with the JSON
Schema of its config, the checks a schema cannot say, and where it runs and what it
outputs. The document compiler validates with it, the API serves it to the canvas
editor (GET /api/v1/graphs/node-types), and a test holds docs/graphs.md to it. Adding a
node type is one module here plus its line in TYPES."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.nodes.base import NodeType


def _registry() -> dict[str, NodeType]:
    from cryopg.graphs.nodes import (
        approval,
        code,
        connector,
        http,
        script,
        shell,
        state_node,
        wait,
        workflow,
    )

    return {m.NODE.type: m.NODE
            for m in (state_node, shell, code, script, http, connector, wait, approval, workflow)}


TYPES: dict[str, NodeType] = _registry()


def node_types() -> list[dict[str, Any]]:
    """What GET /api/v1/graphs/node-types answers: every type with its config schema."""
    return [t.listing() for t in TYPES.values()]


def node_fields() -> dict[str, Any]:
    """The JSON Schema of the fields every node may carry beside its config that editors
    build forms for (loop, stop_if, cache: cryopg/graphs/flow.py)."""
    from cryopg.graphs.flow import SCHEMA

    return {"type": "object", "properties": SCHEMA}
