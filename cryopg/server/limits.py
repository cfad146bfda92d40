"""The limits every request meets before its handler runs, in one middleware.

Path parts and query values must be UTF-8 without NUL and of bounded length; a body is
read once (at most MAX_BODY bytes) and must be JSON as cryopg/jsonlimits.py defines it
(depth, 64-bit integers, no NUL or lone surrogate). The parsed body is kept on the
request for bodies.json_body, so nothing parses twice. A body of few values is read
on the loop (C json, microseconds); one that may hold many (counted by its commas,
colons and brackets, at C speed) is read in a worker process (offload.py), since
checking millions of values in Python would stall every other request.

A route whose body is authenticated by its raw bytes (a webhook's HMAC) is marked
`raw_body` and checks its body itself with `parse_json` once the signature holds.
Every refusal is a 400 invalid_argument (or 413 payload_too_large) with the usual
JSON error body, never a 5xx.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from aiohttp import web
from aiohttp.typedefs import Handler

from cryopg import jsonlimits
from cryopg.errors import CryoError, InvalidArgument
from cryopg.jsonlimits import JsonLimitError

MAX_BODY = 64 << 20  # bytes; scripts and log flushes ride in bodies
MAX_PATH_PART = 512  # characters of one decoded path segment
MAX_QUERY = 4096  # characters of one query value (or name)
INLINE_VALUES = 20_000  # a body that may hold more JSON values is read in a worker
# The request key holding the parsed body (RequestKey is aiohttp 3.13+; a str before).
BODY: Any = (web.RequestKey("cryo_json_body", object) if hasattr(web, "RequestKey")
             else "cryo_json_body")
RAW_BODY = "cryo_raw_body"  # a handler attribute: the route reads its own bytes


class PayloadTooLarge(CryoError):
    """A request body over MAX_BODY bytes (no SQLSTATE: raised before any SQL)."""

    code, http_status = "payload_too_large", 413


def raw_body(handler: Handler) -> Handler:
    """Marks a route that reads and checks its own body (see the module doc)."""
    setattr(handler, RAW_BODY, True)
    return handler


def check_text(value: str, where: str, limit: int | None = None) -> str:
    """jsonlimits.check_text, refusing with a 400."""
    try:
        return jsonlimits.check_text(value, where, limit)
    except JsonLimitError as exc:
        raise InvalidArgument(str(exc)) from None


def parse_json(raw: bytes, what: str = "request body") -> Any:
    """Bytes to checked JSON (None when empty), or a one-line 400."""
    if not raw.strip():
        return None
    try:
        return jsonlimits.loads(raw, what)
    except JsonLimitError as exc:
        raise InvalidArgument(str(exc)) from None


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


async def read_body(request: web.Request, limit: int | None = None) -> bytes:
    """The raw body, refused with 413 beyond `limit` bytes (MAX_BODY by default)."""
    limit = MAX_BODY if limit is None else min(limit, MAX_BODY)
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes") from None
    if len(raw) > limit:
        raise PayloadTooLarge(f"a request body is at most {limit} bytes")
    return raw


BODY_SECONDS = 10.0  # reading one request body of many values in a worker


def values_bound(raw: bytes) -> int:
    """At least the number of JSON values in `raw` (a comma, colon or opening bracket
    precedes each but the first; those inside strings only raise the count)."""
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


async def parse_json_off_loop(raw: bytes, what: str = "request body") -> Any:
    """parse_json, in a worker process when the body may hold many values."""
    if values_bound(raw) <= INLINE_VALUES or not raw.strip():
        return parse_json(raw, what)
    from cryopg.server import offload

    try:
        return await offload.run(jsonlimits.loads, raw, what, timeout=BODY_SECONDS,
                                 what=f"reading the {what}")
    except JsonLimitError as exc:
        raise InvalidArgument(str(exc)) from None


@web.middleware
async def limits_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    _check_url(request)
    if request.body_exists and not getattr(request.match_info.handler, RAW_BODY, False):
        request[BODY] = await parse_json_off_loop(await read_body(request))
    return await handler(request)
