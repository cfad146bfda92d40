"""Orgs, their keys and members, projects (retention, deletion), project secrets, and
the database roles of applications bound to a tenant."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import Member, SecretName


async def get_org_key(conn: AsyncConnection, org: str) -> tuple[str | None, bytes | None]:
    cur = await conn.execute("SELECT * FROM cryo.get_org_key(%s)", (org,))
    key_id, wrapped = await cur.fetchone()
    return key_id, wrapped


async def set_org_key(conn: AsyncConnection, org: str, key_id: str,
                      wrapped: bytes) -> tuple[str, bytes]:
    cur = await conn.execute("SELECT * FROM cryo.set_org_key(%s, %s, %s)", (org, key_id, wrapped))
    key_id, wrapped = await cur.fetchone()
    return key_id, wrapped


async def list_org_keys(conn: AsyncConnection) -> list[tuple[str, str, bytes]]:
    cur = await conn.execute("SELECT * FROM cryo.list_org_keys()")
    return [tuple(r) for r in await cur.fetchall()]


async def rewrap_org_keys(conn: AsyncConnection, rows: list[tuple[str, bytes, bytes]]) -> int:
    """Each row is (org, old wrapped key, new wrapped key); all or nothing."""
    return await _one(conn, "SELECT cryo.rewrap_org_keys(%s, %s, %s)",
                      ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))


async def ensure_org(conn: AsyncConnection, slug: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.ensure_org(%s, %s)", (slug, name))


@dataclass(frozen=True)
class ProjectRow:
    slug: str
    name: str
    created_at: dt.datetime


async def list_projects(conn: AsyncConnection, org: str) -> list[ProjectRow]:
    cur = conn.cursor(row_factory=class_row(ProjectRow))
    await cur.execute("SELECT * FROM cryo.list_projects(%s)", (org,))
    return await cur.fetchall()


@dataclass(frozen=True)
class WorkflowRow:
    name: str
    filename: str
    kind: str
    pipeline: str | None
    updated_at: dt.datetime
    schedules: int
    handlers: int
    webhooks: int
    version: int
    updated_by: str | None


async def list_workflows(conn: AsyncConnection, org: str, project: str) -> list[WorkflowRow]:
    cur = conn.cursor(row_factory=class_row(WorkflowRow))
    await cur.execute("SELECT * FROM cryo.list_workflows(%s, %s)", (org, project))
    return await cur.fetchall()


async def delete_workflow(conn: AsyncConnection, org: str, project: str, name: str) -> None:
    await conn.execute("SELECT cryo.delete_workflow(%s, %s, %s)", (org, project, name))


async def ensure_project(conn: AsyncConnection, org: str, slug: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.ensure_project(%s, %s, %s)", (org, slug, name))


async def rename_project(conn: AsyncConnection, org: str, slug: str, name: str) -> None:
    await conn.execute("SELECT cryo.rename_project(%s, %s, %s)", (org, slug, name))


async def delete_project(conn: AsyncConnection, org: str, slug: str) -> int:
    return await _one(conn, "SELECT cryo.delete_project(%s, %s)", (org, slug))


async def get_retention(conn: AsyncConnection, org: str, slug: str) -> tuple[Any, Any]:
    cur = await conn.execute("SELECT runs, events FROM cryo.get_retention(%s, %s)", (org, slug))
    row = await cur.fetchone()
    assert row is not None  # the function raises for an unknown project
    return row[0], row[1]


async def set_retention(conn: AsyncConnection, org: str, slug: str,
                        runs: dt.timedelta | None, events: dt.timedelta | None) -> None:
    await conn.execute("SELECT cryo.set_retention(%s, %s, %s, %s)", (org, slug, runs, events))


async def ensure_member(conn: AsyncConnection, org: str, login: str, role: str) -> str:
    return await _one(conn, "SELECT cryo.ensure_member(%s, %s, %s)", (org, login, role))


async def put_member(conn: AsyncConnection, org: str, login: str, role: str,
                     by: str | None) -> str:
    return await _one(conn, "SELECT cryo.put_member(%s, %s, %s, %s)", (org, login, role, by))


async def remove_member(conn: AsyncConnection, org: str, login: str, by: str | None) -> None:
    await conn.execute("SELECT cryo.remove_member(%s, %s, %s)", (org, login, by))


async def list_members(conn: AsyncConnection, org: str) -> list[Member]:
    cur = conn.cursor(row_factory=class_row(Member))
    await cur.execute("SELECT * FROM cryo.list_members(%s)", (org,))
    return await cur.fetchall()


async def set_secret(conn: AsyncConnection, org: str, project: str, name: str,
                     sealed: bytes) -> bool:
    return await _one(conn, "SELECT cryo.set_secret(%s, %s, %s, %s)", (org, project, name, sealed))


async def delete_secret(conn: AsyncConnection, org: str, project: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.delete_secret(%s, %s, %s)", (org, project, name))


async def list_secrets(conn: AsyncConnection, org: str, project: str) -> list[SecretName]:
    cur = conn.cursor(row_factory=class_row(SecretName))
    await cur.execute("SELECT * FROM cryo.list_secrets(%s, %s)", (org, project))
    return await cur.fetchall()


async def read_secret_values(conn: AsyncConnection, org: str, project: str
                             ) -> list[tuple[str, bytes]]:
    """(name, sealed value) of each secret of the project, for masking user reads."""
    cur = await conn.execute("SELECT name, value FROM cryo.read_secret_values(%s, %s)",
                             (org, project))
    return [(name, bytes(value)) for name, value in await cur.fetchall()]


@dataclass(frozen=True)
class AppRole:
    role: str
    org: str
    project: str | None
    can_login: bool | None  # None: the role no longer exists
    in_cryo_app: bool
    created_at: dt.datetime


async def bind_app_role(conn: AsyncConnection, role: str, org: str, project: str | None, *,
                        create: bool = False, login: bool = True) -> bool:
    """True when the role was created here."""
    return await _one(conn, "SELECT cryo.bind_app_role(%s, %s, %s, %s, %s)",
                      (role, org, project, create, login))


async def unbind_app_role(conn: AsyncConnection, role: str) -> bool:
    return await _one(conn, "SELECT cryo.unbind_app_role(%s)", (role,))


async def list_app_roles(conn: AsyncConnection) -> list[AppRole]:
    cur = conn.cursor(row_factory=class_row(AppRole))
    await cur.execute("SELECT * FROM cryo.list_app_roles()")
    return await cur.fetchall()
