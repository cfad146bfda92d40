"""A stored workflow's `input_schema`, checked on each way a run of it starts from the
server: the start route, a schedule's tick, a webhook delivery. The check runs off the
event loop within a bound (local references, RE2 patterns), as an approval's answer's."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.errors import NotFound
from cryopg.graphs import schemas
from cryopg.server import offload

VALIDATE_SECONDS = 5.0


async def refusal(conn: AsyncConnection, org: str, project: str, workflow: str,
                  value: Any) -> str | None:
    """Why `value` may not start `workflow` (the schema's message, prefixed `input: `), or
    None when it may (or the workflow declares no schema, or is not there: the start
    itself says so)."""
    try:
        structure = (await engine.get_workflow(conn, org, project, workflow))[4]
    except NotFound:
        return None
    schema = (structure or {}).get("input_schema")
    if schema is None:
        return None
    error = await offload.run(schemas.first_error, schema, {} if value is None else value,
                              timeout=VALIDATE_SECONDS,
                              what="the input's check against the workflow's input_schema")
    return None if error is None else f"input: {error}"
