"""A run's birth: a script or workflow submitted, and its input sealed once claimed."""

from __future__ import annotations

import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from cryopg.engine._sql import _one


async def submit_script(conn: AsyncConnection, org: str, project: str, *, filename: str,
                        interpreter: str | None, source: bytes, input: bytes | None,
                        idempotency_key: str | None, required_caps: list[str] | None,
                        untrusted: bool = False, concurrency: str | None = None,
                        policy: str | None = None,
                        workdir: str | None = None,
                        graph: dict[str, Any] | None = None, timeout: float | None = None,
                        priority: int | None = None) -> tuple[str | None, bool]:
    """Returns (run id, created); the id is None when `skip` found the group held."""
    cur = await conn.execute(
        "SELECT * FROM cryo.submit_script(%s, %s, %s, %s, %s, %s, %s, %s, NULL, NULL, %s, %s, %s,"
        " NULL, %s, %s, %s, %s)",
        (org, project, filename, interpreter, source, input, idempotency_key, required_caps,
         concurrency, policy, untrusted, workdir, Jsonb(graph) if graph is not None else None,
         timeout, priority))
    run_id, created = await cur.fetchone()
    return run_id, created


async def required_caps(conn: AsyncConnection, filename: str, interpreter: str | None
                        ) -> list[str]:
    """The capabilities a script needs, by the one rule submit_script applies."""
    return list(await _one(conn, "SELECT cryo._required_caps(%s, %s)", (filename, interpreter)))


async def submit_run(conn: AsyncConnection, org: str, project: str, workflow: str,
                     input: Any = None, idempotency_key: str | None = None) -> str:
    return await _one(conn, "SELECT cryo.submit_run(%s, %s, %s, %s, %s)",
                      (org, project, workflow, None if input is None else Jsonb(input),
                       idempotency_key))


async def put_workflow(conn: AsyncConnection, org: str, project: str, name: str, *,
                       filename: str, interpreter: str | None, source: bytes,
                       graph: dict[str, Any] | None = None,
                       workdir: str | None = None, digest: bytes | None = None,
                       by: str | None = None, base_version: int | None = None,
                       timeout: float | None = None, priority: int | None = None) -> int:
    """Stores the workflow; returns its current version (a new one unless unchanged)."""
    return await _one(conn, "SELECT cryo.put_workflow(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                            "%s, %s, %s)",
                      (org, project, name, filename, interpreter, source,
                       Jsonb(graph) if graph is not None else None, workdir, digest, by,
                       base_version, timeout, priority))


async def seal_run_input(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                         sealed: bytes) -> None:
    await conn.execute("SELECT cryo.seal_run_input(%s, %s, %s)", (run_id, token, sealed))
