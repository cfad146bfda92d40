"""A node's control-flow fields (issue 39 item 7), checked and compiled: `loop` (its body,
the node, repeated while or until an expression over the last iteration holds, at most
`max_iterations` times), `stop_if` (the run ends early, successfully, when it holds after
the node succeeded) and `cache` (an output stored under a key for a ttl). The database
side is sql/functions/74_graph_flow.sql; the expression forms are in docs/graphs.md.

`cache.key` is a template rendered with the node's config (it may read `input`, `nodes`,
`item`), so it is compiled into the config under CACHE_CONFIG, which the driver takes out
before the node's type sees its config (cryopg/graphs/starts.py).
"""

from __future__ import annotations

from typing import Any

from cryopg.graphs.checks import GraphError, seconds
from cryopg.graphs.expr import parse, parse_template

FLOW_KEYS = frozenset({"loop", "stop_if", "cache"})
CACHE_CONFIG = "$cache"
MAX_ITERATIONS = 10_000
# A cache needs a node whose output a job (or a child run) makes: a database node's
# output is the state it read or wrote, which a stored copy would only make stale.
UNCACHED_TYPES = frozenset({"state", "wait", "approval"})

_EXPR = {"type": "string", "description": "an expression (docs/graphs.md#expressions)"}
# The JSON Schema of these node fields, part of the one schema of a node's keys
# (cryopg/graphs/node_keys.py, served as `node_keys` beside the node types).
SCHEMA: dict[str, Any] = {
    "loop": {
        "type": "object", "additionalProperties": False, "required": ["max_iterations"],
        "description": "Runs the node again while `while` holds (or until `until` does) "
                       "over its last iteration (nodes.<id>.output, node.iteration); "
                       "fails when max_iterations is reached and it would go on.",
        "properties": {"while": _EXPR, "until": _EXPR,
                       "max_iterations": {"type": "integer", "minimum": 1,
                                          "maximum": MAX_ITERATIONS}},
        "oneOf": [{"required": ["while"]}, {"required": ["until"]}]},
    "stop_if": {**_EXPR, "description": "Decided once the node succeeded: when it holds, "
                                       "the run ends successfully and every node not yet "
                                       "started is skipped."},
    "cache": {
        "type": "object", "additionalProperties": False, "required": ["key", "ttl"],
        "description": "A stored output younger than ttl under the rendered key ends the "
                       "node at once (marked cached); else it runs and stores its output.",
        "properties": {"key": {"type": "string", "minLength": 1,
                               "description": "a template ({{ input.x }}, {{ item }})"},
                       "ttl": {"type": ["string", "number"],
                               "description": "a duration: 30s, 10m, 1h, 7d"}}},
}


def compile_flow(n: dict[str, Any], known: frozenset[str]) -> tuple[dict[str, Any],
                                                                     dict[str, Any]]:
    """The node's flow fields as its compiled structure holds them, and what goes into
    its compiled config; GraphError (or ExprError) naming the node and field."""
    nid, ntype = n["id"], n.get("type")
    out: dict[str, Any] = {}
    config: dict[str, Any] = {}
    if "loop" in n:
        out["loop"] = _loop(n["loop"], nid, known)
        if "fan_out" in n:
            raise GraphError(f"node {nid}: loop and fan_out do not go together (loop over a "
                             "workflow node whose graph fans out)")
    if "stop_if" in n:
        if not isinstance(n["stop_if"], str):
            raise GraphError(f"node {nid}: stop_if must be an expression (text)")
        out["stop_if"] = parse(n["stop_if"], known)
    if "cache" in n:
        c = n["cache"]
        if not isinstance(c, dict) or set(c) != {"key", "ttl"}:
            raise GraphError(f"node {nid}: cache is {{\"key\": TEMPLATE, \"ttl\": DURATION}}")
        if ntype in UNCACHED_TYPES:
            raise GraphError(f"node {nid}: a {ntype} node has no cache (its output is the "
                             "database's, not a job's)")
        if "loop" in n:
            raise GraphError(f"node {nid}: a loop's iterations are not cached (cache the "
                             "body's workflow node instead)")
        if not isinstance(c["key"], str) or not c["key"]:
            raise GraphError(f"node {nid}: cache.key must be text (a template)")
        ttl = seconds(c["ttl"], f"node {nid}: cache.ttl")
        if ttl <= 0:
            raise GraphError(f"node {nid}: cache.ttl must be more than 0")
        out["cache"] = {"ttl": ttl}
        config[CACHE_CONFIG] = {"key": {"$template": parse_template(c["key"], known)},
                                "ttl": ttl}
    return out, config


def _loop(value: Any, nid: str, known: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) - {"while", "until", "max_iterations"}:
        raise GraphError(f"node {nid}: loop is {{\"while\" or \"until\": EXPR, "
                         "\"max_iterations\": N}")
    conds = [k for k in ("while", "until") if k in value]
    if len(conds) != 1:
        raise GraphError(f"node {nid}: loop takes exactly one of while and until")
    cond = value[conds[0]]
    if not isinstance(cond, str):
        raise GraphError(f"node {nid}: loop.{conds[0]} must be an expression (text)")
    n = value.get("max_iterations")
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ITERATIONS:
        raise GraphError(f"node {nid}: loop.max_iterations is required, an integer from 1 "
                         f"to {MAX_ITERATIONS}")
    return {conds[0]: parse(cond, known), "max_iterations": n}
