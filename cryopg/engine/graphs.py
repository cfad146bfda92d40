"""The graph tier's calls: the driver's turn on a graph run (72_graph_drive.sql and
75_graphs.sql), approvals and reruns (76_graph_operators.sql) and reading a run's nodes
(77_graph_reads.sql)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from cryopg.engine._sql import _one


@dataclasses.dataclass(frozen=True)
class Driven:
    run_id: str
    claim_token: uuid.UUID
    org: str
    project: str
    source: bytes | None  # None when asked without documents
    input: bytes | None
    input_clear: Any
    graph: dict[str, Any] | None
    more: bool = False  # other graph runs were pending once this one was taken


@dataclasses.dataclass(frozen=True)
class NodeRow:
    node_id: str
    type: str
    node_status: str
    items: int | None
    item: int | None
    item_status: str | None
    attempt: int | None
    output: bytes | None
    error: str | None
    job_run_id: str | None
    job_status: str | None
    job_finished: bool | None
    job_exit_code: int | None
    job_error: str | None
    wait_kind: str | None
    wait_name: str | None
    due: bool | None
    signal_id: int | None
    event_id: int | None
    started_at: Any
    output_clear: Any  # an output holding no user data (output is None then)


@dataclasses.dataclass(frozen=True)
class PlanRow:
    action: str
    node_id: str | None
    type: str | None
    item: int | None
    attempt: int | None
    config: Any
    item_value: Any
    idempotency_key: str | None
    output: Any


@dataclasses.dataclass(frozen=True)
class GraphNode:
    node_id: str
    type: str
    status: str
    items: int | None
    item: int | None
    item_status: str | None
    attempt: int | None
    output: bytes | None
    error: str | None
    job_run_id: str | None
    wait_kind: str | None
    started_at: Any
    finished_at: Any
    output_clear: Any  # an output holding no user data (output is None then)
    cached: bool = False  # the instance's output came from its node's cache


async def submit_graph(conn: AsyncConnection, org: str, project: str, *, filename: str,
                       interpreter: str | None, source: bytes, input: bytes | None,
                       idempotency_key: str | None, untrusted: bool, concurrency: str | None,
                       policy: str | None, workdir: str | None, graph: dict[str, Any],
                       calls: dict[str, Any] | None, timeout: float | None = None,
                       priority: int | None = None) -> tuple[str | None, bool, str | None,
                                                             int | None]:
    """Returns (run id, created, status, queue position); the id is None when `skip`
    found the group held. A graph the database runs whole has usually ended already."""
    cur = await conn.execute(
        "SELECT * FROM cryo.submit_graph(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s, %s)",
        (org, project, filename, interpreter, source, input, idempotency_key, untrusted,
         concurrency, policy, workdir, Jsonb(graph), Jsonb(calls) if calls else None,
         timeout, priority))
    row = await cur.fetchone()
    return row[0], row[1], row[2], row[3]


async def drive_graphs(conn: AsyncConnection, driver: str, limit: int = 1,
                       documents: bool = True) -> list[Driven]:
    cur = conn.cursor(row_factory=class_row(Driven))
    await cur.execute("SELECT * FROM cryo.drive_graphs(%s, %s, %s)", (driver, limit, documents))
    return await cur.fetchall()


async def graph_runs_waiting(conn: AsyncConnection) -> bool:
    cur = await conn.execute("SELECT cryo.graph_runs_waiting()", prepare=True)
    row = await cur.fetchone()
    return bool(row and row[0])


async def graph_state(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                      nodes: list[str] | None = None, started: bool = False) -> list[NodeRow]:
    cur = conn.cursor(row_factory=class_row(NodeRow))
    await cur.execute("SELECT * FROM cryo.graph_state(%s, %s, %s, %s)",
                      (run_id, token, nodes, started))
    return await cur.fetchall()


async def graph_plan(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                     configs: dict[str, Any], scope: dict[str, Any],
                     calls: dict[str, Any] | None = None) -> list[PlanRow]:
    cur = conn.cursor(row_factory=class_row(PlanRow))
    await cur.execute("SELECT * FROM cryo.graph_plan(%s, %s, %s, %s, %s)",
                      (run_id, token, Jsonb(configs), Jsonb(scope),
                       Jsonb(calls) if calls is not None else None))
    return await cur.fetchall()


async def graph_take_signal(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                            signal_id: int, node: str,
                            item: int) -> tuple[bytes | None, Any] | None:
    cur = await conn.execute("SELECT * FROM cryo.graph_take_signal(%s, %s, %s, %s, %s)",
                             (run_id, token, signal_id, node, item))
    row = await cur.fetchone()
    return (row[0], row[1]) if row else None


async def graph_record_item(conn: AsyncConnection, run_id: str, token: uuid.UUID, node: str,
                            item: int, outcome: str, output: bytes | None = None,
                            error: str | None = None, exit_code: int | None = None,
                            output_clear: Any = None) -> str:
    return await _one(conn, "SELECT cryo.graph_record_item(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, node, item, outcome, output, error, exit_code,
                       Jsonb(output_clear) if output_clear is not None else None))


async def graph_start_job(conn: AsyncConnection, run_id: str, token: uuid.UUID, node: str,
                          item: int, *, filename: str, interpreter: str | None, source: bytes,
                          input: bytes | None, required_caps: list[str] | None,
                          graph: dict[str, Any] | None = None,
                          workflow: str | None = None) -> str:
    return await _one(
        conn, "SELECT cryo.graph_start_job(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, token, node, item, filename, interpreter, source, input, required_caps,
         Jsonb(graph) if graph is not None else None, workflow))


async def graph_wait_item(conn: AsyncConnection, run_id: str, token: uuid.UUID, node: str,
                          item: int, kind: str, name: str | None, seconds: float | None) -> None:
    await conn.execute("SELECT cryo.graph_wait_item(%s, %s, %s, %s, %s, %s, %s)",
                       (run_id, token, node, item, kind, name, seconds))


async def graph_settle(conn: AsyncConnection, run_id: str, token: uuid.UUID, finish: bool,
                       output: bytes | None = None) -> str:
    return await _one(conn, "SELECT cryo.graph_settle(%s, %s, %s, %s)",
                      (run_id, token, finish, output))


async def graph_refuse_input(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                             reason: str) -> str:
    return await _one(conn, "SELECT cryo.graph_refuse_input(%s, %s, %s)",
                      (run_id, token, reason))


async def graph_yield(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    await conn.execute("SELECT cryo.graph_yield(%s, %s)", (run_id, token))


async def graph_defer(conn: AsyncConnection, run_id: str, token: uuid.UUID, error: str) -> float:
    return await _one(conn, "SELECT cryo.graph_defer(%s, %s, %s)", (run_id, token, error))


async def wake_due_graphs(conn: AsyncConnection) -> float | None:
    return await _one(conn, "SELECT cryo.wake_due_graphs()", ())


async def approve_node(conn: AsyncConnection, run_id: str, node: str, answer: bytes,
                       by: str, auth: str | None = None,
                       item: int | None = None) -> dict[str, Any] | None:
    """{approvals, needed, approved}, or None when the node (or its item `item`) waits
    for no approval."""
    return await _one(conn, "SELECT cryo.approve_node(%s, %s, %s, %s, %s, %s)",
                      (run_id, node, answer, by, auth, item))


async def read_approvals(conn: AsyncConnection, run_id: str,
                         node: str) -> list[tuple[str, str, Any]]:
    """The answers an approval node got: (approver, approved | rejected, when)."""
    cur = await conn.execute("SELECT * FROM cryo.read_approvals(%s, %s)", (run_id, node))
    return [tuple(r) for r in await cur.fetchall()]  # type: ignore[misc]


async def rerun_graph(conn: AsyncConnection, run_id: str, from_node: str) -> str:
    return await _one(conn, "SELECT cryo.rerun_graph(%s, %s)", (run_id, from_node))


async def read_graph_nodes(conn: AsyncConnection, run_id: str) -> list[GraphNode]:
    cur = conn.cursor(row_factory=class_row(GraphNode))
    await cur.execute("SELECT * FROM cryo.read_graph_nodes(%s)", (run_id,))
    return await cur.fetchall()


async def render_config(conn: AsyncConnection, config: Any, scope: dict[str, Any]) -> Any:
    return await _one(conn, "SELECT cryo.render_config(%s, %s)", (Jsonb(config), Jsonb(scope)))


async def eval_expression(conn: AsyncConnection, expr: Any, scope: dict[str, Any]) -> Any:
    return await _one(conn, "SELECT cryo.eval_expression(%s, %s)", (Jsonb(expr), Jsonb(scope)))


async def read_event(conn: AsyncConnection, event_id: int) -> tuple[bytes | None, Any] | None:
    cur = await conn.execute("SELECT payload, payload_clear FROM cryo.read_event(%s)", (event_id,))
    row = await cur.fetchone()
    return (row[0], row[1]) if row else None


async def get_workflow(conn: AsyncConnection, org: str, project: str,
                       name: str) -> tuple[str, str | None, bytes, str, Any]:
    cur = await conn.execute("SELECT filename, interpreter, source, kind, graph"
                             " FROM cryo.get_workflow(%s, %s, %s)", (org, project, name))
    filename, interpreter, source, kind, graph = await cur.fetchone()
    return filename, interpreter, source, kind, graph


async def workflow_workdir(conn: AsyncConnection, org: str, project: str,
                           name: str) -> str | None:
    """The directory a stored workflow was put from (where runs started by name run)."""
    return await _one(conn, "SELECT workdir FROM cryo.get_workflow(%s, %s, %s)",
                      (org, project, name))


async def workflow_version(conn: AsyncConnection, org: str, project: str, name: str) -> int:
    """A stored workflow's current version number."""
    return await _one(conn, "SELECT version FROM cryo.get_workflow(%s, %s, %s)",
                      (org, project, name))


async def read_graph(conn: AsyncConnection, run_id: str) -> tuple[dict[str, Any], bytes] | None:
    cur = await conn.execute("SELECT graph, source FROM cryo.read_graph(%s)", (run_id,))
    row = await cur.fetchone()
    return (row[0], row[1]) if row else None


@dataclasses.dataclass(frozen=True)
class GraphJob:
    """A child run that did a node of a graph run (cryo.graph_jobs)."""

    job_run_id: str
    label: str
    attempt: int
    status: str
    exit_code: int | None
    error: str | None
    finished: bool
    created_at: Any


@dataclasses.dataclass(frozen=True)
class GraphLogChunk:
    job_run_id: str
    id: int
    data: bytes
    created_at: Any = None  # when the chunk was stored


async def graph_jobs(conn: AsyncConnection, run_id: str) -> list[GraphJob]:
    cur = conn.cursor(row_factory=class_row(GraphJob))
    await cur.execute("SELECT * FROM cryo.graph_jobs(%s)", (run_id,))
    return await cur.fetchall()


async def read_graph_logs(conn: AsyncConnection, run_id: str, after: dict[str, int],
                          limit: int = 500) -> list[GraphLogChunk]:
    """Chunks of the given jobs of a graph run, each after its own position."""
    cur = conn.cursor(row_factory=class_row(GraphLogChunk))
    await cur.execute("SELECT * FROM cryo.read_graph_logs(%s, %s, %s, %s)",
                      (run_id, list(after), list(after.values()), limit))
    return await cur.fetchall()


@dataclasses.dataclass(frozen=True)
class GraphCall:
    """A script's call of a graph: parked on the child, or its recorded answer."""

    parked: bool
    child_run_id: str
    status: str | None
    exit_code: int | None
    output: bytes | None
    error: str | None


async def call_graph(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                     position: int | None = None, family: str, name: str, ordinal: int,
                     workflow: str | None, filename: str, source: bytes, input: bytes | None,
                     graph: dict[str, Any], path: str | None = None) -> GraphCall:
    cur = conn.cursor(row_factory=class_row(GraphCall))
    await cur.execute(
        "SELECT * FROM cryo.call_graph(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, token, position, family, name, ordinal, workflow, filename, source, input,
         Jsonb(graph), path))
    got = await cur.fetchone()
    assert got is not None
    return got
