"""Reading requests: bodies, their fields and query parameters, with a clear 400
(invalid_argument) for anything malformed. Every route parses through here, so one
kind of field is checked, and refused, the same way everywhere."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

from aiohttp import web

from cryopg.errors import InvalidArgument
from cryopg.server.limits import BODY, check_text, parse_json_off_loop, read_body

# What reaches an int4 column (ordinals, exit codes, limits, retries) must fit it, and a
# bigint one (log chunk ids) its own: out of range is a 400 here, not a 500 in SQL.
INT4 = (-(2**31), 2**31 - 1)
INT8 = (-(2**63), 2**63 - 1)
MAX_NAME = 512  # characters of a name or key that SQL indexes (btree rows are bounded)
MAX_SECONDS = 100 * 365 * 86400  # a duration beyond this overflows an interval


async def _parsed(request: web.Request) -> Any:
    # limits_middleware parsed and checked it already; a route marked raw_body reads here.
    return request[BODY] if BODY in request else await parse_json_off_loop(await read_body(request))


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, as limits.py read and checked it (UTF-8, depth, NUL,
    integers within 64 bits, no NaN or Infinity: what is stored must print as JSON)."""
    body = await _parsed(request)
    if body is None:
        raise InvalidArgument("request body must be JSON: it is empty")
    if not isinstance(body, dict):
        raise InvalidArgument("request body must be a JSON object")
    return body


async def optional_json_body(request: web.Request) -> dict[str, Any]:
    """The body when there is one (a signal or event may carry no payload), else {}."""
    if not request.body_exists or await _parsed(request) is None:
        return {}
    return await json_body(request)


def position(body: dict[str, Any]) -> int | None:
    """The agent's position of the durable call a request records, when it sent one."""
    value = body.get("position")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT4[1]:
        raise InvalidArgument("position must be an integer >= 0 (32-bit)")
    return value


def recorded_at(body: dict[str, Any]) -> dict[str, Any]:
    """Where a durable call is recorded: its pass position, and the path the agent
    built, which SQL checks against the call's identity (None: SQL derives it)."""
    return {"position": position(body), "path": optional_str_field(body, "path")}


def claim_token(body: dict[str, Any]) -> uuid.UUID:
    """The claim token every agent call on a run echoes."""
    try:
        return uuid.UUID(str(body.get("claim_token")))
    except ValueError as exc:
        raise InvalidArgument("claim_token must be a UUID") from exc


def _in_range(value: int, name: str, bounds: tuple[int, int]) -> int:
    if not bounds[0] <= value <= bounds[1]:
        raise InvalidArgument(f"{name} must be an integer from {bounds[0]} to {bounds[1]}")
    return value


def str_field(body: dict[str, Any], name: str, limit: int = MAX_NAME) -> str:
    """A required non-empty string of at most `limit` characters."""
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty string")
    return check_text(value, name, limit)


def optional_str_field(body: dict[str, Any], name: str, limit: int = MAX_NAME) -> str | None:
    """A non-empty string, or None when absent (or null)."""
    return None if body.get(name) is None else str_field(body, name, limit)


def optional_text(body: dict[str, Any], name: str) -> str | None:
    """A string (possibly empty), or None when absent or null; anything else is a 400."""
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string")
    return value


def int_field(body: dict[str, Any], name: str, bounds: tuple[int, int] = INT4) -> int:
    """A JSON integer, strictly: no string, float or boolean; within `bounds`."""
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer")
    return _in_range(value, name, bounds)


def to_int(body: dict[str, Any], name: str, bounds: tuple[int, int] = INT4) -> int:
    """Anything int() takes ("3", 3.0, 3): the lenient reading some agent routes keep;
    within `bounds`."""
    try:
        value = int(body[name])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(f"{name} must be an integer") from exc
    return _in_range(value, name, bounds)


def to_float(body: dict[str, Any], name: str, default: float | None = None,
             limit: float | None = None) -> float | None:
    """Anything float() takes, finite and at most `limit` in size; `default` when
    absent, None when null."""
    value = body.get(name, default)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name} must be a number") from exc
    if not math.isfinite(number) or (limit is not None and abs(number) > limit):
        bound = "finite" if limit is None else f"at most {limit:g} in size"
        raise InvalidArgument(f"{name} must be a number, {bound}")
    return number


def duration(body: dict[str, Any], name: str, default: float | None = None) -> float | None:
    """A number of seconds (lenient, like to_float) an interval can hold."""
    return to_float(body, name, default, MAX_SECONDS)


def seconds_field(body: dict[str, Any], name: str) -> dt.timedelta | None:
    """A positive number of seconds under 100 years, or None when absent."""
    value = body.get(name)
    if value is None:
        return None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not 0 < value < MAX_SECONDS):
        raise InvalidArgument(f"{name} must be a positive number of seconds under 100 years")
    return dt.timedelta(seconds=value)


def script_fields(body: dict[str, Any]) -> tuple[str, str, str | None]:
    """(source, filename, interpreter) of a submitted script or workflow."""
    source, filename = body.get("source"), body.get("filename")
    if not isinstance(source, str) or not isinstance(filename, str) or not filename:
        raise InvalidArgument("source and filename are required strings")
    interpreter = body.get("interpreter")
    if interpreter is not None and not isinstance(interpreter, str):
        raise InvalidArgument("interpreter must be a string")
    return source, filename, interpreter or None


def approval_item(request: web.Request) -> int | None:
    """`?item=K`: the one item of a fanned-out approval node an answer is for (None: all
    its waiting items). A query parameter, so no answer field is taken for it."""
    return query_int(request, "item", 0) if "item" in request.query else None


def query_int(request: web.Request, name: str, default: int,
              bounds: tuple[int, int] = (0, INT4[1])) -> int:
    """An integer query parameter (limits.py already bounded its length)."""
    try:
        value = int(request.query.get(name, str(default)))
    except ValueError as exc:
        raise InvalidArgument(f"{name} must be an integer") from exc
    return _in_range(value, name, bounds)
