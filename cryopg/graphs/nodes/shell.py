"""A shell node: a bash script on an agent with the `shell` capability."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from cryopg.graphs import artifacts
from cryopg.graphs.checks import GraphError, need, string_or_expr
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

if TYPE_CHECKING:
    from cryopg.engine import NodeRow, PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "A bash -eu script on an agent with shell; output {stdout, text, exit_code}, a "
    "non-zero exit fails the node. artifacts are uploaded after it succeeds, "
    "artifacts_from's downloaded before it starts.",
    {"run": dyn({"type": "string"}),
     "env": {"type": "object", "additionalProperties": dyn({"type": "string"})},
     "artifacts": artifacts.ARTIFACTS_SCHEMA, "artifacts_from": artifacts.ARTIFACTS_FROM_SCHEMA},
    ("run",))


def check(nid: str, c: dict[str, Any]) -> None:
    need(nid, c, "run")
    string_or_expr(nid, c, "run")
    if "env" in c and not isinstance(c["env"], dict):
        raise GraphError(f"node {nid}: config.env must be an object of strings")
    artifacts.check(nid, c)


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A child run of `bash` with the node's key (and env) exported, and the graph's
    input in its $CRYO_INPUT_FILE."""
    from cryopg.graphs.turn import start_job

    env = c.get("env") or {}
    lines = ["set -eu", f"export CRYO_IDEMPOTENCY_KEY={shlex.quote(p.idempotency_key or '')}"]
    lines += [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()
              if isinstance(k, str) and k.isidentifier()]
    run = str(c["run"])
    if artifacts.moves(c):
        run = artifacts.wrap(c, turn.configs, turn.run_id, run)
    # The graph's input is the job's $CRYO_INPUT_FILE, as a script run's input is.
    await start_job(turn, p, filename="node.sh", interpreter="bash",
                    source="\n".join(lines) + "\n" + run + "\n", caps=["shell"],
                    job_input=turn.scope.get("input"))
    return False


async def result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    """{stdout, text, exit_code}; text is stdout as `$(...)` gives it, without the
    trailing newlines, for templates."""
    from cryopg.graphs.turn import failure, stdout_of

    ok = r.job_status == "succeeded"
    stdout = await stdout_of(turn, r)
    return ok, {"stdout": stdout, "text": stdout.rstrip("\n"),
                "exit_code": r.job_exit_code}, None if ok else failure(r)


NODE = NodeType("shell", SCHEMA["description"], SCHEMA, check, start, result)
