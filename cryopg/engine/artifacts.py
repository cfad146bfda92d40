"""Artifacts' index (78_artifacts.sql): one wrapper per function. The bytes are the
store's (cryopg/artifacts/store.py); these only name them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

from psycopg import AsyncConnection
from psycopg.rows import class_row

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class Artifact:
    scope: str
    name: str
    sha256: str
    size: int
    created_at: dt.datetime
    cache_key: str | None = None
    created_by_run: str | None = None
    tainted: bool = False  # put by an untrusted run (docs/security/trust.md)
    published: bool = False  # a trusted artifact untrusted runs may read
    executable: bool = False  # the file was executable when it was put: a get restores +x


@dataclasses.dataclass(frozen=True)
class CollectedBlob:
    org: str
    project: str
    sha256: str


async def artifact_scope(conn: AsyncConnection, org: str, project: str, run_id: str | None,
                         key: str | None) -> str:
    return await _one(conn, "SELECT cryo.artifact_scope(%s, %s, %s, %s)",
                      (org, project, run_id, key))


async def artifact_usage(conn: AsyncConnection, org: str, project: str) -> int:
    return await _one(conn, "SELECT cryo.artifact_usage(%s, %s)", (org, project))


async def prepare_artifact(conn: AsyncConnection, org: str, project: str, sha256: str,
                           size: int, max_bytes: int | None) -> bool:
    return await _one(conn, "SELECT cryo.prepare_artifact(%s, %s, %s, %s, %s)",
                      (org, project, sha256, size, max_bytes))


async def prepare_run_artifact(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                               sha256: str, size: int,
                               max_bytes: int | None) -> tuple[bool, bool]:
    """(present, verify): whether the run may skip the upload, and whether its bytes
    must pass through the server to be hashed (an untrusted run's)."""
    cur = await conn.execute("SELECT * FROM cryo.prepare_run_artifact(%s, %s, %s, %s, %s)",
                             (run_id, token, sha256, size, max_bytes))
    row = await cur.fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


async def record_run_artifact_upload(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                                     sha256: str, size: int) -> bool:
    return await _one(conn, "SELECT cryo.record_run_artifact_upload(%s, %s, %s, %s)",
                      (run_id, token, sha256, size))


async def put_run_artifact(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                           key: str | None, name: str, sha256: str, size: int,
                           max_bytes: int | None, public: bool = False,
                           executable: bool = False) -> Artifact:
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.put_run_artifact(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, key, name, sha256, size, max_bytes, public, executable))
    row = await cur.fetchone()
    assert row is not None
    return dataclasses.replace(row, cache_key=key, created_by_run=run_id, executable=executable)


async def put_artifact(conn: AsyncConnection, org: str, project: str, key: str | None,
                       name: str, sha256: str, size: int, max_bytes: int | None,
                       public: bool = False, executable: bool = False) -> Artifact:
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.put_artifact(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (org, project, key, name, sha256, size, max_bytes, public, executable))
    row = await cur.fetchone()
    assert row is not None
    return dataclasses.replace(row, cache_key=key, published=public, executable=executable)


async def find_artifact(conn: AsyncConnection, org: str, project: str, scope: str,
                        name: str, tainted: bool = False) -> Artifact | None:
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.find_artifact(%s, %s, %s, %s, %s)",
                      (org, project, scope, name, tainted))
    return await cur.fetchone()


async def find_run_artifact(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                            other: str | None, key: str | None, name: str,
                            tainted: bool = False) -> Artifact | None:
    """A running script's get: what SQL lets the run read (its trust, from the run)."""
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.find_run_artifact(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, other, key, name, tainted))
    return await cur.fetchone()


async def list_run_artifacts(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                             other: str | None, cached: bool,
                             tainted: bool = False) -> list[Artifact]:
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.list_run_artifacts(%s, %s, %s, %s, %s)",
                      (run_id, token, other, cached, tainted))
    return await cur.fetchall()


async def find_run_artifact_blob(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                                 sha256: str) -> int | None:
    return await _one(conn, "SELECT cryo.find_run_artifact_blob(%s, %s, %s)",
                      (run_id, token, sha256))


async def list_artifacts(conn: AsyncConnection, org: str, project: str,
                         scope: str | None) -> list[Artifact]:
    cur = conn.cursor(row_factory=class_row(Artifact))
    await cur.execute("SELECT * FROM cryo.list_artifacts(%s, %s, %s)", (org, project, scope))
    return await cur.fetchall()


async def find_artifact_blob(conn: AsyncConnection, org: str, project: str,
                             sha256: str) -> int | None:
    return await _one(conn, "SELECT cryo.find_artifact_blob(%s, %s, %s)", (org, project, sha256))


async def collect_artifacts(conn: AsyncConnection, cached: dt.timedelta, grace: dt.timedelta,
                            batch: int = 1000) -> list[CollectedBlob]:
    cur = conn.cursor(row_factory=class_row(CollectedBlob))
    await cur.execute("SELECT * FROM cryo.collect_artifacts(%s, %s, %s)", (cached, grace, batch))
    return await cur.fetchall()


async def unindexed_artifact_blobs(conn: AsyncConnection, org: str, project: str,
                                   sha256s: list[str]) -> list[str]:
    """Locks the project's artifacts until commit; the blobs no index row knows."""
    cur = await conn.execute("SELECT * FROM cryo.unindexed_artifact_blobs(%s, %s, %s)",
                             (org, project, sha256s))
    return [r[0] for r in await cur.fetchall()]
