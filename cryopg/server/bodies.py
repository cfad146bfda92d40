"""Reading requests: bodies, their fields and query parameters, with a clear 400
(invalid_argument) for anything malformed. Every route parses through here, so one
kind of field is checked, and refused, the same way everywhere."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

from aiohttp import web

from cryopg.errors import InvalidArgument


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object. NaN and Infinity (and a number too large for a
    double, which would read as one) are refused: what is stored must print as JSON."""
    try:
        body = json.loads(await request.text(), parse_constant=_no_constant,
                          parse_float=_finite_float)
    except ValueError as exc:
        raise InvalidArgument(f"request body must be JSON: {exc}".split("\n")[0]) from exc
    if not isinstance(body, dict):
        raise InvalidArgument("request body must be a JSON object")
    return body


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value != 0.0:
        raise ValueError(f"number {text[:40]} is too large")
    return value


async def optional_json_body(request: web.Request) -> dict[str, Any]:
    """The body when there is one (a signal or event may carry no payload), else {}."""
    return await json_body(request) if request.can_read_body else {}


def position(body: dict[str, Any]) -> int | None:
    """The agent's position of the durable call a request records, when it sent one."""
    value = body.get("position")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgument("position must be an integer >= 0")
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


def str_field(body: dict[str, Any], name: str) -> str:
    """A required non-empty string."""
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty string")
    return value


def optional_str_field(body: dict[str, Any], name: str) -> str | None:
    """A non-empty string, or None when absent (or null)."""
    return None if body.get(name) is None else str_field(body, name)


def int_field(body: dict[str, Any], name: str) -> int:
    """A JSON integer, strictly: no string, float or boolean."""
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer")
    return value


def to_int(body: dict[str, Any], name: str) -> int:
    """Anything int() takes ("3", 3.0, 3): the lenient reading some agent routes keep."""
    try:
        return int(body[name])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name} must be an integer") from exc


def to_float(body: dict[str, Any], name: str, default: float | None = None) -> float | None:
    """Anything float() takes; `default` when absent, None when null."""
    value = body.get(name, default)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{name} must be a number") from exc


def seconds_field(body: dict[str, Any], name: str) -> dt.timedelta | None:
    """A positive number of seconds under 100 years, or None when absent."""
    value = body.get(name)
    if value is None:
        return None
    if (not isinstance(value, (int, float)) or isinstance(value, bool)
            or not 0 < value < 100 * 365 * 86400):
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


def query_int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, str(default)))
    except ValueError as exc:
        raise InvalidArgument(f"{name} must be an integer") from exc
