"""One request per connection to the agent socket ($CRYO_SOCKET), newline-delimited JSON.

Only connecting is retried (CRYO_CONNECT_ATTEMPTS tries, CRYO_CONNECT_BACKOFF_MS doubling).
A request once written is never sent again: if the connection drops, the caller gets
AgentUnavailable and the run's replay is what runs the call again.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

from cryosleep.errors import AgentTooOld, AgentUnavailable, ScriptError

# Ops after which the agent may park the run: it kills the script and never replies.
PARKING_OPS = frozenset(
    {"sleep", "wait.signal", "wait.event", "activity.collect", "activity.wait-all", "lock.acquire",
     "graph.call", "node.call"}
)
# Agent error codes that are infrastructure, not the script's fault.
UNAVAILABLE_CODES = frozenset({"engine"})


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default


def to_json(value: Any, what: str) -> str:
    """Compact JSON of `value`, refused (ScriptError not_json) unless it round-trips."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ScriptError("not_json", f"{what} is not JSON-serialisable: {e}") from None
    if not _same(json.loads(text), value):
        raise ScriptError(
            "not_json",
            f"{what} does not round-trip through JSON (tuples, non-string dict keys and "
            f"other types come back changed): {value!r}",
        )
    return text


def _same(back: Any, value: Any) -> bool:
    """Whether decoded JSON `back` equals `value` with JSON's own types (1 is not True, a
    tuple is not a list, a dict key 1 is not "1")."""
    if value is None or isinstance(value, bool):
        return back is value
    if isinstance(value, (int, float)):
        return isinstance(back, (int, float)) and not isinstance(back, bool) and back == value
    if isinstance(value, str):
        return isinstance(back, str) and back == value
    if isinstance(value, list):
        return (isinstance(back, list) and len(back) == len(value)
                and all(_same(b, v) for b, v in zip(back, value, strict=True)))
    if isinstance(value, dict):
        return (isinstance(back, dict) and list(back) == list(value)
                and all(_same(back[k], value[k]) for k in value))
    return False


class Client:
    """The agent socket of this run; holds the agent's advertised verbs once asked."""

    def __init__(self, socket_path: str | None = None) -> None:
        self._path = socket_path
        self._verbs: list[str] | None = None

    @property
    def path(self) -> str:
        path = self._path if self._path is not None else os.environ.get("CRYO_SOCKET")
        if not path:
            raise ScriptError(
                "outside_run",
                "not inside a run: CRYO_SOCKET is not set (durable calls work only in a "
                "script the agent runs, e.g. `cryopg submit file.py`)",
            )
        return path

    def require(self, verb: str) -> None:
        """Fail at the call site when the agent does not advertise `verb`."""
        if self._verbs is None:
            reply = self.call({"op": "hello"})
            verbs = reply.get("verbs")
            listed = verbs if isinstance(verbs, list) else []
            self._verbs = [v for v in listed if isinstance(v, str)]
        if verb not in self._verbs:
            raise AgentTooOld(verb, self._verbs)

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        path = self.path
        op = str(request.get("op"))
        line = json.dumps(request, separators=(",", ":"), ensure_ascii=False) + "\n"
        if op in PARKING_OPS:
            _flush_stdio()  # this pass's output must reach the log before a park
        sock = _connect(path)
        try:
            try:
                sock.sendall(line.encode("utf-8"))
                data = _read_line(sock)
            except OSError as e:
                raise AgentUnavailable(
                    f"lost the agent connection during {op} ({e.strerror or e})"
                ) from None
        finally:
            sock.close()
        if not data.strip():
            if op in PARKING_OPS:
                _await_kill(op)
            raise AgentUnavailable(f"the agent closed the connection without answering {op}")
        try:
            reply = json.loads(data)
        except ValueError:
            raise AgentUnavailable(f"the agent sent a malformed reply to {op}") from None
        if not isinstance(reply, dict):
            raise AgentUnavailable(f"the agent sent a malformed reply to {op}")
        if reply.get("ok") is not True:
            err = reply.get("error")
            code = str(err.get("code") or "error") if isinstance(err, dict) else "error"
            message = str(err.get("message") or "") if isinstance(err, dict) else ""
            message = message or f"the agent refused {op}"
            if code in UNAVAILABLE_CODES:
                raise AgentUnavailable(message)
            raise ScriptError(code, message)
        return reply


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


def _connect(path: str) -> socket.socket:
    attempts = max(1, _env_int("CRYO_CONNECT_ATTEMPTS", 3))
    backoff = max(0, _env_int("CRYO_CONNECT_BACKOFF_MS", 50)) / 1000
    for attempt in range(attempts):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError as e:
            sock.close()
            if attempt + 1 == attempts:
                raise AgentUnavailable(
                    f"cannot reach the agent at {path} after {attempts} attempt(s) "
                    f"({e.strerror or e})"
                ) from None
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def _await_kill(op: str) -> None:
    """A parked run's script is killed by the agent and never answered: wait for that kill
    rather than return. Still alive after the grace period means the agent went away."""
    grace = max(0, _env_int("CRYO_SUSPEND_GRACE_MS", 5000)) / 1000
    deadline = time.monotonic() + grace
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))
    raise AgentUnavailable(
        f"the agent closed the connection during {op} without answering or stopping the script"
    )
