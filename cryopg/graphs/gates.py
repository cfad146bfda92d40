"""The `concurrency` key of graphs, nodes and YAML jobs: a group template, or
`{group, limit, window}` -- at most `limit` (default 1) hold the group at once, or with a
`window` (a duration) at most `limit` take it within any window: a rate limit. The
database keeps the group's limit beside its leases (cryo.lease_limits)."""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, seconds

# The JSON Schema of the key, for the node and job schemas the canvas and docs read.
_TEMPLATE = {"type": "object", "required": ["$template"], "additionalProperties": False,
             "properties": {"$template": {"type": "string", "minLength": 1}}}
SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string", "minLength": 1},
    _TEMPLATE,  # {"$template": "..."}: a group spelled as a template object
    {"type": "object", "required": ["group"], "additionalProperties": False,
     "properties": {"group": {"anyOf": [{"type": "string", "minLength": 1}, _TEMPLATE]},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 10000},
                    "window": {"anyOf": [
                        {"type": "number", "exclusiveMinimum": 0},
                        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"}]}}}]}


def concurrency(value: Any, where: str) -> tuple[Any, dict[str, Any]]:
    """The group's template and the clear keys beside it in a definition
    (concurrency_limit, concurrency_window in seconds), from either form."""
    if not isinstance(value, dict) or set(value) == {"$template"}:
        return value, {}
    unknown = set(value) - {"group", "limit", "window"}
    if unknown or "group" not in value:
        raise GraphError(f"{where}: concurrency is a group, or {{group, limit, window}}")
    extra: dict[str, Any] = {}
    if "limit" in value:
        limit = value["limit"]
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10000:
            raise GraphError(f"{where}: concurrency.limit must be an integer from 1 to 10000")
        extra["concurrency_limit"] = limit
    if "window" in value:
        window = seconds(value["window"], f"{where}: concurrency.window")
        if window <= 0:
            raise GraphError(f"{where}: concurrency.window must be longer than 0")
        extra["concurrency_window"] = window
    return value["group"], extra
