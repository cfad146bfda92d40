"""The limits every request meets before its handler runs, in one middleware.

Path parts and query values must be UTF-8 without NUL and of bounded length; a body is
read once (at most MAX_BODY bytes), must be UTF-8 JSON nested at most MAX_DEPTH deep,
with integers that fit a bigint and text without NUL or lone surrogates (PostgreSQL
text and jsonb hold neither, and a surrogate cannot be encoded to be sealed). The
parsed body is kept on the request for bodies.json_body, so nothing parses twice.

A route whose body is authenticated by its raw bytes (a webhook's HMAC) is marked
`raw_body` and checks its body itself with `parse_json` once the signature holds.
Every refusal is a 400 invalid_argument (or 413 payload_too_large) with the usual
JSON error body, never a 5xx.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from aiohttp import web
from aiohttp.typedefs import Handler

from cryopg.errors import CryoError, InvalidArgument

MAX_BODY = 64 << 20  # bytes; scripts and log flushes ride in bodies
MAX_DEPTH = 64  # JSON nesting
MAX_KEY = 1024  # characters of an object key
MAX_PATH_PART = 512  # characters of one decoded path segment
MAX_QUERY = 4096  # characters of one query value (or name)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # JSON integers must fit a bigint
# The request key holding the parsed body (RequestKey is aiohttp 3.13+; a str before).
BODY: Any = (web.RequestKey("cryo_json_body", object) if hasattr(web, "RequestKey")
             else "cryo_json_body")
RAW_BODY = "cryo_raw_body"  # a handler attribute: the route reads its own bytes

_SURROGATE = re.compile("[\ud800-\udfff]")


class PayloadTooLarge(CryoError):
    """A request body over MAX_BODY bytes (no SQLSTATE: raised before any SQL)."""

    code, http_status = "payload_too_large", 413


def raw_body(handler: Handler) -> Handler:
    """Marks a route that reads and checks its own body (see the module doc)."""
    setattr(handler, RAW_BODY, True)
    return handler


def check_text(value: str, where: str, limit: int | None = None) -> str:
    """A string PostgreSQL can hold and UTF-8 can encode, at most `limit` characters."""
    if limit is not None and len(value) > limit:
        raise InvalidArgument(f"{where} is longer than {limit} characters")
    if "\x00" in value:
        raise InvalidArgument(f"{where} must not hold a NUL character")
    if not value.isascii() and _SURROGATE.search(value):
        raise InvalidArgument(f"{where} holds a lone surrogate (not valid Unicode)")
    return value


def _bounded_int(text: str) -> int:
    # Checked on the digits, before int() spends time on a 5,000-digit literal.
    if len(text.lstrip("-")) > 19:
        raise ValueError(f"integer {text[:24]}... does not fit 64 bits")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"integer {text} does not fit 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:
        raise ValueError(f"number {text[:40]} is too large")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _walk(value: Any, trail: list[str], depth: int) -> None:
    if isinstance(value, str):
        check_text(value, ".".join(trail) or "the body")
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise InvalidArgument(f"JSON is nested deeper than {MAX_DEPTH} levels")
        for k, v in value.items():
            check_text(k, f"a key of {'.'.join(trail) or 'the body'}", MAX_KEY)
            trail.append(k)
            _walk(v, trail, depth + 1)
            trail.pop()
    elif isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise InvalidArgument(f"JSON is nested deeper than {MAX_DEPTH} levels")
        for i, v in enumerate(value):
            trail.append(str(i))
            _walk(v, trail, depth + 1)
            trail.pop()


def check_json(value: Any, where: str = "") -> Any:
    """`value` when it is JSON cryopg can store (depth, integers, text); else 400.
    For values parsed elsewhere (YAML, a CLI's input)."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        raise InvalidArgument(f"{where or 'a value'}: integer does not fit 64 bits")
    _walk(value, [where] if where else [], 0)
    return value


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """Bytes to checked JSON (None when empty), or a one-line InvalidArgument."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid UTF-8 (at byte {exc.start})") from None
    if not text.strip():
        return None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                           parse_int=_bounded_int)
    except RecursionError:
        raise InvalidArgument(f"JSON is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise InvalidArgument(f"{what} must be JSON: {exc}".split("\n")[0]) from None
    _walk(value, [], 0)
    return value


def _check_url(request: web.Request) -> None:
    url = request.rel_url
    for segment in url.raw_path.split("/"):
        try:
            part = unquote_to_bytes(segment).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("a path part is not valid UTF-8") from None
        check_text(part, "a path part", MAX_PATH_PART)
    raw_query = url.raw_query_string
    if not raw_query:
        return
    try:
        pairs = parse_qsl(raw_query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise InvalidArgument("the query string is not valid UTF-8") from None
    for name, value in pairs:
        check_text(name, "a query parameter name", MAX_QUERY)
        check_text(value, f"query parameter {name}", MAX_QUERY)


async def read_body(request: web.Request, limit: int = MAX_BODY) -> bytes:
    """The raw body, refused with 413 beyond `limit` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes") from None
    if len(raw) > limit:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes")
    return raw


@web.middleware
async def limits_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    _check_url(request)
    if request.body_exists and not getattr(request.match_info.handler, RAW_BODY, False):
        request[BODY] = parse_json(await read_body(request))
    return await handler(request)
