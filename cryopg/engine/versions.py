"""A stored workflow's versions (sql/functions/90_tenancy.sql): listed, and one read."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row


@dataclasses.dataclass(frozen=True)
class WorkflowVersion:
    version: int
    filename: str
    kind: str
    pipeline: str | None
    created_by: str | None
    created_at: dt.datetime
    current: bool


@dataclasses.dataclass(frozen=True)
class StoredVersion:
    filename: str
    interpreter: str | None
    source: bytes
    kind: str
    graph: Any
    workdir: str | None
    created_by: str | None
    created_at: dt.datetime


async def list_workflow_versions(conn: AsyncConnection, org: str, project: str,
                                 name: str) -> list[WorkflowVersion]:
    cur = conn.cursor(row_factory=class_row(WorkflowVersion))
    await cur.execute("SELECT * FROM cryo.list_workflow_versions(%s, %s, %s)",
                      (org, project, name))
    return await cur.fetchall()


async def get_workflow_version(conn: AsyncConnection, org: str, project: str, name: str,
                               version: int) -> StoredVersion:
    cur = conn.cursor(row_factory=class_row(StoredVersion))
    await cur.execute("SELECT * FROM cryo.get_workflow_version(%s, %s, %s, %s)",
                      (org, project, name, version))
    return await cur.fetchone()  # type: ignore[return-value]
