"""A code node: a program on an agent with `polyglot`, reading its scope as JSON."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from cryopg.graphs.checks import GraphError, need
from cryopg.graphs.nodes.base import NodeType, config_schema

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "A program (python3 by default) on an agent with polyglot; the node's scope arrives "
    "as JSON on stdin and its stdout, parsed as JSON, is the output.",
    {"script": {"type": "string"}, "interpreter": {"type": "string"}},
    ("script",))


def check(nid: str, c: dict[str, Any]) -> None:
    if not isinstance(need(nid, c, "script"), str):
        raise GraphError(f"node {nid}: config.script must be a string")
    if "interpreter" in c and not isinstance(c["interpreter"], str):
        raise GraphError(f"node {nid}: config.interpreter must be a string")


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child run of the program, the node's scope arriving on stdin as JSON."""
    from cryopg.graphs.turn import start_job

    program = str(c.get("interpreter") or "python3")
    filename = "node.py" if program.startswith("python") else "node.code"
    interpreter = "bash -c " + shlex.quote(f'exec {program} "$0" < "$CRYO_INPUT_FILE"')
    key = p.idempotency_key or ""
    job_input = {**turn.scope, "node": {"id": p.node_id, "idempotency_key": key},
                 **({"item": p.item_value, "item_index": p.item}
                    if p.item_value is not None else {})}
    await start_job(turn, p, filename=filename, interpreter=interpreter,
                    source=str(c["script"]), caps=["polyglot"], job_input=job_input)
    return False


async def result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    """Its stdout, parsed as JSON."""
    from cryopg.graphs.turn import failure, stdout_of

    ok = r.job_status == "succeeded"
    why = None if ok else failure(r)
    stdout = await stdout_of(turn, r)
    try:
        return ok, json.loads(stdout), why
    except ValueError:
        return False, {"stdout": stdout}, why or "code node printed no JSON"


NODE = NodeType("code", SCHEMA["description"], SCHEMA, check, start, result)
