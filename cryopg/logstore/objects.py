"""The store itself (an S3 client from cryopg/objectstore.py, with the mover's timeouts)
and the shape of one moved log.

One object per move attempt. Its chunks are framed as (id: 8 bytes, length: 4 bytes,
bytes), so a reader resumes after any chunk id as it does in the database. Since issue 36
an object is a stream of segments, so neither the mover nor a reader ever holds a whole
log: `MAGIC`, then segments of (length: 4 bytes, envelope), each envelope sealed under the
org's key over (sequence number, last flag, run id, zlib of about SEGMENT_BYTES of framed
chunks). The sequence numbers and the closing segment (flagged last, no chunks) make a
reordered, cut or foreign object fail to read instead of reading as a shorter log.
Objects written before (one sealed, compressed blob) still read.
"""

from __future__ import annotations

import datetime as dt
import struct
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from typing import TYPE_CHECKING

from cryopg.errors import Unreadable
from cryopg.logstore.settings import LogStoreSettings
from cryopg.objectstore import Timeouts, s3_client
from cryopg.seal import Sealer

if TYPE_CHECKING:
    from cryopg.objectstore import S3Store

MAGIC = b"CRYOLOG2"
SEGMENT_BYTES = 1 << 20  # plain bytes sealed together: bounds a mover's and a reader's memory
_HEAD = struct.Struct(">QI")  # a chunk: id, length
_LEN = struct.Struct(">I")  # a segment's envelope length
_SEG = struct.Struct(">IBH")  # a segment: sequence number, flags, run id length
_LAST = 1
# A store that does not answer fails the call fast: the mover retries on its next round.
TIMEOUTS = Timeouts(connect=dt.timedelta(seconds=2), request=dt.timedelta(seconds=5),
                    retry=dt.timedelta(seconds=5), retries=1)


def open_store(settings: LogStoreSettings) -> S3Store:
    return s3_client(settings.s3(), TIMEOUTS)


class SegmentWriter:
    """Plain chunks in, the object's bytes out, a segment at a time."""

    def __init__(self, sealer: Sealer, run_id: str) -> None:
        self.sealer, self.run = sealer, run_id.encode()
        self.seq = 0
        self.framed = bytearray()
        self.plain_bytes = 0  # the log's bytes, framing aside

    def head(self) -> bytes:
        return MAGIC

    def add_sealed(self, page: list[tuple[int, bytes]]) -> bytes:
        """Opens and frames a page of sealed chunks; the segments it completed. CPU work
        (AES, zlib) that releases the GIL: run in a thread, it leaves the loop free."""
        return b"".join(self.add(cid, self.sealer.open(sealed)) for cid, sealed in page)

    def add(self, chunk_id: int, data: bytes) -> bytes:
        """Frames one chunk; returns a sealed segment once enough is gathered, else b""."""
        self.framed += _HEAD.pack(chunk_id, len(data))
        self.framed += data
        self.plain_bytes += len(data)
        return self._segment(0) if len(self.framed) >= SEGMENT_BYTES else b""

    def close(self) -> bytes:
        """What is left, then the closing segment."""
        rest = self._segment(0) if self.framed else b""
        return rest + self._segment(_LAST)

    def _segment(self, flags: int) -> bytes:
        # Level 1: a log shrinks about as much as at 6, at a quarter of the CPU.
        plain = _SEG.pack(self.seq, flags, len(self.run)) + self.run + zlib.compress(
            bytes(self.framed), 1)
        self.framed.clear()
        self.seq += 1
        sealed = self.sealer.seal(plain)
        return _LEN.pack(len(sealed)) + sealed


async def read_chunks(sealer: Sealer, run_id: str,
                      stream: AsyncIterable[bytes]) -> AsyncIterator[tuple[int, bytes]]:
    """A moved log's plain chunks (id, bytes) in order, from the object's bytes as they
    arrive. Raises Unreadable for an object cut short, reordered or of another run."""
    buf = bytearray()
    it = stream.__aiter__()
    ended = False

    async def fill(n: int) -> bool:
        nonlocal ended
        while len(buf) < n and not ended:
            try:
                buf.extend(await it.__anext__())
            except StopAsyncIteration:
                ended = True
        return len(buf) >= n

    await fill(len(MAGIC))
    if bytes(buf[:len(MAGIC)]) != MAGIC:  # an object from before issue 36: one blob
        while await fill(len(buf) + 1):
            pass
        for chunk in unpack(sealer, bytes(buf)):
            yield chunk
        return
    del buf[:len(MAGIC)]
    want_run, seq = run_id.encode(), 0
    while True:
        if not await fill(_LEN.size):
            raise Unreadable(f"the stored log of {run_id} ends before its last segment")
        (n,) = _LEN.unpack_from(buf)
        if not await fill(_LEN.size + n):
            raise Unreadable(f"the stored log of {run_id} is cut short")
        plain = sealer.open(bytes(buf[_LEN.size:_LEN.size + n]))
        del buf[:_LEN.size + n]
        got_seq, flags, rlen = _SEG.unpack_from(plain)
        run = plain[_SEG.size:_SEG.size + rlen]
        if got_seq != seq or run != want_run:
            raise Unreadable(f"the stored log of {run_id} is not in order or not its own")
        seq += 1
        if flags & _LAST:
            return
        framed = zlib.decompress(plain[_SEG.size + rlen:])
        at = 0
        while at < len(framed):
            cid, size = _HEAD.unpack_from(framed, at)
            at += _HEAD.size
            yield cid, framed[at:at + size]
            at += size


def pack(sealer: Sealer, chunks: Iterable[tuple[int, bytes]]) -> bytes:
    """Plain chunks (id, bytes) as one sealed, compressed object: the format before issue
    36, which readers still read (and tests write)."""
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
