"""What one pass of a run knows about its durable calls, shared by every verb module.

A pass starts from the grant's journal and counts the calls the script reaches: each
gets an ordinal per (family, name) and a position in call order. socket_server.py (the
step, sleep, annotate and state verbs) and waits.py (the waits) both build on this, so
neither has to import the other's half.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Protocol

from agent.api import AgentAPI, AgentAPIError, ServerUnavailable, StaleClaim

# How long a call the first pass did not make waits, in strict mode, for the call the
# first pass made at its position (see JournalCursor._take_position).
# The clock restarts whenever any call arrives: while concurrent siblings are still
# starting (eight `cryopg ... &` processes on a loaded machine), the pass is progressing.
REPLAY_GRACE_SECONDS = float(os.environ.get("CRYO_REPLAY_GRACE_SECONDS") or 5.0)


class JobHooks(Protocol):
    """What the verbs need from the job that owns the claim."""

    api: AgentAPI
    run_id: str
    claim_token: str
    secret_names: frozenset[str]
    withheld: frozenset[str]

    def mask(self, text: str) -> str: ...
    async def flush_logs(self) -> None: ...
    def parked(self) -> None: ...
    def stale(self) -> None: ...
    def diverged(self, message: str) -> None: ...
    def ending(self) -> bool: ...
    def script_exited(self) -> bool: ...
    def claim_deadline(self) -> float: ...


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
        self._reached: set[str] = set()  # the paths this pass has reached so far
        self._arrived = asyncio.Event()  # set whenever a call is reached
        self._last_arrival = 0.0  # loop time of the latest call reached

    async def _reach(self, family: str, name: str) -> tuple[str, int, int]:
        """Count this call's ordinal and position; in strict mode check it against the
        journal. Returns (path, ordinal, position)."""
        key = (family, name)
        ordinal = self._ordinals.get(key, 0)
        self._ordinals[key] = ordinal + 1
        path = call_path(family, name, ordinal)
        return path, ordinal, await self._take_position(path)

    async def _take_position(self, path: str) -> int:
        """The next position is this call's, returned for the caller to send with the
        call's server request (so the journal keeps this pass's numbering: a call that
        recorded nothing, like a step that raised, leaves a gap instead of shifting every
        later call). A replay answers by identity, so a call the
        journal holds is never refused, whatever position it arrives at: concurrent calls
        reach the agent in a different order on every pass. The per-site guard is for a
        call the journal does not hold: when the first pass recorded another call at this
        position and this pass has not reached that one, the replay went somewhere else.
        That call gets a grace to arrive first (a concurrent sibling may just be late),
        counted from the latest arrival of any call; if it does not, strict mode fails
        the run."""
        position = self._position
        self._position += 1
        self._reached.add(path)
        self._last_arrival = asyncio.get_running_loop().time()
        self._arrived.set()
        if not self._strict or self._recorded(path):
            return position
        recorded = self._by_seq.get(position)
        if recorded is None or not recorded.get("path") or recorded.get("path") == path:
            return position
        other = str(recorded["path"])
        while other not in self._reached:
            if self._job.script_exited():
                # Its group is killed: the sibling will never come, and nobody reads
                # this answer. Dropped like any call in flight at the end of a pass.
                raise VerbError("engine", "the script exited while this call waited")
            left = self._last_arrival + REPLAY_GRACE_SECONDS - asyncio.get_running_loop().time()
            if left <= 0:
                raise VerbError(
                    "determinism",
                    f"determinism error: position {position} was {other} on the first pass "
                    f"but this pass reached {path} there, and never reached {other}",
                )
            self._arrived.clear()
            try:
                async with asyncio.timeout(min(left, 0.1)):  # also looks at script_exited
                    await self._arrived.wait()
            except TimeoutError:
                pass
        return position

    def _recorded(self, path: str) -> bool:
        entry = self._by_path.get(path)
        return entry is not None and entry.get("seq") is not None

    def _remember(self, entry: dict[str, Any]) -> None:
        if entry.get("seq") is not None:
            self._by_seq[int(entry["seq"])] = entry
        if entry.get("path"):
            self._by_path[entry["path"]] = entry

    async def _engine(self, call: Any) -> Any:
        """Await a server call, turning its failures into `engine` replies."""
        try:
            return await call
        except StaleClaim as e:
            self._job.stale(e)
            raise VerbError("engine", "the claim on this run was lost") from None
        except ServerUnavailable as e:
            raise self._unreachable(e) from None
        except AgentAPIError as e:
            raise VerbError("engine", f"server refused or unreachable: {e.message}") from None

    def _unreachable(self, e: ServerUnavailable) -> VerbError:
        """The server stayed away until the claim lapsed (calls retry until then): the
        run may be another agent's by now, so the script is stopped rather than told."""
        self._job.stale()
        return VerbError("engine", f"server unreachable until the claim lapsed: {e.message}")
