"""The durable verbs, served to the script on `$CRYO_SOCKET` (newline-delimited JSON).

One object per pass: it holds the grant's journal, the positions reached so far and
the ordinal of every (family, name), so it can answer replayed calls from the journal
and record new ones through the server.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
from typing import Any, Protocol

from agent.api import AgentAPI, AgentAPIError, StaleClaim

PROTOCOL_VERSION = 1
VERBS = ("hello", "step.begin", "step.finish", "sleep", "annotate")
# A step's recorded stdout travels in one line, so allow big lines.
LINE_LIMIT = 64 << 20


class JobHooks(Protocol):
    """What the verbs need from the job that owns the claim."""

    api: AgentAPI
    run_id: str
    claim_token: str

    async def flush_logs(self) -> None: ...
    def parked(self) -> None: ...
    def stale(self) -> None: ...
    def diverged(self, message: str) -> None: ...
    def ending(self) -> bool: ...


class VerbError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def encode_name(name: str) -> str:
    return name.replace("%", "%25").replace("/", "%2F")


def call_path(family: str, name: str, ordinal: int) -> str:
    return f"{family}/{encode_name(name)}/{ordinal}"


def idempotency_key(run_id: str, path: str) -> str:
    return hashlib.sha256(f"{run_id}/{path}".encode()).hexdigest()[:32]


class DurableVerbs:
    def __init__(self, job: JobHooks, journal: list[dict[str, Any]], *, strict: bool) -> None:
        self._job = job
        self._strict = strict
        self._by_seq: dict[int, dict[str, Any]] = {}
        self._by_path: dict[str, dict[str, Any]] = {}
        for entry in journal:
            self._remember(entry)
        self._position = 0
        self._ordinals: dict[tuple[str, str], int] = {}
        self._open_steps: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- connection handling ----------------------------------------------------------

    async def start(self, path: str) -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(self.handle, path=path, limit=LINE_LIMIT)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
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
                reply = await self.dispatch(_decode(line))
            except VerbError as e:
                reply = _error(e.code, e.message)
                if e.code == "determinism":
                    diverged = e.message
            if reply is not None:
                await _reply(writer, reply)
            if diverged is not None:
                self._job.diverged(diverged)
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

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
        op = req.get("op")
        if op == "hello":
            return {"ok": True, "protocol": PROTOCOL_VERSION, "verbs": list(VERBS)}
        if op not in VERBS:
            raise VerbError("bad_request", f"unknown op {op!r}")
        if self._job.ending():
            raise VerbError("engine", "this pass of the run is ending")
        if op == "step.begin":
            return self._step_begin(req)
        if op == "step.finish":
            return await self._step_finish(req)
        if op == "sleep":
            return await self._sleep(req)
        return await self._annotate(req)

    def _step_begin(self, req: dict[str, Any]) -> dict[str, Any]:
        name = req.get("name")
        label = req.get("label")
        if not isinstance(name, str) or not name:
            raise VerbError("bad_request", "step.begin needs a non-empty string 'name'")
        if label is not None and not isinstance(label, str):
            raise VerbError("bad_request", "step.begin 'label' must be a string or null")
        path, ordinal = self._reach("step", name)
        entry = self._by_path.get(path)
        if entry is not None and entry.get("status") == "done":
            return {
                "ok": True,
                "hit": True,
                "stdout": entry.get("stdout") or "",
                "exit_code": int(entry.get("exit_code") or 0),
            }
        call_id = secrets.token_hex(8)
        self._open_steps[call_id] = {"path": path, "name": name, "ordinal": ordinal, "label": label}
        return {
            "ok": True,
            "hit": False,
            "call_id": call_id,
            "idempotency_key": idempotency_key(self._job.run_id, path),
        }

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
        path, ordinal = self._reach("sleep", "")
        entry = self._by_path.get(path)
        if entry is not None and entry.get("status") == "done":
            return {"ok": True}
        # Output written before the sleep belongs to this pass; the claim ends at park.
        try:
            await self._job.flush_logs()
        except StaleClaim:
            self._job.stale()
            raise VerbError("engine", "the claim on this run was lost") from None
        except AgentAPIError:
            pass  # losing a few log bytes beats failing to park
        await self._engine(
            self._job.api.park(
                self._job.run_id,
                self._job.claim_token,
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
        await self._engine(self._job.api.annotate(self._job.run_id, self._job.claim_token, text))
        return {"ok": True}

    # -- helpers ----------------------------------------------------------------------

    def _reach(self, family: str, name: str) -> tuple[str, int]:
        """Count this call's ordinal and position; in strict mode check it against the journal."""
        key = (family, name)
        ordinal = self._ordinals.get(key, 0)
        self._ordinals[key] = ordinal + 1
        path = call_path(family, name, ordinal)
        position = self._position
        self._position += 1
        if self._strict:
            recorded = self._by_seq.get(position)
            if recorded is not None and recorded.get("path") != path:
                raise VerbError(
                    "determinism",
                    f"determinism error: position {position} was {recorded.get('path')} on "
                    f"the first pass but this pass reached {path}",
                )
        return path, ordinal

    def _remember(self, entry: dict[str, Any]) -> None:
        if entry.get("seq") is not None:
            self._by_seq[int(entry["seq"])] = entry
        if entry.get("path"):
            self._by_path[entry["path"]] = entry

    async def _engine(self, call: Any) -> Any:
        """Await a server call, turning its failures into `engine` replies."""
        try:
            return await call
        except StaleClaim:
            self._job.stale()
            raise VerbError("engine", "the claim on this run was lost") from None
        except AgentAPIError as e:
            raise VerbError("engine", f"server refused or unreachable: {e.message}") from None


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
    except ConnectionError:
        pass
