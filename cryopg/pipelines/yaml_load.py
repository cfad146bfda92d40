"""Reading a pipeline file: PyYAML's safe loader, with what a CI file should mean.

- Only `true` and `false` are booleans (YAML 1.2), so a top-level `on:` stays the key
  "on" and `yes`/`no`/`off` stay text; dates stay text too (JSON has no date).
- A key given twice in one mapping is an error, not a silent overwrite.
- Keys are text; NaN and infinities are refused (what is stored must print as JSON).
- Aliases are expanded into plain JSON values under a size budget, so a small file of
  nested aliases cannot grow into a huge document.
- Nesting is bounded (MAX_NESTING), and so are integers (64 bits) and text (no NUL):
  what comes out is JSON cryopg can store (cryopg/jsonlimits.py).
- PyYAML composes recursively and slows down steeply with depth (a 10 KiB file of
  `[[[…` took seconds), so a linear scan first estimates the nesting (flow brackets,
  block indentation, `- - -` on one line) and refuses a file far deeper than any
  pipeline before PyYAML sees it; the exact depth is checked after parsing.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from cryopg.jsonlimits import MAX_DEPTH, JsonLimitError, check_json

MAX_SOURCE = 1 << 20  # bytes of YAML
MAX_VALUES = 100_000  # JSON values after aliases are expanded
MAX_NESTING = MAX_DEPTH
# The scan over-counts (brackets in text, a block scalar's own indentation), so it
# refuses only well beyond MAX_NESTING; PyYAML reads this depth in some 50 ms.
MAX_SCANNED_DEPTH = 200
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_LEADING_ITEMS = re.compile(r"(?:[-?][ \t]+)+")  # `- - ? x`: items opened on one line


class YamlError(ValueError):
    """A file that is not the YAML a pipeline can be, said in one line."""


# libyaml's parser when PyYAML was built with it (its wheels are): some ten times faster
# than the pure-Python one (3,000 jobs: 3.6 s of CPU); the constructor and resolvers below
# are Python either way.
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader with YAML 1.2 booleans, no timestamps, and no duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (dict, list)):
                raise YamlError(f"line {key_node.start_mark.line + 1}: a key must be text")
            if key in seen:
                raise YamlError(f"line {key_node.start_mark.line + 1}: key {key!r} is given "
                                "twice in one mapping")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def scanned_depth(source: str) -> int:
    """An upper estimate of the file's nesting, in one linear pass: the deepest run of
    open flow brackets, or of block indentation levels plus the items a line opens
    (`- - - x`)."""
    flow = deepest = 0
    for ch in _NOT_BRACKETS.sub("", source):  # the brackets alone, cut out at C speed
        flow += 1 if ch in "[{" else -1
        if flow > deepest:
            deepest = flow
            if deepest > MAX_SCANNED_DEPTH:
                return deepest
    indents: list[int] = []
    for line in source.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        while indents and indents[-1] >= indent:
            indents.pop()
        indents.append(indent)
        lead = _LEADING_ITEMS.match(stripped)
        deepest = max(deepest, len(indents) + (lead.end() // 2 if lead else 0))
    return deepest


def load_yaml(source: str) -> Any:
    """The file's one document as plain JSON values."""
    if len(source.encode("utf-8", errors="replace")) > MAX_SOURCE:
        raise YamlError(f"the file is larger than {MAX_SOURCE // 1024} KiB")
    if scanned_depth(source) > MAX_SCANNED_DEPTH:
        raise YamlError(f"the file nests deeper than {MAX_NESTING} levels")
    try:
        docs = list(yaml.load_all(source, Loader=_Loader))  # noqa: S506 - a SafeLoader
    except RecursionError:
        raise YamlError(f"the file nests deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python will read
        if isinstance(exc, YamlError):
            raise
        what = str(exc).splitlines()[0]
        what = "an integer has too many digits" if "digits" in what else what[:200]
        raise YamlError(f"not valid YAML: {what}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = exc.problem or exc.context or "not YAML"
        raise YamlError(f"not valid YAML: {where}{what}") from None
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if len(docs) != 1:
        raise YamlError("a pipeline file holds exactly one YAML document")
    budget = [MAX_VALUES]
    value = _plain(docs[0], budget, 0)
    try:
        return check_json(value)
    except JsonLimitError as exc:
        raise YamlError(str(exc)) from None


def _plain(value: Any, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise YamlError(f"the file expands to more than {MAX_VALUES} values")
    if depth > MAX_NESTING:
        raise YamlError(f"the file nests deeper than {MAX_NESTING} levels")
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                if isinstance(k, bool) or k is None:
                    raise YamlError(f"key {k!r} must be text (quote it)")
                k = str(k)
            out[k] = _plain(v, budget, depth + 1)
        return out
    if isinstance(value, list):
        return [_plain(v, budget, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise YamlError(f"{value} is not a JSON number")
    if isinstance(value, bytes):
        raise YamlError("binary values are not allowed")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
