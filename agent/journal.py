"""What one pass of a run knows about its durable calls, shared by every verb module.

A pass starts from the grant's journal and counts the calls the script reaches: each
gets an ordinal per (family, name) and a position in call order. socket_server.py (the
step, sleep, annotate and state verbs) and waits.py (the waits) both build on this, so
neither has to import the other's half.
"""

from __future__ import annotations

from typing import Any, Protocol

from agent.api import AgentAPI, AgentAPIError, StaleClaim


class JobHooks(Protocol):
    """What the verbs need from the job that owns the claim."""

    api: AgentAPI
    run_id: str
    claim_token: str
    secret_names: frozenset[str]
    withheld: frozenset[str]

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


class JournalCursor:
    """The journal of one pass: recorded entries by seq and by path, and the ordinals and
    position reached so far."""

    def __init__(self, job: JobHooks, journal: list[dict[str, Any]], *, strict: bool) -> None:
        self._job = job
        self._strict = strict
        self._by_seq: dict[int, dict[str, Any]] = {}
        self._by_path: dict[str, dict[str, Any]] = {}
        for entry in journal:
            self._remember(entry)
        self._position = 0
        self._ordinals: dict[tuple[str, str], int] = {}

    def _reach(self, family: str, name: str) -> tuple[str, int]:
        """Count this call's ordinal and position; in strict mode check it against the journal."""
        key = (family, name)
        ordinal = self._ordinals.get(key, 0)
        self._ordinals[key] = ordinal + 1
        path = call_path(family, name, ordinal)
        self._take_position(path)
        return path, ordinal

    def _take_position(self, path: str) -> None:
        """The next position is this call's; in strict mode it must be the recorded one."""
        position = self._position
        self._position += 1
        self._job.api.position = position
        if self._strict:
            recorded = self._by_seq.get(position)
            if recorded is not None and recorded.get("path") != path:
                raise VerbError(
                    "determinism",
                    f"determinism error: position {position} was {recorded.get('path')} on "
                    f"the first pass but this pass reached {path}",
                )

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
