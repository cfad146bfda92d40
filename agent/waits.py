"""Durable verbs that wait on the world or start other runs: signals, bus events,
emits, child runs, fan-out activities and run outputs.

Each is a durable call with a path in the journal. A replay answers from the journal;
a first reach asks the server, which either answers at once (a queued signal, a child
that already finished) or parks the run, in which case the script is killed and the
answer arrives on a later pass.
"""

from __future__ import annotations

import math
from typing import Any

from agent.api import AgentAPIError, StaleClaim
from agent.journal import JournalCursor, VerbError

TIMED_OUT = 124  # a bounded wait with nothing by the deadline
WAIT_OPS = (
    "wait.signal",
    "wait.event",
    "emit",
    "spawn",
    "activity.submit",
    "activity.collect",
    "activity.wait-all",
    "output.set",
    "lock.acquire",
    "lock.release",
    "graph.call",
    "node.call",
)
# A called graph that did not succeed fails the call with this code.
GRAPH_FAILED = "graph_failed"


def _error(code: str, message: str) -> VerbError:
    return VerbError(code, message)


def _name(req: dict[str, Any], what: str) -> str:
    name = req.get("name")
    if not isinstance(name, str) or not name:
        raise _error("bad_request", f"{what} needs a non-empty string 'name'")
    return name


def _timeout(req: dict[str, Any]) -> float | None:
    timeout = req.get("timeout")
    if timeout is None:
        return None
    if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
            or not math.isfinite(timeout) or timeout < 0):
        raise _error("bad_request", "'timeout' must be a non-negative number of seconds")
    return float(timeout)


def _opt_in(req: dict[str, Any], what: str) -> bool:
    """A trust opt-in (docs/security/trust.md): `tainted` on wait.event, `public` on emit."""
    value = req.get(what)
    if value is not None and not isinstance(value, bool):
        raise _error("bad_request", f"'{what}' must be true, false or null")
    return bool(value)


def _done(verbs: JournalCursor, path: str) -> dict[str, Any] | None:
    entry = verbs._by_path.get(path)
    return entry if entry is not None and entry.get("status") == "done" else None


async def flush_before_park(verbs: JournalCursor) -> None:
    """What the script printed so far belongs to this pass; a park ends the claim."""
    try:
        await verbs._job.flush_logs()
    except StaleClaim:
        verbs._job.stale()
        raise _error("engine", "the claim on this run was lost") from None
    except AgentAPIError:
        pass  # losing a few log bytes beats failing to park


async def _ask(verbs: JournalCursor, what: str, **fields: Any) -> dict[str, Any]:
    job = verbs._job
    return await verbs._engine(job.api.call(job.run_id, job.claim_token, what, **fields))


def _memo(verbs: JournalCursor, path: str, family: str, name: str, ordinal: int,
          answer: Any, exit_code: int = 0, stdout: str = "") -> dict[str, Any]:
    entry = {"path": path, "family": family, "name": name, "ordinal": ordinal,
             "status": "done", "stdout": stdout, "exit_code": exit_code, "answer": answer}
    verbs._remember(entry)
    return entry


async def dispatch(verbs: JournalCursor, op: str, req: dict[str, Any]) -> dict[str, Any] | None:
    if op in ("wait.signal", "wait.event"):
        return await _wait(verbs, op.removeprefix("wait."), req)
    if op == "emit":
        return await _emit(verbs, req)
    if op == "spawn":
        return await _spawn(verbs, req)
    if op == "activity.submit":
        return await _activity_submit(verbs, req)
    if op == "activity.collect":
        return await _activity_collect(verbs, req)
    if op == "activity.wait-all":
        return await _wait_all(verbs)
    if op == "lock.acquire":
        return await _lock(verbs, req)
    if op == "lock.release":
        return await _unlock(verbs, req)
    if op in ("graph.call", "node.call"):
        return await _call_graph(verbs, op, req)
    return await _output(verbs, req)


async def _wait(verbs: JournalCursor, kind: str, req: dict[str, Any]) -> dict[str, Any] | None:
    name = _name(req, f"wait.{kind}")
    timeout = _timeout(req)
    # A trusted run's wait that also hears untrusted runs' events is a call of its own.
    tainted = kind == "event" and _opt_in(req, "tainted")
    family = "event.tainted" if tainted else kind
    path, ordinal, position = await verbs._reach(family, name)
    entry = _done(verbs, path)
    if entry is None:
        await flush_before_park(verbs)
        extra = {"tainted": True} if tainted else {}
        got = await _ask(verbs, f"waits/{kind}", position=position, path=path, name=name,
                         ordinal=ordinal, timeout=timeout, **extra)
        if got.get("parked"):
            verbs._job.parked()  # the script dies here; the answer comes on a later pass
            return None
        entry = _memo(verbs, path, family, name, ordinal, got.get("payload"),
                      TIMED_OUT if got.get("timed_out") else 0)
    timed_out = entry.get("exit_code") == TIMED_OUT
    payload = None if timed_out else entry.get("answer")
    return {"ok": True, "timed_out": timed_out, "payload": payload}


async def _emit(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any]:
    name = _name(req, "emit")
    path, ordinal, position = await verbs._reach("emit", "")
    if _done(verbs, path) is None:
        extra = {"public": True} if _opt_in(req, "public") else {}
        got = await _ask(verbs, "emit", position=position, path=path, ordinal=ordinal, name=name,
                         payload=req.get("payload"), **extra)
        _memo(verbs, path, "emit", "", ordinal, {"event_id": got.get("event_id")})
    return {"ok": True}


async def _spawn(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any]:
    path, ordinal, position = await verbs._reach("spawn", "")
    entry = _done(verbs, path)
    if entry is None:
        source, filename = req.get("source"), req.get("filename")
        if not isinstance(source, str) or not isinstance(filename, str) or not filename:
            raise _error("bad_request", "spawn needs the child script's 'filename' and 'source'")
        got = await _ask(verbs, "spawn", position=position, path=path, ordinal=ordinal,
                         filename=filename,
                         source=source, input=req.get("input"),
                         interpreter=req.get("interpreter"))
        entry = _memo(verbs, path, "spawn", "", ordinal, {"run_id": got.get("run_id")})
    return {"ok": True, "run_id": (entry.get("answer") or {}).get("run_id")}


async def _activity_submit(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any]:
    name = _name(req, "activity.submit")
    if verbs._ordinals.get(("activity", name), 0) > 0:
        raise _error("bad_request",
                     f"activity {name!r} was already submitted in this run; names are unique")
    path, _, position = await verbs._reach("activity", name)
    entry = _done(verbs, path)
    if entry is None:
        argv = req.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise _error("bad_request", "activity.submit needs a non-empty 'argv' of strings")
        got = await _ask(verbs, "activities", position=position, path=path, name=name, argv=argv,
                         retries=req.get("retries") or 0,
                         retry_backoff=req.get("retry_backoff") or 0,
                         retry_on=req.get("retry_on"))
        entry = _memo(verbs, path, "activity", name, 0, {"run_id": got.get("run_id")})
    return {"ok": True, "run_id": (entry.get("answer") or {}).get("run_id")}


async def _activity_collect(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any] | None:
    name = _name(req, "activity.collect")
    path, ordinal, position = await verbs._reach("activity.collect", name)
    entry = _done(verbs, path)
    if entry is None:
        await flush_before_park(verbs)
        got = await _ask(verbs, "activities/collect", position=position, path=path,
                         ordinal=ordinal, name=name)
        if got.get("parked"):
            verbs._job.parked()
            return None
        entry = _memo(verbs, path, "activity.collect", name, ordinal,
                      {"run_id": got.get("run_id")}, int(got.get("exit_code") or 0),
                      str(got.get("stdout") or ""))
    return {"ok": True, "stdout": entry.get("stdout") or "",
            "exit_code": int(entry.get("exit_code") or 0)}


async def _wait_all(verbs: JournalCursor) -> dict[str, Any] | None:
    path, ordinal, position = await verbs._reach("activity.wait-all", "")
    entry = _done(verbs, path)
    if entry is None:
        await flush_before_park(verbs)
        got = await _ask(verbs, "activities/wait-all", position=position, path=path,
                         ordinal=ordinal)
        if got.get("parked"):
            verbs._job.parked()
            return None
        entry = _memo(verbs, path, "activity.wait-all", "", ordinal, {"failed": got.get("failed")})
    return {"ok": True, "failed": int((entry.get("answer") or {}).get("failed") or 0)}


async def _output(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any]:
    key = req.get("key")
    if not isinstance(key, str) or not key:
        raise _error("bad_request", "output.set needs a non-empty string 'key'")
    await _ask(verbs, "outputs", key=key, value=req.get("value"))
    return {"ok": True}


def _group(req: dict[str, Any], what: str) -> str:
    group = req.get("group")
    if not isinstance(group, str) or not group:
        raise _error("bad_request", f"{what} needs a non-empty string 'group'")
    return group


async def _lock(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any] | None:
    """Take a project lease. Scoped leases are released by lock.release; a bare one is
    held until the run ends, so taking it twice in one run is refused."""
    group = _group(req, "lock.acquire")
    scoped = bool(req.get("scoped", True))
    path, ordinal, position = await verbs._reach("lock", group)
    if _done(verbs, path) is None:
        await flush_before_park(verbs)
        job = verbs._job
        try:
            got = await job.api.call(job.run_id, job.claim_token, "locks/acquire",
                                     position=position, path=path, ordinal=ordinal,
                                     group=group, scoped=scoped)
        except StaleClaim:
            job.stale()
            raise _error("engine", "the claim on this run was lost") from None
        except AgentAPIError as e:
            if e.code == "lease_held":
                raise _error("bad_request",
                             f"this run already holds the lease on {group!r}") from None
            raise _error("engine", f"server refused or unreachable: {e.message}") from None
        if not got.get("granted"):
            job.parked()  # queued for the group: resumes holding it
            return None
        _memo(verbs, path, "lock", group, ordinal, {"group": group})
    return {"ok": True}


async def _unlock(verbs: JournalCursor, req: dict[str, Any]) -> dict[str, Any]:
    group = _group(req, "lock.release")
    got = await _ask(verbs, "locks/release", group=group)
    return {"ok": True, "released": bool(got.get("released"))}


async def _call_graph(verbs: JournalCursor, op: str, req: dict[str, Any]) -> dict[str, Any] | None:
    """Run a stored graph (graph.call {name, input}) or one node (node.call {type, config,
    input}) as a child graph run and answer with its output. The first reach submits the
    child and parks; the child's end wakes the run with the memo every pass answers from."""
    if op == "graph.call":
        name = _name(req, "graph.call")
        fields: dict[str, Any] = {"name": name}
        what, route = f"graph {name!r}", "graphs/call"
    else:
        name = req.get("type")
        if not isinstance(name, str) or not name:
            raise _error("bad_request", "node.call needs a non-empty string 'type'")
        if not isinstance(req.get("config"), dict):
            raise _error("bad_request", "node.call needs a JSON object 'config'")
        fields = {"type": name, "config": req["config"]}
        what, route = f"{name} node", "nodes/call"
    path, ordinal, position = await verbs._reach(op, name)
    entry = _done(verbs, path)
    if entry is None:
        await flush_before_park(verbs)
        job = verbs._job
        try:
            got = await job.api.call(job.run_id, job.claim_token, route, position=position,
                                     path=path, ordinal=ordinal, input=req.get("input"),
                                     **fields)
        except StaleClaim:
            job.stale()
            raise _error("engine", "the claim on this run was lost") from None
        except AgentAPIError as e:
            if e.code in ("invalid_argument", "not_found"):
                raise _error(e.code, e.message) from None
            raise _error("engine", f"server refused or unreachable: {e.message}") from None
        if got.get("parked"):
            verbs._job.parked()  # the child runs; its end wakes this run with the answer
            return None
        entry = _memo(verbs, path, op, name, ordinal,
                      {"run_id": got.get("run_id"), "status": got.get("status"),
                       "error": got.get("error"), "output": got.get("output")},
                      int(got.get("exit_code") or 0))
    answer = entry.get("answer") if isinstance(entry.get("answer"), dict) else {}
    if int(entry.get("exit_code") or 0) != 0:
        status, error = answer.get("status") or "failed", answer.get("error") or "no error given"
        raise _error(GRAPH_FAILED, f"{what} (run {answer.get('run_id')}) {status}: {error}")
    return {"ok": True, "output": answer.get("output"), "run_id": answer.get("run_id")}
