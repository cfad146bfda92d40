"""Turning engine rows and sealed payloads into response JSON, for agent and user
routes alike.

Signal, event and output payloads are sealed as {"answer": value}, the same shape a
journal memo carries, so the database can hand a signal's sealed bytes to the waiting
run's memo without ever opening them; `answer` opens either.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.engine import Cell, Run
from cryopg.seal import Sealer


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


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


def cell_json(sealer: Sealer, cell: Cell) -> dict[str, Any]:
    return {"key": cell.key, "value": sealer.open_json(cell.value), "version": cell.version}


def run_json(run: Run) -> dict[str, Any]:
    return {"id": run.id, "org": run.org, "project": run.project, "workflow": run.workflow,
            "filename": run.filename, "status": run.status, "substate": run.substate,
            "attempt": run.attempt, "finished": run.finished, "exit_code": run.exit_code,
            "error": run.error,
            "idempotency_key": run.idempotency_key, "created_at": iso(run.created_at),
            "started_at": iso(run.started_at), "finished_at": iso(run.finished_at),
            "wake_at": iso(run.wake_at), "agent_id": run.agent_id,
            "concurrency_group": run.concurrency_group, "queue_position": run.queue_position,
            "parent_run_id": run.parent_run_id, "activity_name": run.activity_name,
            "kind": run.kind, "outcome_code": run.outcome_code}


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
