"""The deployment's bound on a fan_out's items (CRYOPG_GRAPH_FAN_OUT_MAX, 10,000 unless
set), checked at submit where the items are known then: a fan_out over a list the
submitted input holds. A list an expression gives at run time past the bound fails its
node instead (cryo._graph_schedule), with the same one-line reason."""

from __future__ import annotations

from typing import Any

from cryopg.db import graph_fan_out_max
from cryopg.errors import FanOutTooLarge


def check_input_fan_outs(structure: dict[str, Any], input_value: Any) -> None:
    """Raises FanOutTooLarge (HTTP 400) when a node's fan_out reads a list of the input
    (`input.xs`) longer than the bound."""
    limit = graph_fan_out_max()
    for node in structure.get("nodes", []):
        expr = node.get("fan_out") if isinstance(node, dict) else None
        path = expr.get("path") if isinstance(expr, dict) else None
        if not isinstance(path, list) or not path or path[0] != "input":
            continue
        got: Any = input_value
        for part in path[1:]:
            got = got.get(part) if isinstance(got, dict) else None
        if isinstance(got, list) and len(got) > limit:
            raise FanOutTooLarge(f"node {node.get('id')}: fan_out has {len(got)} items, over "
                                 f"the limit of {limit} (CRYOPG_GRAPH_FAN_OUT_MAX)")
