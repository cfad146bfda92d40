"""Sealed payloads of engine rows opened: a run's input, a signal's, event's or output's
answer, a child's printed output, a graph's document. The server's routes and the graph
driver both read them, so they live below both.

Signal, event and output payloads are sealed as {"answer": value}, the same shape a
journal memo carries, so the database can hand a signal's sealed bytes to the waiting
run's memo without ever opening them; `answer` opens either.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.seal import Sealer


def answer(sealer: Sealer, sealed: bytes | None, clear: Any) -> Any:
    """A payload sealed as {"answer": value}, or the one the database holds in clear."""
    return sealer.open_json(sealed).get("answer") if sealed is not None else clear


def run_input(sealer: Sealer, sealed: bytes | None, clear: Any) -> Any:
    """A run's input: sealed, or in the clear (from SQL, until its first claim seals
    it). Both at once is a handler run of a sealed event (cryo._start_triggered): the
    clear part is {trigger: {...}} and the sealed part the event's payload, which goes
    in as trigger.payload."""
    if sealed is None:
        return clear
    if clear is None:
        return sealer.open_json(sealed)
    trigger = dict(clear.get("trigger") or {})
    trigger["payload"] = sealer.open_json(sealed).get("answer")
    return {**clear, "trigger": trigger}


async def child_output(conn: AsyncConnection, sealer: Sealer, run_id: str) -> str:
    """What collecting an activity prints: the log of the child's latest attempt."""
    chunks = await engine.read_last_attempt_log(conn, run_id)
    return b"".join(sealer.open(c.data) for c in chunks).decode("utf-8", errors="replace")


async def run_outputs(conn: AsyncConnection, sealer: Sealer, run_id: str) -> dict[str, Any]:
    # An output holding no user data (a graph's default output of clear node outputs)
    # is kept in the clear, as {"answer": v} too.
    return {key: answer(sealer, value, (clear or {}).get("answer"))
            for key, value, clear in await engine.read_outputs(conn, run_id)}


def open_document(sealer: Sealer, source: bytes) -> str:
    """A graph's document: sealed by the server, or, stored by an application from SQL
    (cryo.put_compiled_workflow, which cannot seal), a JSON object in the clear."""
    raw = bytes(source)
    if not raw.startswith(b"CRY1") and raw.lstrip().startswith(b"{"):
        return raw.decode("utf-8", errors="replace")
    return sealer.open_text(raw)
