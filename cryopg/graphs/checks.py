"""What the graph document compiler and the node types (cryopg/graphs/nodes/) share:
the one-line error, durations, config helpers, and approval schemas whose patterns run
on RE2. A module of its own, so the node types need not import the compiler."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import re2

STATE_OPS = frozenset({"get", "set", "delete", "add", "cas", "incr"})
WRITE_OPS = frozenset({"set", "delete", "add", "cas", "incr"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


class GraphError(ValueError):
    """A graph document that cannot run, said in one line."""


def seconds(value: Any, where: str) -> float:
    """A duration: seconds as a number, or text such as 500ms, 2s, 10m, 1h, 7d."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        secs = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise GraphError(f"{where}: {value!r} is not a duration (seconds, or e.g. 2s, 10m, 7d)")
    if not 0 <= secs <= 10 * 365 * 86400:
        raise GraphError(f"{where}: a duration must be between 0 and 10 years")
    return secs


def need(nid: str, config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise GraphError(f"node {nid}: config.{key} is required")
    return config[key]


def string_or_expr(nid: str, c: dict[str, Any], key: str) -> None:
    v = c.get(key)
    if v is not None and not isinstance(v, (str, dict)):
        raise GraphError(f"node {nid}: config.{key} must be a string")


# -- approval schemas: patterns run on RE2 ----------------------------------------------
# An approval's answer is checked against its fields' JSON Schema on the server. Python's
# re backtracks (`^(a+)+$` against 27 a's and a ! takes half a minute), so `pattern` runs
# on RE2, which never does; a pattern RE2 cannot compile (backreferences, lookaround) is
# refused when the graph is submitted. patternProperties is refused outright: jsonschema
# also matches its keys with re when it decides additionalProperties.

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is ours to report, not absl's to print


@functools.lru_cache(maxsize=256)
def re2_compiled(pattern: str) -> Any:
    """The RE2 form of a pattern, or re2.error."""
    return re2.compile(pattern, options=_RE2_OPTIONS)


def _re2_pattern(validator: Any, pattern: str, instance: Any,
                 schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not re2_compiled(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance[:80]!r} does not match {pattern!r}")


ApprovalValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _re2_pattern})


def schema_patterns(schema: Any) -> Iterator[tuple[str, Any]]:
    """(keyword, value) of every pattern and patternProperties in a schema, at any depth
    (a property named "pattern" holds a schema, not a string, so it is told apart)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "patternProperties" or (k == "pattern" and isinstance(v, str)):
                    yield k, v
                stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)


def check_patterns(nid: str, fields: dict[str, Any]) -> None:
    for keyword, value in schema_patterns(fields):
        if keyword == "patternProperties":
            raise GraphError(f"node {nid}: config.fields: patternProperties is not supported "
                             "(name the properties)")
        try:
            re2_compiled(value)
        except re2.error as exc:
            why = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            raise GraphError(f"node {nid}: config.fields: pattern {value[:80]!r} is not "
                             f"supported (RE2, no backtracking: {why})") from None


def find_cycle(order: list[str], deps: dict[str, list[str]]) -> list[str] | None:
    """A cycle through `deps` (each name's predecessors) as [a, b, ..., a], or None.
    Depth-first with an explicit stack: ten thousand names in a line are no recursion."""
    state: dict[str, int] = {}  # 1 on the current trail, 2 done
    for root in order:
        if state.get(root):
            continue
        trail: list[str] = [root]
        stack: list[Iterator[str]] = [iter(deps[root])]
        state[root] = 1
        while stack:
            d = next(stack[-1], None)
            if d is None:
                state[trail.pop()] = 2
                stack.pop()
            elif state.get(d) == 1:
                return trail[trail.index(d):] + [d]
            elif not state.get(d):
                state[d] = 1
                trail.append(d)
                stack.append(iter(deps[d]))
    return None
