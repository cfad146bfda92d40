"""What JSON cryopg accepts, wherever it comes from (a request body, a graph document,
a YAML pipeline, a CLI's --input): nested at most MAX_DEPTH deep, integers within a
bigint, finite numbers, text without NUL or lone surrogates (PostgreSQL text and jsonb
hold neither, and a surrogate cannot be encoded to be sealed), keys of bounded length.

Pure Python (no aiohttp, no psycopg): the CLI and the graph compiler use it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # JSON nesting
MAX_KEY = 1024  # characters of an object key
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # JSON integers must fit a bigint

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonLimitError(ValueError):
    """JSON cryopg will not take, said in one line."""


def check_text(value: str, where: str, limit: int | None = None) -> str:
    """A string PostgreSQL can hold and UTF-8 can encode, at most `limit` characters."""
    if limit is not None and len(value) > limit:
        raise JsonLimitError(f"{where} is longer than {limit} characters")
    if "\x00" in value:
        raise JsonLimitError(f"{where} must not hold a NUL character")
    if not value.isascii() and _SURROGATE.search(value):
        raise JsonLimitError(f"{where} holds a lone surrogate (not valid Unicode)")
    return value


def check_int(value: int, where: str) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise JsonLimitError(f"{where}: integer does not fit 64 bits")
    return value


def _bounded_int(text: str) -> int:
    # Checked on the digits, before int() spends time on a 5,000-digit literal.
    if len(text.lstrip("-")) > 19:
        raise ValueError(f"integer {text[:24]}... does not fit 64 bits")
    return check_int(int(text), f"integer {text}")


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:
        raise ValueError(f"number {text[:40]} is too large")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _deeper(depth: int) -> int:
    if depth >= MAX_DEPTH:
        raise JsonLimitError(f"JSON is nested deeper than {MAX_DEPTH} levels")
    return depth + 1


def _walk(value: Any, trail: list[str], depth: int) -> None:
    # Recursion is bounded by MAX_DEPTH (checked before each level).
    if isinstance(value, str):
        check_text(value, ".".join(trail) or "the value")
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        check_int(value, ".".join(trail) or "the value")
    elif isinstance(value, float):
        if value - value != 0.0:
            raise JsonLimitError(f"{'.'.join(trail) or 'the value'}: {value} is not a JSON number")
    elif isinstance(value, dict):
        inner = _deeper(depth)
        for k, v in value.items():
            if not isinstance(k, str):
                raise JsonLimitError(f"a key of {'.'.join(trail) or 'the value'} is not text")
            check_text(k, f"a key of {'.'.join(trail) or 'the value'}", MAX_KEY)
            trail.append(k)
            _walk(v, trail, inner)
            trail.pop()
    elif isinstance(value, list):
        inner = _deeper(depth)
        for i, v in enumerate(value):
            trail.append(str(i))
            _walk(v, trail, inner)
            trail.pop()
    else:
        raise JsonLimitError(f"{'.'.join(trail) or 'the value'}: {type(value).__name__} "
                             "is not JSON")


def check_json(value: Any, where: str = "") -> Any:
    """`value` when it is JSON cryopg can store (depth, integers, text), else
    JsonLimitError. One walk; for values parsed elsewhere (YAML) or by `loads`."""
    _walk(value, [where] if where else [], 0)
    return value


def loads(text: str | bytes, what: str = "the value") -> Any:
    """Text (or UTF-8 bytes) to checked JSON, or a one-line JsonLimitError."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonLimitError(f"{what} is not valid UTF-8 (at byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                           parse_int=_bounded_int)
    except RecursionError:
        raise JsonLimitError(f"{what}: JSON is nested deeper than {MAX_DEPTH} levels") from None
    except JsonLimitError:
        raise
    except ValueError as exc:
        raise JsonLimitError(f"{what} is not valid JSON: {exc}".split("\n")[0]) from None
    return check_json(value)
