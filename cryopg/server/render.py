"""Turning engine rows into response JSON, for agent and user routes alike. (Opening
sealed payloads, which the graph driver needs too, is cryopg/payloads.py.)"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cryopg.engine import Cell, Run
from cryopg.seal import Sealer


def iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


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
