"""A project's connections for connector nodes (sql/functions/91_connections.sql)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from cryopg.engine._sql import _one


@dataclass(frozen=True)
class Connection:
    name: str
    base_url: str
    auth: str  # none, bearer, basic, header
    secret: str | None  # the project secret's name, never its value
    username: str | None
    header: str | None
    headers: dict[str, str]
    created_at: dt.datetime
    updated_at: dt.datetime


async def create_connection(conn: AsyncConnection, org: str, project: str, name: str, *,
                            base_url: str, auth: str, secret: str | None = None,
                            username: str | None = None, header: str | None = None,
                            headers: dict[str, Any] | None = None,
                            replace: bool = False) -> bool:
    return await _one(
        conn, "SELECT cryo.create_connection(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (org, project, name, base_url, auth, secret, username, header, Jsonb(headers or {}),
         replace))


async def _rows(conn: AsyncConnection, sql: str, params: tuple[Any, ...]) -> list[Connection]:
    cur = conn.cursor(row_factory=class_row(Connection))
    await cur.execute(sql, params)
    return await cur.fetchall()


async def list_connections(conn: AsyncConnection, org: str, project: str) -> list[Connection]:
    return await _rows(conn, "SELECT * FROM cryo.list_connections(%s, %s)", (org, project))


async def get_connection(conn: AsyncConnection, org: str, project: str,
                         name: str) -> Connection:
    return (await _rows(conn, "SELECT * FROM cryo.get_connection(%s, %s, %s)",
                        (org, project, name)))[0]


async def delete_connection(conn: AsyncConnection, org: str, project: str, name: str) -> None:
    await conn.execute("SELECT cryo.delete_connection(%s, %s, %s)", (org, project, name))


async def connection_for_run(conn: AsyncConnection, run_id: str, name: str) -> Connection:
    """The connection a connector node of graph run `run_id` names (refused to an
    untrusted run when it has a credential)."""
    return (await _rows(conn, "SELECT * FROM cryo.connection_for_run(%s, %s)",
                        (run_id, name)))[0]
