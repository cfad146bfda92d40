"""A stored workflow's `input_schema`, checked on each way a run of it starts from the
server: the start route and a run-again with a new input (a 400 naming the field), a
schedule's tick and a webhook delivery (a recorded refusal), a script's call-graph and a
submitted graph document with an input (CR227, 422). The check itself is
cryopg.graphs.schemas.input_refusal, which a workflow node's child and the driver's
first turn use too; here it runs off the event loop within a bound (local references,
RE2 patterns), as an approval's answer's."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.errors import InputRefused, InvalidArgument, NotFound
from cryopg.graphs import schemas
from cryopg.server import offload

VALIDATE_SECONDS = 5.0


async def refusal_of(structure: dict[str, Any] | None, value: Any) -> str | None:
    """Why `value` may not start a graph of clear structure `structure` (`input: ` and the
    schema's message), or None when it may or the graph declares no schema."""
    if not isinstance((structure or {}).get("input_schema"), dict):
        return None
    return await offload.run(schemas.input_refusal, structure, value, timeout=VALIDATE_SECONDS,
                             what="the input's check against the workflow's input_schema")


async def workflow_structure(conn: AsyncConnection, org: str, project: str,
                             workflow: str | None) -> dict[str, Any] | None:
    """The stored workflow's clear structure; None for a script, or no workflow (an ad-hoc
    run, one since deleted: the start itself says so)."""
    if not workflow:
        return None
    try:
        return (await engine.get_workflow(conn, org, project, workflow))[4]
    except NotFound:
        return None


async def refusal(conn: AsyncConnection, org: str, project: str, workflow: str,
                  value: Any) -> str | None:
    """Why `value` may not start stored `workflow`, or None when it may."""
    return await refusal_of(await workflow_structure(conn, org, project, workflow), value)


async def check(structure: dict[str, Any] | None, value: Any, *,
                code: str = "input_refused") -> None:
    """Raises when `value` may not start the graph: InputRefused (CR227, 422), or with
    `code="invalid_argument"` a 400, as a person's start form is answered."""
    refused = await refusal_of(structure, value)
    if refused is not None:
        raise InvalidArgument(refused) if code == "invalid_argument" else InputRefused(refused)
