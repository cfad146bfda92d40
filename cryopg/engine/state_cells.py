"""Durable state cells (70_state.sql): reads of a scope, and a run's writes."""

from __future__ import annotations

import uuid

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one
from cryopg.engine.types import Cell, IncrStep, StateAnswer

_SCOPE = "cryo.state_scope(%s, %s, %s, %s)"


async def state_get(conn: AsyncConnection, org: str, project: str, run_id: str | None,
                    entity: str | None, key: str, tainted: bool = False) -> Cell | None:
    """A person's read (a trusted reader; `tainted` reads what untrusted runs wrote)."""
    cur = await conn.execute(
        f"SELECT * FROM cryo.state_get({_SCOPE}, %s, %s)",
        (org, project, run_id, entity, key, tainted))
    row = await cur.fetchone()
    return Cell(key, *row) if row else None


async def state_list(conn: AsyncConnection, org: str, project: str, run_id: str | None,
                     entity: str | None, tainted: bool = False) -> list[Cell]:
    cur = conn.cursor(row_factory=class_row(Cell))
    await cur.execute(f"SELECT * FROM cryo.state_list({_SCOPE}, %s)",
                      (org, project, run_id, entity, tainted))
    return await cur.fetchall()


async def run_state_get(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                        entity: str | None, key: str, tainted: bool = False) -> Cell | None:
    """A running script's read, under its claim: what SQL lets the run see."""
    cur = await conn.execute("SELECT * FROM cryo.run_state_get(%s, %s, %s, %s, %s)",
                             (run_id, token, entity, key, tainted))
    row = await cur.fetchone()
    return Cell(key, *row) if row else None


async def run_state_list(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                         entity: str | None, tainted: bool = False) -> list[Cell]:
    cur = conn.cursor(row_factory=class_row(Cell))
    await cur.execute("SELECT * FROM cryo.run_state_list(%s, %s, %s, %s)",
                      (run_id, token, entity, tainted))
    return await cur.fetchall()


async def state_set(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes, public: bool = False) -> int:
    return await _one(conn, "SELECT cryo.state_set(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, entity, key, value, public))


async def state_delete(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                       key: str) -> bool:
    return await _one(conn, "SELECT cryo.state_delete(%s, %s, %s, %s)",
                      (run_id, token, entity, key))


async def state_add(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes, *, position: int | None = None, name: str,
                    ordinal: int, path: str | None = None) -> StateAnswer:
    cur = await conn.execute("SELECT * FROM cryo.state_add(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                             (run_id, token, entity, key, value, position, name, ordinal, path))
    return StateAnswer(*await cur.fetchone())


async def state_cas(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes, expect: int, *, position: int | None = None,
                    name: str, ordinal: int, path: str | None = None) -> StateAnswer:
    cur = await conn.execute(
        "SELECT * FROM cryo.state_cas(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, token, entity, key, value, expect, position, name, ordinal, path))
    return StateAnswer(*await cur.fetchone())


async def state_incr(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                     key: str, expect: int | None, value: bytes | None, result: bytes | None, *,
                     position: int | None = None, name: str, ordinal: int,
                     path: str | None = None) -> IncrStep:
    cur = await conn.execute(
        "SELECT * FROM cryo.state_incr(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, token, entity, key, expect, value, result, position, name, ordinal, path))
    return IncrStep(*await cur.fetchone())
