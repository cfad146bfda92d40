"""Reading request bodies, with a clear 400 for anything that is not a JSON object."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from cryopg.errors import InvalidArgument


async def json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise InvalidArgument("request body must be JSON") from exc
    if not isinstance(body, dict):
        raise InvalidArgument("request body must be a JSON object")
    return body


def position(body: dict[str, Any]) -> int | None:
    """The agent's position of the durable call a request records, when it sent one."""
    value = body.get("position")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidArgument("position must be an integer >= 0")
    return value


def claim_token(body: dict[str, Any]) -> uuid.UUID:
    """The claim token every agent call on a run echoes."""
    try:
        return uuid.UUID(str(body.get("claim_token")))
    except ValueError as exc:
        raise InvalidArgument("claim_token must be a UUID") from exc
