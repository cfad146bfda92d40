"""A script node: a stored or inline script, as a child run with its own durable calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs import artifacts
from cryopg.graphs.checks import GraphError
from cryopg.graphs.nodes.base import NodeType, config_schema

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "A stored script (workflow) or an inline one (source and filename) as a child run "
    "with its own durable calls; its run outputs are the output. artifacts are uploaded "
    "after it succeeds, artifacts_from's downloaded before it starts.",
    {"workflow": {"type": "string"}, "source": {"type": "string"},
     "filename": {"type": "string"}, "interpreter": {"type": "string"}, "input": {},
     "artifacts": artifacts.ARTIFACTS_SCHEMA, "artifacts_from": artifacts.ARTIFACTS_FROM_SCHEMA})


def check(nid: str, c: dict[str, Any]) -> None:
    if ("workflow" in c) == ("source" in c):
        raise GraphError(f"node {nid}: config needs a stored workflow name, "
                         "or source and filename")
    if "source" in c and not isinstance(c.get("filename"), str):
        raise GraphError(f"node {nid}: config.filename is required with source")
    artifacts.check(nid, c)


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child script run, of a stored workflow or of the inline source."""
    from cryopg import engine
    from cryopg.graphs.turn import start_job

    workflow = None
    if "workflow" in c:
        filename, interpreter, sealed, kind, _ = await engine.get_workflow(
            turn.conn, turn.org, turn.project, str(c["workflow"]))
        if kind != "script":
            raise ValueError(f"workflow {c['workflow']!r} is a graph; use a workflow node")
        workflow = str(c["workflow"])
        source = turn.sealer.open_text(sealed)
    else:
        filename, interpreter = str(c["filename"]), c.get("interpreter")
        source = str(c["source"])
    caps = None  # cryo._required_caps decides, in the submit itself
    if artifacts.moves(c):  # a bash wrapper runs it, on an agent that can run it
        caps = await engine.required_caps(turn.conn, filename, interpreter)
        source = artifacts.wrap(c, turn.configs, turn.run_id,
                                artifacts.script_command(filename, interpreter, source))
        filename, interpreter = "node.sh", "bash"
    await start_job(turn, p, filename=filename, interpreter=interpreter, source=source,
                    caps=caps, job_input=c.get("input"), workflow=workflow)
    return False


async def result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    """The child's run outputs."""
    from cryopg.graphs.turn import failure, outputs_of

    ok = r.job_status == "succeeded"
    return ok, await outputs_of(turn, r), None if ok else failure(r)


NODE = NodeType("script", SCHEMA["description"], SCHEMA, check, start, result)
