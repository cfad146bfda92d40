"""The server's side of artifacts: its store, the commit every put ends with, the
collector round, and answering a download (a signed URL, or the bytes themselves).
The server opens them with its pool (open_artifacts) and keeps them under ARTIFACTS."""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
from aiohttp import web
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from cryopg.artifacts.settings import ArtifactSettings
from cryopg.artifacts.store import BlobStore, DirStore, open_store
from cryopg.db import connection
from cryopg.engine import artifacts as index
from cryopg.engine.artifacts import Artifact
from cryopg.errors import (
    ArtifactMissing,
    ArtifactQuota,
    ArtifactStoreUnavailable,
    InvalidArgument,
)


@dataclasses.dataclass
class Artifacts:
    settings: ArtifactSettings
    store: BlobStore
    pool: AsyncConnectionPool
    swept_at: float = float("-inf")  # time.monotonic() of this server's last store sweep

    @property
    def signs(self) -> bool:
        """Agents move bytes straight to and from the store (else through the server)."""
        return self.store.can_sign and not self.settings.proxy


ARTIFACTS = web.AppKey("artifacts", Artifacts)


async def open_artifacts(pool: AsyncConnectionPool) -> Artifacts:
    """The deployment's artifact settings and store (close its store when done)."""
    try:
        settings = ArtifactSettings.from_env()
    except ValueError as exc:
        raise SystemExit(f"cryopg server: {exc}") from None
    return Artifacts(settings, await open_store(settings), pool)


async def commit(app: web.Application, org: str, project: str, sha256: str, size: int,
                 put: Callable[[AsyncConnection], Awaitable[Artifact]]) -> Artifact:
    """Names a blob the store should hold. The index row and the check that the bytes
    are there share one transaction, so a collector that removed the blob meanwhile
    (it deletes bytes before it commits) leaves no name pointing at nothing: the put is
    refused as artifact_missing and the caller uploads again."""
    arts = app[ARTIFACTS]
    try:
        async with connection(arts.pool) as conn, conn.transaction():
            row = await put(conn)
            held = await arts.store.size(org, project, sha256)
            if held != size:
                raise ArtifactMissing(f"the store holds no blob {sha256} of {size} bytes; "
                                      "upload it (again)")
    except Exception:
        # A refused put (over the bound, a stale claim, the wrong size) leaves no bytes
        # behind unless a name already points at them.
        try:
            await drop_unindexed(app, org, project, [sha256])
        except (psycopg.Error, OSError, ArtifactStoreUnavailable) as exc:  # swept later
            print(f"cryopg: could not remove refused artifact bytes: {exc}", file=sys.stderr)
        raise
    return row


async def drop_unindexed(app: web.Application, org: str, project: str,
                         sha256s: list[str]) -> int:
    """Deletes the bytes of those blobs the project's index does not know, under the
    project's artifact lock (a concurrent put then waits, finds them gone, uploads again)."""
    arts = app[ARTIFACTS]
    async with connection(arts.pool) as conn, conn.transaction():
        gone = await index.unindexed_artifact_blobs(conn, org, project, sha256s)
        for sha256 in gone:
            await arts.store.delete(org, project, sha256)
    return len(gone)


SWEEP_BATCH = 500


async def sweep_store(app: web.Application, grace: dt.timedelta | None = None) -> int:
    """Removes objects of the store that no index row knows and that are older than the
    grace period: bytes of a put that never committed, of a deleted project, or left by
    a collector that died between its delete and its commit."""
    arts = app[ARTIFACTS]
    cutoff = dt.datetime.now(dt.UTC) - (arts.settings.grace if grace is None else grace)
    pending: dict[tuple[str, str], list[str]] = {}
    removed = 0
    async for blob in arts.store.blobs():
        if blob.modified >= cutoff:
            continue
        batch = pending.setdefault((blob.org, blob.project), [])
        batch.append(blob.sha256)
        if len(batch) >= SWEEP_BATCH:
            removed += await drop_unindexed(app, blob.org, blob.project,
                                            pending.pop((blob.org, blob.project)))
    for (org, project), batch in pending.items():
        removed += await drop_unindexed(app, org, project, batch)
    if isinstance(arts.store, DirStore):
        arts.store.drop_stale_uploads(cutoff)
    return removed


async def collect(app: web.Application) -> int:
    """One round of artifact retention (run from the server's tick): removes what
    cryo.collect_artifacts releases, bytes first, inside its transaction."""
    arts = app[ARTIFACTS]
    async with connection(arts.pool) as conn, conn.transaction():
        blobs = await index.collect_artifacts(conn, arts.settings.retention, arts.settings.grace)
        for blob in blobs:
            await arts.store.delete(blob.org, blob.project, blob.sha256)
    return len(blobs)


async def collect_round(app: web.Application) -> None:
    try:
        await collect(app)
    except (OSError, ArtifactStoreUnavailable) as exc:  # the rows come back with the rollback
        print(f"cryopg: artifact collection failed: {exc}", file=sys.stderr)
    arts = app[ARTIFACTS]
    # Listing the whole store is dear: at most once per grace period on each server.
    if time.monotonic() - arts.swept_at >= arts.settings.grace.total_seconds():
        arts.swept_at = time.monotonic()
        try:
            await sweep_store(app)
        except (OSError, ArtifactStoreUnavailable) as exc:
            print(f"cryopg: artifact store sweep failed: {exc}", file=sys.stderr)


def artifact_json(a: Artifact) -> dict[str, object]:
    return {"name": a.name, "sha256": a.sha256, "size": a.size,
            "created_at": a.created_at.isoformat(), "key": a.cache_key,
            "run_id": a.created_by_run, "scope": a.scope, "executable": a.executable}


def check_digest(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64 or not all(
            c in "0123456789abcdef" for c in value):
        raise InvalidArgument("sha256 must be 64 lower-case hex digits")
    return value


async def send_blob(request: web.Request, org: str, project: str, a: Artifact, *,
                    redirect: bool) -> web.StreamResponse:
    """The bytes of an artifact: a redirect to a signed URL when allowed and possible,
    else streamed through this server a chunk at a time."""
    arts = request.app[ARTIFACTS]
    if redirect and arts.signs:
        signed = await arts.store.sign("GET", org, project, a.sha256, a.size)
        if signed is not None:
            raise web.HTTPFound(signed["url"])
    return await stream_blob(request, org, project, a.sha256, a.size, a.name,
                             executable=a.executable)


def _offset(request: web.Request, size: int) -> int:
    """Where a `Range: bytes=N-` header asks the bytes to start (a download resumed
    after a dropped connection); 0 without one. Other ranges are answered whole."""
    spec = request.headers.get("Range", "").strip()
    if not spec.startswith("bytes=") or not spec.endswith("-"):
        return 0
    start = spec[len("bytes="):-1]
    if not start.isdigit() or int(start) >= size:
        return 0
    return int(start)


async def stream_blob(request: web.Request, org: str, project: str, sha256: str, size: int,
                      name: str | None = None, *,
                      executable: bool = False) -> web.StreamResponse:
    arts = request.app[ARTIFACTS]
    if await arts.store.size(org, project, sha256) is None:
        raise ArtifactMissing(f"the store no longer holds blob {sha256}")
    offset = _offset(request, size)
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size - offset),
               "X-Cryo-SHA256": sha256, "Accept-Ranges": "bytes"}
    if executable:  # the file was executable when it was put: `artifact get` restores +x
        headers["X-Cryo-Executable"] = "1"
    if offset:
        headers["Content-Range"] = f"bytes {offset}-{size - 1}/{size}"
    if name:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name.rsplit("/")[-1])
        headers["Content-Disposition"] = f'attachment; filename="{safe or "artifact"}"'
    chunks = arts.store.read(org, project, sha256, offset)
    first = await anext(chunks, b"")  # a store that fails now still gets a JSON error
    resp = web.StreamResponse(status=206 if offset else 200, headers=headers)
    await resp.prepare(request)
    try:
        await resp.write(first)
        async for chunk in chunks:
            await resp.write(chunk)
    except ArtifactStoreUnavailable as exc:
        # Too late for a status: the reader sees the body cut short (and may resume).
        print(f"cryopg: artifact download of {sha256} cut: {exc}", file=sys.stderr)
        if request.transport is not None:
            request.transport.close()
        return resp
    await resp.write_eof()
    return resp


async def receive_blob(request: web.Request, org: str, project: str, *,
                       expect: str | None = None) -> tuple[str, int]:
    """A request body streamed into the store (hashed as it arrives, never held whole)."""
    arts = request.app[ARTIFACTS]
    limit = request.content_length
    max_bytes = arts.settings.max_bytes
    if max_bytes is not None and limit is not None and limit > max_bytes:
        raise ArtifactQuota(f"an artifact of {limit} bytes is over the project's bound of "
                            f"{max_bytes} bytes (CRYOPG_ARTIFACTS_MAX_BYTES)")

    async def chunks() -> AsyncIterator[bytes]:
        async for chunk in request.content.iter_chunked(1 << 20):
            yield chunk

    return await arts.store.put(org, project, chunks(), expect=expect, limit=limit)
