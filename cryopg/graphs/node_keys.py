"""The keys a graph node takes beside its `config` (`if`, `retry`, `concurrency`, ...):
one JSON Schema, the one home of which keys a node accepts. The document check
validates every node with it before compiling (so an error names the field, e.g.
`node a: concurrency.limit: 0 is less than the minimum of 1`), and the canvas editor
reads it beside the node types (GET /api/v1/graphs/node-types, `node_keys`).

To add a node-level key: one entry in KEYS (its JSON Schema, with a `description`),
then its compiling in document.py's `_compile_node`; docs/graphs.md lists them.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from cryopg.graphs import flow, gates
from cryopg.graphs.checks import GraphError
from cryopg.graphs.nodes.wait import DURATION

# An expression: its text, or {"$expr": text}.
_EXPR_TEXT = {"type": "string", "minLength": 1}
_EXPR = {"anyOf": [_EXPR_TEXT, {"type": "object", "required": ["$expr"],
                                "additionalProperties": False,
                                "properties": {"$expr": _EXPR_TEXT}}]}

# One dict per key: what the node accepts there, and what it does (for the canvas).
KEYS: dict[str, dict[str, Any]] = {
    "id": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
           "description": "The node's name, unique in the graph: 1-64 letters, digits, _ or -."},
    "type": {"type": "string", "description": "The node type (GET /api/v1/graphs/node-types)."},
    "config": {"type": "object",
               "description": "The type's settings, checked by that type's schema."},
    "if": {**_EXPR_TEXT, "description": "An expression: the node runs only when it is true, "
                                        "and is skipped otherwise."},
    "retry": {"type": "object", "additionalProperties": False,
              "description": "Runs a failed node again: up to `attempts` times in all, "
                             "`backoff` apart (a duration, or `exponential`: `delay`, then "
                             "twice as long each time up to `max_delay`), only for the exit "
                             "codes in `on_exit` and when `retry_if` (over failure.exit_code, "
                             "failure.error, failure.status) holds, when given.",
              "properties": {
                  "attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                  "backoff": {"anyOf": [DURATION, {"enum": ["constant", "exponential"]}]},
                  "delay": DURATION,
                  "max_delay": DURATION,
                  "retry_if": _EXPR_TEXT,
                  "on_exit": {"type": "array",
                              "items": {"type": "integer", "minimum": 0, "maximum": 255}}}},
    "timeout": {**DURATION,
                "description": "Bounds each attempt of a job node (shell, script, code, http, "
                               "connector, workflow): past it the job's process tree is killed "
                               "and the attempt fails with exit code 124."},
    "concurrency": {**gates.SCHEMA,
                    "description": "A group (a template) at most `limit` (default 1) of whose "
                                   "holders run at once, or with a `window` at most `limit` "
                                   "start within any window: {group, limit, window}."},
    "fan_out": {"type": "object", "required": ["items"], "additionalProperties": False,
                "description": "Runs one instance per item of `items` (an expression that "
                               "gives a list), at most `max_parallel` at once.",
                "properties": {"items": _EXPR,
                               "max_parallel": {"type": "integer", "minimum": 1}}},
    "continue_on_error": {"type": "boolean",
                          "description": "When true, the graph goes on after this node fails."},
    "always": {"type": "boolean",
               "description": "When true, the node runs once what it depends on has ended, "
                              "even if that failed or was skipped."},
    **flow.SCHEMA,  # loop, stop_if, cache
}
REQUIRED = ("id", "type")


def schema() -> dict[str, Any]:
    """The JSON Schema of a node object (its config left to the type's own schema)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "description": "A graph node: its id, type and config, and the keys beside "
                           "them that say when and how it runs.",
            "properties": KEYS, "required": list(REQUIRED), "additionalProperties": False}


# The flow keys are checked by flow.compile_flow, whose messages say more ("loop.max_iterations
# is required"); here they are only known.
_VALIDATOR = jsonschema.Draft202012Validator(
    {**schema(), "properties": {**KEYS, **{k: {} for k in flow.SCHEMA}}})


def check(nid: str, node: dict[str, Any]) -> None:
    """A node's own keys against the schema, or one GraphError naming the node and the
    field (`node a: concurrency.limit: ...`, `node a: unknown key 'retries'`)."""
    unknown = sorted(set(node) - KEYS.keys())
    if unknown:
        raise GraphError(f"node {nid}: unknown key {unknown[0]!r} (a node takes "
                         f"{', '.join(KEYS)})")
    error = best_match(_VALIDATOR.iter_errors(node))  # inside an anyOf: the branch that fits
    if error is None:
        return
    field = ".".join(str(p) for p in error.absolute_path)
    raise GraphError(f"node {nid}: {field}: {error.message}" if field else
                     f"node {nid}: {error.message}")

