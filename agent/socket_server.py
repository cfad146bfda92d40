"""The durable verbs, served to the script on `$CRYO_SOCKET` (newline-delimited JSON).

One object per pass, a JournalCursor (journal.py): it holds the grant's journal, the
positions reached so far and the ordinal of every (family, name), so it can answer
replayed calls from the journal and record new ones through the server. The waits are
served by waits.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
import sys
import time
from typing import Any

from agent import waits
from agent.api import (
    AgentAPIError,
    ServerUnavailable,
    StaleClaim,
    retry_until,
)
from agent.artifacts import ARTIFACT_OPS, ArtifactCalls
from agent.journal import JobHooks, JournalCursor, VerbError, call_path
from agent.waits import WAIT_OPS
from cryopg import tracing

PROTOCOL_VERSION = 1
STATE_VERBS = (
    "state.get",
    "state.list",
    "state.set",
    "state.delete",
    "state.add",
    "state.cas",
    "state.incr",
)
VERBS = ("hello", "step.begin", "step.finish", "sleep", "annotate", *STATE_VERBS, *WAIT_OPS,
         *ARTIFACT_OPS)
# Server refusals of a state call that the script should see as they are (exit 1).
STATE_REFUSALS = frozenset({"reserved_key", "invalid_argument", "not_a_number"})
# Verb errors that fail the whole run (the script is stopped).
RUN_FAILING = frozenset({"determinism", "secret_withheld", "secret_missing"})
# A step's recorded stdout travels in one line, so allow big lines.
LINE_LIMIT = 64 << 20


def _settled(task: asyncio.Task[Any]) -> None:
    """A marker's failure is no reason to fail the step: its record is what counts (and
    reports a lost claim itself)."""
    if not task.cancelled():
        task.exception()


MARK_AFTER = 0.05


def idempotency_key(run_id: str, path: str) -> str:
    return hashlib.sha256(f"{run_id}/{path}".encode()).hexdigest()[:32]


class DurableVerbs(JournalCursor):
    def __init__(self, job: JobHooks, journal: list[dict[str, Any]], *, strict: bool) -> None:
        super().__init__(job, journal, strict=strict)
        self._open_steps: dict[str, dict[str, Any]] = {}
        self._adds_reached: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- connection handling ----------------------------------------------------------

    async def start(self, path: str) -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(self.handle, path=path, limit=LINE_LIMIT)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        # This connection's server calls wait out an outage for as long as the claim
        # may still be live, never less (the script must not see infrastructure trouble).
        retry_until(self._job.claim_deadline)
        try:
            try:
                line = await reader.readline()
            except (ValueError, ConnectionError):  # over the limit, or the client vanished
                await _reply(writer, _error("bad_request", "request line too long or cut"))
                return
            if not line.strip():
                return
            diverged: str | None = None
            try:
                req = _decode(line)
                if req.get("op") in ARTIFACT_OPS:  # bytes follow the line (artifacts.py)
                    reply = await self._artifact(req, reader, writer)
                else:
                    reply = await self.dispatch(req)
            except VerbError as e:
                reply = _error(e.code, e.message)
                if e.code in RUN_FAILING:
                    diverged = e.message
            except Exception as e:  # noqa: BLE001 - one line, never a task traceback
                reply = self._unexpected(line, e)
            if reply is not None:
                await _reply(writer, reply)
            if diverged is not None:
                self._job.diverged(diverged)
        except asyncio.CancelledError:
            pass  # the pass ended (park, cancel, lost claim) with this call in flight
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    def _unexpected(self, line: bytes, e: Exception) -> dict[str, Any] | None:
        """A call that failed in a way no verb expects: a pass that is ending anyway
        (the session or socket went away under it) is dropped quietly; otherwise the
        agent logs one line and the script gets an `engine` error."""
        if self._job.ending():
            return None
        op = _op_of(line)
        print(f"cryopg agent: run {self._job.run_id}: {op} failed: {type(e).__name__}: {e}",
              file=sys.stderr)
        return _error("engine", f"the agent could not serve {op}: {type(e).__name__}")

    async def settle(self, timeout: float) -> None:
        """Let calls already in flight finish (the script may exit while one is recorded)."""
        pending = [t for t in self._tasks if t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def cancel_all(self) -> None:
        for t in list(self._tasks):
            if t is not asyncio.current_task():
                t.cancel()

    # -- the verbs --------------------------------------------------------------------

    async def dispatch(self, req: dict[str, Any]) -> dict[str, Any] | None:
        """One verb; with tracing on, a span of the pass (a step, a wait, a state call)."""
        if not tracing.enabled() or req.get("op") == "hello":
            return await self._dispatch(req)
        name = req.get("name") if isinstance(req.get("name"), str) else None
        with tracing.span(f"cryopg {req.get('op')}", getattr(self._job, "traceparent", None),
                          run_id=self._job.run_id, name=name):
            return await self._dispatch(req)

    async def _dispatch(self, req: dict[str, Any]) -> dict[str, Any] | None:
        op = req.get("op")
        if op == "hello":
            return {"ok": True, "protocol": PROTOCOL_VERSION, "verbs": list(VERBS)}
        if op not in VERBS:
            raise VerbError("bad_request", f"unknown op {op!r}")
        if self._job.ending():
            raise VerbError("engine", "this pass of the run is ending")
        if op == "step.begin":
            return await self._step_begin(req)
        if op == "step.finish":
            return await self._step_finish(req)
        if op == "sleep":
            return await self._sleep(req)
        if op in STATE_VERBS:
            return await self._state(op.removeprefix("state."), req)
        if op in WAIT_OPS:
            return await waits.dispatch(self, op, req)
        return await self._annotate(req)

    async def _artifact(self, req: dict[str, Any], reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> dict[str, Any] | None:
        if self._job.ending():
            raise VerbError("engine", "this pass of the run is ending")
        calls = ArtifactCalls(self._job)
        if req["op"] == "artifact.put":
            return await calls.put(req, reader)
        if req["op"] == "artifact.get":
            await calls.get(req, writer)
            return None
        return await calls.list(req)

    async def _step_begin(self, req: dict[str, Any]) -> dict[str, Any]:
        name = req.get("name")
        label = req.get("label")
        if not isinstance(name, str) or not name:
            raise VerbError("bad_request", "step.begin needs a non-empty string 'name'")
        if label is not None and not isinstance(label, str):
            raise VerbError("bad_request", "step.begin 'label' must be a string or null")
        # A secret in a step's name or label is masked before the journal (and every
        # replay, which masks the same way) sees it.
        name, label = self._job.mask(name), None if label is None else self._job.mask(label)
        self._check_secrets(name, req.get("secrets"))
        path, ordinal, position = await self._reach("step", name)
        entry = self._by_path.get(path)
        if entry is not None and entry.get("status") == "done":
            return {
                "ok": True,
                "hit": True,
                "stdout": entry.get("stdout") or "",
                "exit_code": int(entry.get("exit_code") or 0),
            }
        call_id = secrets.token_hex(8)
        # The marker that shows this step as running is pinned only for a step still
        # running after MARK_AFTER seconds (what a person watching could see), and never
        # on the script's path: the two commute (a marker landing after its step's memo
        # finds the path taken and changes nothing), so a quick step costs nothing extra.
        mark = asyncio.create_task(self._mark_if_still_running(
            call_id, position=position, path=path, name=name, ordinal=ordinal))
        self._tasks.add(mark)
        mark.add_done_callback(self._tasks.discard)
        mark.add_done_callback(_settled)
        self._open_steps[call_id] = {"path": path, "name": name, "ordinal": ordinal, "label": label,
                                     "position": position, "started": time.time()}
        return {
            "ok": True,
            "hit": False,
            "call_id": call_id,
            "idempotency_key": idempotency_key(self._job.run_id, path),
        }

    def _check_secrets(self, step: str, wanted: Any) -> None:
        """A step declares the secrets it needs (`cryopg step NAME --secret S`). One the
        run did not get fails the run, so the step never runs without it."""
        if wanted is None:
            return
        if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
            raise VerbError("bad_request", "step.begin 'secrets' must be a list of names")
        for name in wanted:
            if name in self._job.withheld:
                raise VerbError(
                    "secret_withheld",
                    f"step {step!r} needs secret {name}, which was withheld: this run is "
                    "untrusted and gets no secrets",
                )
            if name not in self._job.secret_names:
                raise VerbError(
                    "secret_missing",
                    f"step {step!r} needs secret {name}, which is not set in this project "
                    "(cryopg secret set)",
                )

    async def _mark_if_still_running(self, call_id: str, *, position: int | None, path: str,
                                     name: str, ordinal: int) -> None:
        await asyncio.sleep(MARK_AFTER)
        if call_id in self._open_steps:
            await self._job.api.mark_step(self._job.run_id, self._job.claim_token,
                                          position=position, path=path, name=name,
                                          ordinal=ordinal)

    async def _step_finish(self, req: dict[str, Any]) -> dict[str, Any]:
        stdout = req.get("stdout")
        exit_code = req.get("exit_code")
        if not isinstance(stdout, str):
            raise VerbError("bad_request", "step.finish needs a string 'stdout'")
        if not isinstance(exit_code, int) or isinstance(exit_code, bool):
            raise VerbError("bad_request", "step.finish needs an integer 'exit_code'")
        call = self._open_steps.pop(str(req.get("call_id")), None)
        if call is None:
            raise VerbError("bad_request", f"unknown call_id {req.get('call_id')!r}")
        seq = await self._engine(
            self._job.api.record_step(
                self._job.run_id,
                self._job.claim_token,
                path=call["path"],
                family="step",
                name=call["name"],
                ordinal=call["ordinal"],
                label=call["label"],
                stdout=stdout,
                exit_code=exit_code,
                position=call["position"],
                started_at=call["started"],
            )
        )
        self._remember(
            {
                "seq": seq,
                "path": call["path"],
                "family": "step",
                "name": call["name"],
                "ordinal": call["ordinal"],
                "status": "done",
                "stdout": stdout,
                "exit_code": exit_code,
            }
        )
        return {"ok": True}

    async def _sleep(self, req: dict[str, Any]) -> dict[str, Any] | None:
        seconds = req.get("seconds")
        if (
            not isinstance(seconds, (int, float))
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise VerbError("bad_request", "sleep needs a non-negative number 'seconds'")
        path, ordinal, position = await self._reach("sleep", "")
        entry = self._by_path.get(path)
        if entry is not None and entry.get("status") == "done":
            return {"ok": True}
        await waits.flush_before_park(self)
        await self._engine(
            self._job.api.park(
                self._job.run_id,
                self._job.claim_token,
                position=position,
                path=path,
                ordinal=ordinal,
                seconds=seconds,
            )
        )
        self._job.parked()  # kills the script: it gets no reply
        return None

    async def _annotate(self, req: dict[str, Any]) -> dict[str, Any]:
        text = req.get("text")
        if not isinstance(text, str):
            raise VerbError("bad_request", "annotate needs a string 'text'")
        await self._engine(self._job.api.annotate(self._job.run_id, self._job.claim_token,
                                                  self._job.mask(text)))
        return {"ok": True}

    async def _state(self, op: str, req: dict[str, Any]) -> dict[str, Any]:
        """Durable state. get/list/set/delete are plain reads and writes, asked afresh on
        every pass. add, cas and incr are durable calls: add is keyed by the cell (a second
        add of one cell in a pass shares the first answer), cas and incr by `as` (default
        the key), which a run may use once; a replay answers from the journal."""
        entity = req.get("entity")
        if entity is not None and (not isinstance(entity, str) or not entity):
            raise VerbError("bad_request", "'entity' must be a non-empty string or null")
        fields: dict[str, Any] = {"entity": entity, **_trust_opt_ins(req)}
        if op == "list":
            return {"ok": True, **await self._state_call(op, fields)}
        key = req.get("key")
        if not isinstance(key, str) or not key:
            raise VerbError("bad_request", f"state.{op} needs a non-empty string 'key'")
        fields["key"] = key
        if op in ("get", "delete"):
            return {"ok": True, **await self._state_call(op, fields)}
        if op == "set":
            if "value" not in req:
                raise VerbError("bad_request", "state.set needs a 'value'")
            return {"ok": True, **await self._state_call(op, {**fields, "value": req["value"]})}
        if op == "add":
            name = f"entity:{entity}:{key}" if entity else f"run:{key}"
            path = call_path("state.add", name, 0)
            position = None  # a second add of the cell in this pass shares the first's
            if path not in self._adds_reached:
                self._adds_reached.add(path)
                position = await self._take_position(path)
            entry = self._by_path.get(path)
            if entry is None or entry.get("status") != "done":
                reply = await self._state_call(
                    op,
                    {**fields, "value": req.get("value", True), "path": path, "name": name,
                     "ordinal": 0, "position": position},
                )
                entry = _memo(path, "state.add", name, 0 if reply.get("claimed") else 3)
                self._remember(entry)
            return {"ok": True, "claimed": entry.get("exit_code") == 0}
        name = req.get("as")
        name = key if name is None else name
        if not isinstance(name, str) or not name:
            raise VerbError("bad_request", f"state.{op} 'as' must be a non-empty string")
        if op == "cas":
            expect = req.get("expect")
            if not isinstance(expect, int) or isinstance(expect, bool) or expect < 1:
                raise VerbError("bad_request", "state.cas needs an integer 'expect' >= 1")
            if "value" not in req:
                raise VerbError("bad_request", "state.cas needs a 'value'")
            fields.update(value=req["value"], expect=expect)
        else:
            by = req.get("by", 1)
            if not isinstance(by, (int, float)) or isinstance(by, bool) or not math.isfinite(by):
                raise VerbError("bad_request", "state.incr 'by' must be a finite number")
            fields["by"] = by
        family = f"state.{op}"
        if self._ordinals.get((family, name), 0) > 0:
            raise VerbError(
                "bad_request",
                f"the name {name!r} was already used by a state {op} in this run; give each "
                "attempt its own --as NAME",
            )
        path, ordinal, position = await self._reach(family, name)
        entry = self._by_path.get(path)
        if entry is None or entry.get("status") != "done":
            reply = await self._state_call(
                op, {**fields, "path": path, "name": name, "ordinal": ordinal,
                     "position": position}
            )
            if op == "cas":
                entry = _memo(path, family, name, 0 if reply.get("swapped") else 3)
            else:
                answer = {"value": reply.get("value"), "version": reply.get("version")}
                entry = _memo(path, family, name, 0, json.dumps(answer["value"]), answer)
            self._remember(entry)
        if op == "cas":
            return {"ok": True, "swapped": entry.get("exit_code") == 0}
        answer = entry.get("answer")
        if not isinstance(answer, dict):  # an older memo: the total is its printed stdout
            answer = {"value": json.loads(entry.get("stdout") or "0"), "version": None}
        return {"ok": True, "value": answer.get("value"), "version": answer.get("version")}

    async def _state_call(self, op: str, fields: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._job.api.state(self._job.run_id, self._job.claim_token, op, **fields)
        except StaleClaim:
            self._job.stale()
            raise VerbError("engine", "the claim on this run was lost") from None
        except ServerUnavailable as e:
            raise self._unreachable(e) from None
        except AgentAPIError as e:
            if e.code in STATE_REFUSALS:
                raise VerbError(e.code, e.message) from None
            raise VerbError("engine", f"server refused or unreachable: {e.message}") from None


def _trust_opt_ins(req: dict[str, Any]) -> dict[str, bool]:
    """`public` (a trusted set publishing its cell) and `tainted` (a trusted read of what
    untrusted runs wrote), passed on when true; the server decides what they mean for
    this run (docs/security/trust.md)."""
    out: dict[str, bool] = {}
    for opt in ("public", "tainted"):
        value = req.get(opt)
        if value is not None and not isinstance(value, bool):
            raise VerbError("bad_request", f"'{opt}' must be true, false or null")
        if value:
            out[opt] = True
    return out


def _memo(
    path: str, family: str, name: str, exit_code: int, stdout: str = "", answer: Any = None
) -> dict[str, Any]:
    """A journal entry for a state answer recorded in this pass (shaped like the grant's)."""
    entry = {"path": path, "family": family, "name": name, "ordinal": 0, "status": "done",
             "stdout": stdout, "exit_code": exit_code}
    if answer is not None:
        entry["answer"] = answer
    return entry


def _op_of(line: bytes) -> str:
    try:
        return str(json.loads(line).get("op"))
    except (ValueError, AttributeError):
        return "a request"


def _decode(line: bytes) -> dict[str, Any]:
    try:
        req = json.loads(line)
    except ValueError:
        raise VerbError("bad_request", "request is not valid JSON") from None
    if not isinstance(req, dict):
        raise VerbError("bad_request", "request must be a JSON object")
    return req


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


async def _reply(writer: asyncio.StreamWriter, reply: dict[str, Any]) -> None:
    try:
        writer.write(json.dumps(reply).encode() + b"\n")
        await writer.drain()
    except (ConnectionError, RuntimeError):  # the script went away, or the transport closed
        pass
