"""Reading request bodies, with a clear 400 for anything that is not a JSON object."""

from __future__ import annotations

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
