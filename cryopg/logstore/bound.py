"""Waiting logs bounded while the store has been down past its grace (issue 36).

Each log keeps its newest run_buffer_bytes, and all the logs one round holds together
their newest replica_buffer_bytes (the oldest runs give first). A cut is made only under
the mover's live lease, so no other replica is reading those chunks into an object, and
its place is taken by one marker line saying exactly how many bytes of the log went (an
earlier marker among the chunks cut is counted by what it said, not by its own length).
"""

from __future__ import annotations

import re
import sys

from psycopg_pool import AsyncConnectionPool

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError
from cryopg.logstore.settings import LogStoreSettings
from cryopg.seal import OrgSealers

PAGE_BYTES = 1 << 20
_MARKER = re.compile(
    rb"\n\[cryopg: (\d+) bytes of this log were dropped while the log store was "
    rb"unavailable\]\n")


def marker(dropped: int) -> bytes:
    return (f"\n[cryopg: {dropped} bytes of this log were dropped while the log store was "
            "unavailable]\n").encode()


def _keeps(settings: LogStoreSettings, moves: list[engine.LogMove]) -> dict[str, int]:
    """Sealed bytes each log may keep: its own bound, then the replica's over all."""
    keep = {m.run_id: min(m.bytes, settings.run_buffer_bytes) for m in moves}
    over = sum(keep.values()) - settings.replica_buffer_bytes
    for mv in moves:  # oldest end first
        if over <= 0:
            break
        cut = min(keep[mv.run_id], over)
        keep[mv.run_id] -= cut
        over -= cut
    return keep


async def bound_waiting_logs(pool: AsyncConnectionPool, keys: OrgSealers,
                             settings: LogStoreSettings, moves: list[engine.LogMove]) -> int:
    """Cuts the leased logs over their bounds; returns the log bytes dropped."""
    total = 0
    for mv in moves:
        keep = _keeps(settings, moves)[mv.run_id]
        if keep >= mv.bytes:
            continue
        try:
            total += await _cut(pool, keys, mv, keep)
        except CryoError as exc:  # a lease lost, the database away: the next round
            print(f"cryopg: bounding the waiting log of {mv.run_id} failed: {exc}",
                  file=sys.stderr)
    return total


async def _cut(pool: AsyncConnectionPool, keys: OrgSealers, mv: engine.LogMove,
               keep: int) -> int:
    sealer = await keys.sealer(mv.org)
    async with connection(pool) as conn:
        upto = await engine.log_trim_point(conn, mv.run_id, keep)
    if upto is None:
        return 0
    dropped, after = 0, 0
    while after < upto:  # what goes, counted in the log's own bytes
        async with connection(pool) as conn:
            page = await engine.read_log_page(conn, mv.run_id, after, upto, PAGE_BYTES)
        if not page:
            break
        for _, sealed in page:
            data = sealer.open(sealed)
            earlier = _MARKER.fullmatch(data)
            dropped += int(earlier[1]) if earlier else len(data)
        after = page[-1][0]
    async with connection(pool) as conn:
        await engine.trim_run_log(conn, mv.run_id, mv.attempt_id, upto,
                                  sealer.seal(marker(dropped)))
    print(f"cryopg: the log store has been unavailable past its grace; {dropped} bytes of "
          f"{mv.run_id}'s waiting log were dropped (marked in the log)", file=sys.stderr)
    return dropped
