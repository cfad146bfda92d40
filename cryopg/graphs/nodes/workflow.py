"""A workflow node: a stored graph (or pipeline) run as a child graph run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "A stored graph or pipeline run as a child graph run; its output is the output.",
    {"graph": {"type": "string", "minLength": 1}, "input": {}}, ("graph",))


def check(nid: str, c: dict[str, Any]) -> None:
    if not isinstance(need(nid, c, "graph"), str):
        raise GraphError(f"node {nid}: config.graph must be a stored graph's name")


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child graph run of the stored graph."""
    from cryopg import engine
    from cryopg.errors import InputRefused
    from cryopg.graphs import schemas
    from cryopg.graphs.turn import start_job
    from cryopg.payloads import open_document

    filename, interpreter, sealed, kind, graph = await engine.get_workflow(
        turn.conn, turn.org, turn.project, str(c["graph"]))
    if kind != "graph":
        raise ValueError(f"workflow {c['graph']!r} is a script; use a script node")
    refused = schemas.input_refusal(graph, c.get("input"))
    if refused is not None:  # the node fails with the schema's message; no child starts
        raise InputRefused(refused)
    await start_job(turn, p, filename=filename, interpreter=interpreter,
                    source=open_document(turn.sealer, sealed), caps=[],
                    job_input=c.get("input"), graph=graph, workflow=str(c["graph"]))
    return False


async def result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    """The child graph run's output."""
    from cryopg.graphs.turn import failure, outputs_of

    ok = r.job_status == "succeeded"
    return ok, (await outputs_of(turn, r)).get("output"), None if ok else failure(r)


NODE = NodeType("workflow", SCHEMA["description"], SCHEMA, check, start, result)
