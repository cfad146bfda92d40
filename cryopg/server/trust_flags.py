"""The two trust opt-ins a request may carry (docs/security/trust.md): `public`, a trusted
writer publishing what it writes to untrusted runs, and `tainted`, a trusted reader asking
for what untrusted runs wrote. Both default to false. Neither says who the caller is:
SQL takes a run's trust from runs.untrusted, so an untrusted run's `public` changes
nothing and its `tainted` is what it reads anyway."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cryopg.errors import InvalidArgument

PUBLIC, TAINTED = "public", "tainted"


def flag(body: dict[str, Any], name: str) -> bool:
    """An optional boolean field of a JSON body (absent or null: false)."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be true or false")
    return value


def query_flag(request: web.Request, name: str) -> bool:
    """An optional boolean query parameter: 1/true/yes, or 0/false/no (absent: false)."""
    value = request.query.get(name, "0").lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no", ""):
        return False
    raise InvalidArgument(f"{name} must be 1 or 0")
