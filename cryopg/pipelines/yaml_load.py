"""Reading a pipeline file: PyYAML's safe loader, with what a CI file should mean.

- Only `true` and `false` are booleans (YAML 1.2), so a top-level `on:` stays the key
  "on" and `yes`/`no`/`off` stay text; dates stay text too (JSON has no date).
- A key given twice in one mapping is an error, not a silent overwrite.
- Keys are text; NaN and infinities are refused (what is stored must print as JSON).
- Aliases are expanded into plain JSON values under a size budget, so a small file of
  nested aliases cannot grow into a huge document.
- Nesting is bounded (MAX_NESTING), and so are integers (64 bits) and text (no NUL):
  what comes out is JSON cryopg can store (cryopg/jsonlimits.py). PyYAML composes
  recursively, so a file nested near Python's recursion limit is refused from the
  RecursionError it raises.
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


class YamlError(ValueError):
    """A file that is not the YAML a pipeline can be, said in one line."""


class _Loader(yaml.SafeLoader):
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


def load_yaml(source: str) -> Any:
    """The file's one document as plain JSON values."""
    if len(source.encode("utf-8", errors="replace")) > MAX_SOURCE:
        raise YamlError(f"the file is larger than {MAX_SOURCE // 1024} KiB")
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
