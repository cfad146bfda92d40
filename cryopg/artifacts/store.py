"""Where artifact bytes live: a directory (the default) or an S3 bucket.

A blob's address is its project and SHA-256 (`{org}/{project}/{sha[:2]}/{sha}`), so
the same bytes put twice are stored once per project and a name is only an index row.
Bytes always move in chunks: an upload is hashed while it is spooled to a file (the
digest is its address, known only at the end), a download is read a chunk at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from cryopg.artifacts.settings import DEFAULT_STORE_TIMEOUT, ArtifactSettings
from cryopg.errors import ArtifactStoreUnavailable, InvalidArgument
from cryopg.objectstore import S3Settings, Timeouts, s3_client

CHUNK = 1 << 20  # bytes read or written at a time
PART = 8 << 20  # an S3 multipart upload's part (the least S3 takes is 5 MiB)
SIGN_SECONDS = 900
UPLOAD_REQUEST = dt.timedelta(seconds=60)  # the least one upload request is given


class Spool:
    """An upload on its way to the store: a temporary file, its digest and size."""

    def __init__(self, directory: Path | None) -> None:
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="upload-", dir=directory)
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()
        self.size = 0

    async def write(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.size += len(chunk)
        await asyncio.to_thread(self._file.write, chunk)

    def finish(self, expect: str | None) -> str:
        self._file.close()
        digest = self._hash.hexdigest()
        if expect is not None and digest != expect:
            self.discard()
            raise InvalidArgument(f"the bytes sent have SHA-256 {digest}, not {expect}")
        return digest

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


async def spool(chunks: AsyncIterator[bytes], directory: Path | None, expect: str | None,
                limit: int | None = None) -> tuple[Spool, str]:
    """Every chunk into a Spool, hashed on the way; refuses more than `limit` bytes."""
    out = Spool(directory)
    try:
        async for chunk in chunks:
            await out.write(chunk)
            if limit is not None and out.size > limit:
                raise InvalidArgument(f"the upload is larger than the {limit} bytes announced")
        return out, out.finish(expect)
    except BaseException:
        out.discard()
        raise


def blob_key(org: str, project: str, sha256: str) -> str:
    return f"{org}/{project}/{sha256[:2]}/{sha256}"


@dataclasses.dataclass(frozen=True)
class StoredBlob:
    """An object found in the store, for the sweep of bytes no index row knows."""
    org: str
    project: str
    sha256: str
    modified: dt.datetime


def parse_key(key: str) -> tuple[str, str, str] | None:
    """(org, project, sha256) of a blob key; None for anything else in the store."""
    parts = key.split("/")
    if len(parts) != 4 or len(parts[3]) != 64 or parts[2] != parts[3][:2] or any(
            c not in "0123456789abcdef" for c in parts[3]):
        return None
    return parts[0], parts[1], parts[3]


class BlobStore(Protocol):
    can_sign: bool
    describe: str  # what an error names: the bucket and its endpoint, or the directory

    async def close(self) -> None: ...

    async def put(self, org: str, project: str, chunks: AsyncIterator[bytes], *,
                  expect: str | None = None, limit: int | None = None) -> tuple[str, int]: ...

    def read(self, org: str, project: str, sha256: str,
             offset: int = 0) -> AsyncIterator[bytes]: ...

    async def size(self, org: str, project: str, sha256: str) -> int | None: ...

    async def delete(self, org: str, project: str, sha256: str) -> None: ...

    def blobs(self) -> AsyncIterator[StoredBlob]: ...

    async def sign(self, method: str, org: str, project: str, sha256: str,
                   size: int) -> dict[str, Any] | None: ...


class DirStore:
    """Blobs as files under one directory; a put lands by rename, so a reader never sees
    half a blob."""

    can_sign = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / ".uploads"
        self.describe = f"directory {root}"

    def _failed(self, exc: OSError) -> ArtifactStoreUnavailable:
        return ArtifactStoreUnavailable(
            f"the artifact store ({self.describe}) failed: {exc.strerror or exc}")

    async def close(self) -> None:
        pass

    def _path(self, org: str, project: str, sha256: str) -> Path:
        return self.root / blob_key(org, project, sha256)

    async def put(self, org: str, project: str, chunks: AsyncIterator[bytes], *,
                  expect: str | None = None, limit: int | None = None) -> tuple[str, int]:
        try:
            sp, digest = await spool(chunks, self._tmp, expect, limit)
            final = self._path(org, project, digest)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(sp.path, final)
        except ConnectionError:  # the sender went away
            raise
        except OSError as exc:  # a full or failing disk, a lost network mount
            raise self._failed(exc) from None
        return digest, sp.size

    async def read(self, org: str, project: str, sha256: str,
                   offset: int = 0) -> AsyncIterator[bytes]:
        with open(self._path(org, project, sha256), "rb") as fh:
            fh.seek(offset)
            while chunk := await asyncio.to_thread(fh.read, CHUNK):
                yield chunk

    async def size(self, org: str, project: str, sha256: str) -> int | None:
        try:
            return self._path(org, project, sha256).stat().st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._failed(exc) from None

    async def delete(self, org: str, project: str, sha256: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(org, project, sha256).unlink()

    async def blobs(self) -> AsyncIterator[StoredBlob]:
        if not self.root.is_dir():
            return
        for path in await asyncio.to_thread(lambda: list(self.root.glob("*/*/??/*"))):
            found = parse_key(path.relative_to(self.root).as_posix())
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                continue
            if found is not None:
                yield StoredBlob(*found, dt.datetime.fromtimestamp(mtime, dt.UTC))

    def drop_stale_uploads(self, older_than: dt.datetime) -> int:
        """Spools a server left behind when it died mid-upload."""
        dropped = 0
        for path in self._tmp.glob("upload-*") if self._tmp.is_dir() else ():
            with contextlib.suppress(FileNotFoundError):
                if dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC) < older_than:
                    path.unlink()
                    dropped += 1
        return dropped

    async def sign(self, method: str, org: str, project: str, sha256: str,
                   size: int) -> dict[str, Any] | None:
        return None


class S3Store:
    """Blobs as objects of one bucket (any S3-compatible endpoint), through the S3 client
    of cryopg/objectstore.py (the log store's too). Uploads past PART bytes go in parts, at most two
    in flight, so no blob is ever held whole.

    One client (and its connection pool) serves every request of the server. No request
    waits on the store longer than `timeout` without an answer: a store that is down or
    stalled fails the call with ArtifactStoreUnavailable, naming the bucket and endpoint,
    instead of obstore's default of ten retries over minutes."""

    can_sign = True

    def __init__(self, settings: S3Settings, spool_dir: Path | None = None,
                 timeout: dt.timedelta = DEFAULT_STORE_TIMEOUT) -> None:
        self._spool_dir = spool_dir
        self._timeout = timeout.total_seconds()
        self.describe = (f"S3 bucket {settings.bucket!r} at "
                         f"{settings.endpoint or f'AWS {settings.region}'}")
        bounds = Timeouts(connect=min(timeout, dt.timedelta(seconds=5)), request=timeout,
                          retry=timeout, retries=2,
                          backoff=(dt.timedelta(milliseconds=100), dt.timedelta(seconds=1)))
        # Reads: a stalled store is caught between reads, and the whole request may take
        # as long as its bytes need (a download of many GiB).
        self._store = s3_client(settings, dataclasses.replace(
            bounds, read=timeout, request=dt.timedelta(days=1)))
        # Uploads go in requests of at most PART bytes, each bounded whole: the store
        # sends nothing back while it takes a part, or while it assembles the parts
        # (which for a large object may take longer than a plain request).
        self._uploads = s3_client(settings, dataclasses.replace(
            bounds, request=max(timeout, UPLOAD_REQUEST)))

    def _failed(self, exc: BaseException) -> ArtifactStoreUnavailable:
        if isinstance(exc, TimeoutError):
            why = f"did not answer within {self._timeout:g} s (CRYOPG_ARTIFACTS_STORE_TIMEOUT)"
        else:
            why = _reason(exc)
        return ArtifactStoreUnavailable(f"the artifact store ({self.describe}) {why}")

    @contextlib.asynccontextmanager
    async def _bounded(self, whole: bool = True) -> AsyncIterator[None]:
        """At most the store timeout for what runs inside (unless not `whole`); any
        failure but a missing object becomes ArtifactStoreUnavailable."""
        import obstore.exceptions

        try:
            async with asyncio.timeout(self._timeout if whole else None):
                yield
        except FileNotFoundError:
            raise
        except (TimeoutError, OSError, obstore.exceptions.BaseError) as exc:
            raise self._failed(exc) from None

    async def close(self) -> None:
        pass

    async def put(self, org: str, project: str, chunks: AsyncIterator[bytes], *,
                  expect: str | None = None, limit: int | None = None) -> tuple[str, int]:
        sp, digest = await spool(chunks, self._spool_dir, expect, limit)
        try:
            await self.put_file(org, project, digest, sp.path)
        finally:
            sp.discard()
        return digest, sp.size

    async def put_file(self, org: str, project: str, sha256: str, path: Path) -> None:
        import obstore

        # Bounded per request (read_timeout, retries), not in all: a large file takes
        # as long as its parts need.
        async with self._bounded(whole=False):
            await obstore.put_async(self._uploads, blob_key(org, project, sha256), path,
                                    chunk_size=PART, max_concurrency=2)

    async def read(self, org: str, project: str, sha256: str,
                   offset: int = 0) -> AsyncIterator[bytes]:
        import obstore

        options: dict[str, Any] = {"range": {"offset": offset}} if offset else {}
        async with self._bounded():
            resp = await obstore.get_async(self._store, blob_key(org, project, sha256),
                                           options=options)  # type: ignore[arg-type]
        stream = resp.stream(min_chunk_size=CHUNK).__aiter__()
        while True:
            async with self._bounded():
                try:
                    chunk = await stream.__anext__()
                except StopAsyncIteration:
                    return
            yield bytes(chunk)

    async def size(self, org: str, project: str, sha256: str) -> int | None:
        import obstore

        try:
            async with self._bounded():
                head = await obstore.head_async(self._store, blob_key(org, project, sha256))
        except FileNotFoundError:
            return None
        return int(head["size"])

    async def delete(self, org: str, project: str, sha256: str) -> None:
        import obstore

        with contextlib.suppress(FileNotFoundError):
            async with self._bounded():
                await obstore.delete_async(self._store, blob_key(org, project, sha256))

    async def blobs(self) -> AsyncIterator[StoredBlob]:
        import obstore

        pages = obstore.list(self._store, chunk_size=1000).__aiter__()
        while True:
            async with self._bounded():
                try:
                    batch = await pages.__anext__()
                except StopAsyncIteration:
                    return
            for meta in batch:
                found = parse_key(str(meta["path"]))
                if found is not None:
                    yield StoredBlob(*found, meta["last_modified"])

    async def sign(self, method: str, org: str, project: str, sha256: str,
                   size: int) -> dict[str, Any] | None:
        """A URL the agent uses directly for SIGN_SECONDS; the commit that follows an
        upload checks the object's size before any name points at it. `store` names
        the store in the agent's errors."""
        import obstore

        async with self._bounded():
            url = await obstore.sign_async(self._store, method, blob_key(org, project, sha256),
                                           dt.timedelta(seconds=SIGN_SECONDS))
        return {"url": str(url), "method": method, "store": self.describe,
                "headers": {"Content-Length": str(size)} if method == "PUT" else {}}


def _reason(exc: BaseException) -> str:
    """One short clause for an obstore or socket error (whose text runs to lines of
    retries and URLs)."""
    text = str(exc)
    for needle, why in (("Connection refused", "refused the connection"),
                        ("timed out", "did not answer in time"),
                        ("dns error", "could not be resolved"),
                        ("403", "denied access (check its credentials)"),
                        ("NoSuchBucket", "has no such bucket")):
        if needle in text:
            return why
    first = " ".join(text.split())[:160] or type(exc).__name__
    return f"failed: {first}"


async def open_store(settings: ArtifactSettings) -> BlobStore:
    if settings.s3 is not None:
        return S3Store(settings.s3, timeout=settings.store_timeout)
    return DirStore(settings.directory)  # made at the first put, not before
