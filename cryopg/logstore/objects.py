"""The store itself (obstore's S3 client) and the shape of one moved log.

One object per run: its chunks as (id: 8 bytes, length: 4 bytes, bytes), so a reader
resumes after any chunk id as it does in the database; zlib-compressed, then sealed
under the org's data key like every payload."""

from __future__ import annotations

import datetime as dt
import struct
import zlib
from collections.abc import Iterable

from obstore.store import S3Store

from cryopg.logstore.settings import LogStoreSettings
from cryopg.seal import Sealer

_HEAD = struct.Struct(">QI")
# A store that does not answer fails the call fast: the mover retries on its next round.
_TIMEOUT = "5s"


def open_store(settings: LogStoreSettings) -> S3Store:
    config: dict[str, object] = {"region": settings.region}
    if settings.endpoint:
        config["endpoint"] = settings.endpoint
        config["virtual_hosted_style_request"] = False
    if settings.access_key_id:
        config["access_key_id"] = settings.access_key_id
        config["secret_access_key"] = settings.secret_access_key or ""
    allow_http = bool(settings.endpoint and settings.endpoint.startswith("http://"))
    return S3Store(settings.bucket, config=config,  # type: ignore[arg-type]
                   client_options={"allow_http": allow_http, "timeout": _TIMEOUT,
                                   "connect_timeout": "2s"},
                   retry_config={"max_retries": 1, "backoff": {},
                                 "retry_timeout": dt.timedelta(seconds=5)})


def object_key(settings: LogStoreSettings, run_id: str) -> str:
    org, project, run = run_id.split(":", 2)
    return f"{settings.prefix}{org}/{project}/{run}"


def pack(sealer: Sealer, chunks: Iterable[tuple[int, bytes]]) -> bytes:
    """Plain chunks (id, bytes) as one sealed, compressed object."""
    framed = b"".join(_HEAD.pack(cid, len(data)) + data for cid, data in chunks)
    return sealer.seal(zlib.compress(framed, 6))


def unpack(sealer: Sealer, blob: bytes) -> list[tuple[int, bytes]]:
    framed = zlib.decompress(sealer.open(blob))
    out, at = [], 0
    while at < len(framed):
        cid, n = _HEAD.unpack_from(framed, at)
        at += _HEAD.size
        out.append((cid, framed[at:at + n]))
        at += n
    return out
