"""One driver turn on one graph run, as node types see it (nodes/<type>.py start their
instances and read their results with it), and the step every agent-bound start ends
with: a child run doing the instance.

Outputs are sealed as plain JSON (seal_json(value)); the scope the interpreter decides
with is built from them. One holding no user data is recorded in the clear instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.engine import NodeRow, PlanRow
from cryopg.payloads import child_output, run_outputs
from cryopg.seal import Sealer


@dataclasses.dataclass
class Turn:
    """One driver turn on one graph run: its identity, key and unsealed document."""

    conn: AsyncConnection
    sealer: Sealer
    run_id: str
    token: Any
    org: str
    project: str
    configs: dict[str, Any]
    scope: dict[str, Any]
    # Whether the turn set a deadline (a timed wait, a retry's backoff): only then need
    # the exact timers look again when the run parks.
    timed: bool = False

    async def record(self, node: str, item: int, ok: bool, output: Any = None,
                     error: str | None = None, exit_code: int | None = None,
                     clear: bool = False) -> str:
        """With `clear`, the output holds no user data and is stored in the clear."""
        sealed = (self.sealer.seal_json(output) if not clear and (ok or output is not None)
                  else None)
        got = await engine.graph_record_item(
            self.conn, self.run_id, self.token, node, item, "succeeded" if ok else "failed",
            sealed, error, exit_code, output if clear else None)
        self.timed = self.timed or got == "retrying"
        return got


async def start_job(turn: Turn, p: PlanRow, *, filename: str, interpreter: str | None,
                    source: str, caps: list[str] | None, job_input: Any = None,
                    graph: dict[str, Any] | None = None, workflow: str | None = None) -> None:
    """An agent-bound instance (or a workflow node's child graph run) as a child run."""
    assert p.node_id is not None and p.item is not None
    seal = turn.sealer
    await engine.graph_start_job(
        turn.conn, turn.run_id, turn.token, p.node_id, p.item, filename=filename,
        interpreter=interpreter, source=seal.seal_text(source),
        input=seal.seal_json(job_input) if job_input is not None else None,
        required_caps=caps, graph=graph, workflow=workflow)


def failure(r: NodeRow) -> str:
    """Why a job failed, in the clear: its error or exit code. What it printed stays in
    its sealed log; a reader gets the tail from there (user_api/graphs.py)."""
    if r.job_status == "failed":
        return r.job_error or (f"exit code {r.job_exit_code}" if r.job_exit_code is not None
                               else "failed")
    # cancelled, or a status a newer engine adds
    return r.job_error if r.job_error and r.job_error != r.job_status else str(r.job_status)


async def stdout_of(turn: Turn, r: NodeRow) -> str:
    """What the instance's job printed (its latest attempt's log)."""
    assert r.job_run_id is not None
    return (await child_output(turn.conn, turn.sealer, r.job_run_id)).replace("\r\n", "\n")


async def outputs_of(turn: Turn, r: NodeRow) -> dict[str, Any]:
    """The run outputs of the instance's child run."""
    assert r.job_run_id is not None
    return await run_outputs(turn.conn, turn.sealer, r.job_run_id)
