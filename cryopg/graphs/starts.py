"""What the graph driver does for each node type (the start and the result of each
instance; the types themselves, with their config schemas, are in nodes/): state and wait
within the driver's transaction; shell, code, script, http and workflow nodes as child
runs; and, when a child has ended, the node output made from it.

Outputs are sealed as plain JSON (seal_json(value)); the scope the interpreter decides
with is built from them.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

from psycopg import AsyncConnection

from cryopg import engine
from cryopg.db import translated
from cryopg.engine import NodeRow, PlanRow
from cryopg.engine import artifacts as index
from cryopg.errors import CryoError, DatabaseUnavailable
from cryopg.graphs import artifacts
from cryopg.graphs.document import seconds
from cryopg.graphs.http_request import job_source
from cryopg.graphs.nodes.state import CLEAR_OPS
from cryopg.seal import Sealer
from cryopg.server.agent_api.state import incr_in
from cryopg.server.render import answer, child_output, open_document, run_outputs

# The http job with the egress policy inlined: the agent need not have cryopg installed.
HTTP_JOB = job_source()


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


async def start(turn: Turn, p: PlanRow) -> bool:
    """Starts one instance. Returns True when it also ended (a database node)."""
    assert p.node_id is not None and p.item is not None
    c = p.config or {}
    try:
        # A savepoint: a call the database refuses undoes only this start, and the turn's
        # transaction stays usable to record the failure (without it the whole turn
        # rolled back and the driver retried the same run forever).
        with translated():
            async with turn.conn.transaction():
                if p.type == "state":
                    out = await _state(turn, p, c)
                    await turn.record(p.node_id, p.item, True, out,
                                      clear=c.get("op") in CLEAR_OPS)
                    return True
                if p.type == "wait":
                    return await _wait(turn, p, c)
                if p.type == "approval":
                    await engine.graph_wait_item(turn.conn, turn.run_id, turn.token,
                                                 p.node_id, p.item, "approval", None, None)
                    return False
                await _job(turn, p, c)
                return False
    except DatabaseUnavailable:
        raise  # an outage fails no node: the turn rolls back and runs again
    except (CryoError, ValueError, TypeError) as exc:
        # A node that cannot even start (a key it may not write, a number that is not
        # one, a stored workflow that is not there) fails, with the reason.
        await turn.record(p.node_id, p.item, False, None, str(exc).splitlines()[0])
        return True


def _entity(c: dict[str, Any]) -> str | None:
    e = c.get("entity")
    return None if e is None else str(e)


async def _state(turn: Turn, p: PlanRow, c: dict[str, Any]) -> Any:
    op, key, entity = c["op"], str(c["key"]), _entity(c)
    conn, run, tok, seal = turn.conn, turn.run_id, turn.token, turn.sealer
    name = f"node:{p.node_id}#{p.item}#{p.attempt}"
    if op == "get":
        # The store, read in the turn's transaction, already holds every write this graph
        # made (and no cell it deleted): a node never runs again once recorded.
        cell = await engine.state_get(conn, turn.org, turn.project, run if entity is None else None,
                                      entity, key)
        return {"value": seal.open_json(cell.value), "version": cell.version} if cell else {
            "value": None, "version": None}
    if key.startswith("_cryo/"):
        raise ValueError(f"key {key!r} is reserved for the engine")
    if op == "set":
        value = seal.seal_json(c.get("value"))
        version = await engine.state_set(conn, run, tok, entity, key, value)
        return {"version": version}
    if op == "delete":
        return {"deleted": await engine.state_delete(conn, run, tok, entity, key)}
    if op == "add":
        got = await engine.state_add(conn, run, tok, entity, key,
                                     seal.seal_json(c.get("value", True)), name=name, ordinal=0)
        return {"claimed": got.won}
    if op == "cas":
        expected = c.get("expected")
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise ValueError(f"cas needs an integer expected version, not {expected!r}")
        got = await engine.state_cas(conn, run, tok, entity, key, seal.seal_json(c.get("value")),
                                     expected, name=name, ordinal=0)
        return {"swapped": got.won}
    by = c.get("by", 1)
    if not isinstance(by, (int, float)) or isinstance(by, bool):
        raise ValueError(f"incr needs a number to add, not {by!r}")
    got = await incr_in(conn, seal, run, tok, entity, key, by, {"name": name, "ordinal": 0})
    return {"value": got.get("value"), "version": got.get("version")}


async def _wait(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    assert p.node_id is not None and p.item is not None
    timeout = seconds(c["timeout"], "timeout") if "timeout" in c else None
    turn.timed = True  # a sleep, or a wait that may time out
    if "sleep" in c:
        secs = seconds(c["sleep"], "sleep")
        await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item,
                                     "sleep", None, secs)
        return False
    kind = "signal" if "signal" in c else "event"
    await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item, kind,
                                 str(c[kind]), timeout)
    return False


async def _job(turn: Turn, p: PlanRow, c: dict[str, Any]) -> None:
    """An agent-bound instance: a child run, with the node's key in its environment."""
    assert p.node_id is not None and p.item is not None
    seal = turn.sealer
    key = p.idempotency_key or ""
    graph = workflow = None
    job_input: Any = None
    if p.type == "shell":
        env = c.get("env") or {}
        lines = ["set -eu", f"export CRYO_IDEMPOTENCY_KEY={shlex.quote(key)}"]
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()
                  if isinstance(k, str) and k.isidentifier()]
        filename, interpreter = "node.sh", "bash"
        run = str(c["run"])
        if artifacts.moves(c):
            run = artifacts.wrap(c, turn.configs, turn.run_id, run)
        source, caps = "\n".join(lines) + "\n" + run + "\n", ["shell"]
    elif p.type == "code":
        program = str(c.get("interpreter") or "python3")
        filename = "node.py" if program.startswith("python") else "node.code"
        # The node's scope arrives on stdin, as JSON.
        interpreter = "bash -c " + shlex.quote(f'exec {program} "$0" < "$CRYO_INPUT_FILE"')
        source, caps = str(c["script"]), ["polyglot"]
        job_input = {**turn.scope, "node": {"id": p.node_id, "idempotency_key": key},
                     **({"item": p.item_value, "item_index": p.item}
                        if p.item_value is not None else {})}
    elif p.type == "http":
        # Not http.py: a script of that name would shadow the http package it imports.
        filename, interpreter = "cryo_http_node.py", "python3"
        source, caps = HTTP_JOB, ["connector"]
        job_input = {"method": str(c.get("method", "GET")).upper(), "url": str(c["url"]),
                     "headers": {str(k): str(v) for k, v in (c.get("headers") or {}).items()},
                     "body": c.get("body"), "secrets": list(c.get("secrets") or [])}
    elif p.type == "script":
        job_input = c.get("input")
        if "workflow" in c:
            filename, interpreter, sealed, kind, _ = await engine.get_workflow(
                turn.conn, turn.org, turn.project, str(c["workflow"]))
            if kind != "script":
                raise ValueError(f"workflow {c['workflow']!r} is a graph; use a workflow node")
            workflow = str(c["workflow"])
            source = seal.open_text(sealed)
        else:
            filename, interpreter = str(c["filename"]), c.get("interpreter")
            source = str(c["source"])
        caps = None  # cryo._required_caps decides, in the submit itself
        if artifacts.moves(c):  # a bash wrapper runs it, on an agent that can run it
            caps = await engine.required_caps(turn.conn, filename, interpreter)
            source = artifacts.wrap(c, turn.configs, turn.run_id,
                                    artifacts.script_command(filename, interpreter, source))
            filename, interpreter = "node.sh", "bash"
    else:  # workflow: a stored graph, run as a child graph run
        filename, interpreter, sealed, kind, graph = await engine.get_workflow(
            turn.conn, turn.org, turn.project, str(c["graph"]))
        if kind != "graph":
            raise ValueError(f"workflow {c['graph']!r} is a script; use a script node")
        workflow, source, caps = str(c["graph"]), open_document(seal, sealed), []
        job_input = c.get("input")
    await engine.graph_start_job(
        turn.conn, turn.run_id, turn.token, p.node_id, p.item, filename=filename,
        interpreter=interpreter, source=seal.seal_text(source),
        input=seal.seal_json(job_input) if job_input is not None else None,
        required_caps=caps, graph=graph, workflow=workflow)


async def collect(turn: Turn, r: NodeRow) -> bool:
    """Records what an instance came to, when it has: its child run ended, its wait was
    answered or timed out, its approval given. Returns whether it recorded anything."""
    assert r.item is not None
    if r.item_status == "running" and r.job_run_id and r.job_finished:
        ok, out, error = await _job_result(turn, r)
        if ok and r.type in artifacts.ARTIFACT_NODES:
            error = await _name_artifacts(turn, r)
            ok = error is None
        await turn.record(r.node_id, r.item, ok, out, error, r.job_exit_code)
        return True
    if r.item_status != "waiting":
        return False
    if r.wait_kind == "approval" and r.output is not None:
        await turn.record(r.node_id, r.item, True, turn.sealer.open_json(r.output))
        return True
    if r.wait_kind == "signal" and r.signal_id is not None:
        got = await engine.graph_take_signal(turn.conn, turn.run_id, turn.token, r.signal_id,
                                             r.node_id, r.item)
        if got is not None:
            await turn.record(r.node_id, r.item, True, answer(turn.sealer, got[0], got[1]))
            return True
    if r.wait_kind == "event" and r.event_id is not None:
        got = await engine.read_event(turn.conn, r.event_id)
        if got is not None:
            await turn.record(r.node_id, r.item, True, answer(turn.sealer, got[0], got[1]))
            return True
    if r.due:
        await turn.record(r.node_id, r.item, True,
                          {} if r.wait_kind == "sleep" else {"timed_out": True})
        return True
    return False


async def _name_artifacts(turn: Turn, r: NodeRow) -> str | None:
    """The declared artifacts the job put, named `{node}/{name}` in the graph run's scope:
    index rows pointing at the blobs already stored, so no byte moves here. Why the node
    fails instead, when one is not there."""
    assert r.job_run_id is not None
    c = turn.configs.get(r.node_id) or {}
    for name, _ in artifacts.declared(r.node_id, c.get("artifacts", [])):
        got = await index.find_artifact(turn.conn, turn.org, turn.project, r.job_run_id, name)
        if got is None:
            return f"artifact {name} was not uploaded by the job"
        await index.put_run_artifact(turn.conn, turn.run_id, turn.token, None,
                                     artifacts.graph_name(r.node_id, name), got.sha256,
                                     got.size, None)
    return None


def _failure(r: NodeRow) -> str:
    """Why a job failed, in the clear: its error or exit code. What it printed stays in
    its sealed log; a reader gets the tail from there (user_api/graphs.py)."""
    if r.job_status == "failed":
        return r.job_error or (f"exit code {r.job_exit_code}" if r.job_exit_code is not None
                               else "failed")
    # cancelled, or a status a newer engine adds
    return r.job_error if r.job_error and r.job_error != r.job_status else str(r.job_status)


async def _job_result(turn: Turn, r: NodeRow) -> tuple[bool, Any, str | None]:
    assert r.job_run_id is not None
    ok = r.job_status == "succeeded"
    why = None
    if r.type in ("shell", "code", "http"):
        stdout = (await child_output(turn.conn, turn.sealer, r.job_run_id)).replace("\r\n", "\n")
        if not ok:
            why = _failure(r)
        if r.type == "shell":
            # text: stdout as `$(...)` gives it, without the trailing newlines, for templates.
            return ok, {"stdout": stdout, "text": stdout.rstrip("\n"),
                        "exit_code": r.job_exit_code}, why
        lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
        try:
            value = json.loads(stdout) if r.type == "code" else json.loads(lines[-1])
        except (ValueError, IndexError):
            if r.type == "http" and not ok and lines:  # its one-line refusal or failure
                return False, None, lines[-1][:500]
            return False, {"stdout": stdout}, why or f"{r.type} node printed no JSON"
        if r.type == "http" and isinstance(value, dict) and int(value.get("status") or 0) >= 400:
            return False, value, f"HTTP {value.get('status')}"
        return ok, value, why
    if not ok:
        why = _failure(r)
    outputs = await run_outputs(turn.conn, turn.sealer, r.job_run_id)
    if r.type == "workflow":
        return ok, outputs.get("output"), why
    return ok, outputs, why
