"""What every in-script verb shares: the agent socket client, running a step, and the
parsing of durations and values.

A lower module of the fast path (inscript.py and inscript_waits.py both use it, so
neither imports the other for it). Cheap imports only, like theirs: json, socket and
subprocess come through lean.py.
"""

import os
import sys
import time
from errno import ENOEXEC

from cryopg.cli import lean

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


# The handles an agent gives a job. A step body keeps only the last: it makes no
# durable calls of its own, but is still inside a run.
RUN_MARKERS = ("CRYO_SOCKET", "CRYO_RUN_ID", "CRYO_INPUT_FILE", "CRYO_IDEMPOTENCY_KEY")


def inside_run() -> bool:
    return any(os.environ.get(name) for name in RUN_MARKERS)


class UsageError(Exception):
    pass


# What the engine or agent refused as bad input (a reserved `_cryo/` key, a value out of
# range, a malformed request): a refusal, which exits 2 as a usage error does, not 1
# (something broke).
REFUSALS = frozenset({"reserved_key", "invalid_argument", "bad_request"})


class AgentError(Exception):
    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code

    @property
    def exit_code(self) -> int:
        return 2 if self.code in REFUSALS else 1


def parse_duration(text: str) -> float:
    """'2s', '5m', '1h', '1d', '1.5s', '500ms' or a bare number of seconds -> seconds."""
    raw = str(text).strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)].strip()
    # Digits and at most one dot only: rejects '', '-1', 'inf', 'nan', '1e3', '1h30m'.
    if number.replace(".", "", 1).isdigit() and number.isascii():
        return float(number) * _UNITS.get(unit, 1.0)
    raise ValueError(
        f"invalid duration {text!r}: expected a non-negative number with an optional "
        "unit ms, s, m, h or d (e.g. 30s, 5m, 1.5h, 500ms)"
    )


def parse_value(text: str) -> object:
    """The one rule for a VALUE argument (state set/add/cas, emit, output set, signal),
    inside a run and outside alike: text that parses as JSON is that JSON value; any
    other text is the string itself (`hello` is "hello"). Two exceptions are refused
    with UsageError rather than guessed at: text that starts like a JSON object, array
    or string (`{`, `[` or `"`) but does not parse, and a JSON number too large to carry
    (1e999). NaN and Infinity are not JSON, so they are the strings "NaN", "Infinity"."""
    def refuse(constant: str) -> object:
        raise ValueError(constant)  # NaN / Infinity are not JSON

    try:
        value = lean.loads(text, parse_constant=refuse)
    except RecursionError:
        raise UsageError(f"value {_clip(text)} is nested too deep") from None
    except ValueError:
        if text.lstrip(" \t\n\r")[:1] in ("{", "[", '"'):
            raise UsageError(f"value {_clip(text)} looks like JSON but is not valid JSON; "
                             "fix it, or quote it as a JSON string") from None
        return text
    if not _finite(value):
        raise UsageError(f"value {_clip(text)} holds a number too large for JSON "
                         "(only finite numbers can be stored)")
    return value


def _clip(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return value - value == 0.0  # false for inf and nan
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def format_value(value: object) -> str:
    """How `state get` prints a value: a string bare, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return lean.dumps(value, compact=True)


def agent_socket(verb: str) -> str:
    path = os.environ.get("CRYO_SOCKET")
    if not path:
        if inside_run():
            raise UsageError("no agent socket here: this is a step's body, and a durable "
                             "call cannot be made inside a step (steps do not nest)")
        raise UsageError("not inside a run (CRYO_SOCKET is not set)")
    return path


def run_step(socket_path: str, name: str, label: str | None, needs: list[str],
             command: list[str]) -> int:
    """`cryopg step`: a recorded step prints its recorded stdout; a new one runs COMMAND
    and records what it printed and its exit code."""
    request: dict[str, object] = {"op": "step.begin", "name": name, "label": label}
    if needs:  # the agent fails the run when one was withheld or is not set
        request["secrets"] = needs
    reply = call(socket_path, request)
    if reply.get("hit"):
        write_stdout(reply.get("stdout") or "")
        return int(reply.get("exit_code") or 0)

    # The body gets no agent handles (a nested verb must fail loudly), only its key.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYO_")}
    env["CRYO_IDEMPOTENCY_KEY"] = str(reply.get("idempotency_key") or "")
    sys.stdout.flush()
    try:  # echoed as it comes: a long step's output is on the log while it runs
        try:
            raw, code = lean.run_captured(command, env, echo_fd=1)
        except OSError as e:
            # A script without a `#!` line: run by /bin/sh, as a shell (or execvp) would.
            script = lean.shell_script(command, env) if e.errno == ENOEXEC else None
            if script is None:
                raise
            raw, code = lean.run_captured(script, env, echo_fd=1)
        if code < 0:
            code = 128 - code  # killed by signal N -> 128+N, as a shell reports it
    except FileNotFoundError:
        print(f"cryopg step: command not found: {command[0]}", file=sys.stderr)
        raw, code = b"", 127
    except PermissionError:
        print(f"cryopg step: permission denied: {command[0]}", file=sys.stderr)
        raw, code = b"", 126
    except OSError as e:  # exec format error and the like: it could not start at all
        print(f"cryopg step: cannot run {command[0]}: {(e.strerror or str(e)).lower()}",
              file=sys.stderr)
        raw, code = b"", 127
    # Recorded as text; replays print the recorded text, as this pass printed it live.
    stdout = raw.decode("utf-8", errors="replace")
    call(
        socket_path,
        {"op": "step.finish", "call_id": reply.get("call_id"), "stdout": stdout, "exit_code": code},
    )
    return code


def write_stdout(text: str) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.buffer.flush()


def call(socket_path: str, request: dict[str, object]) -> dict[str, object]:
    """Send one request line and read one reply line; raise AgentError on any failure."""
    sock = _connect(socket_path)
    try:
        sock.sendall(lean.dumps(request).encode("utf-8") + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    except OSError as e:
        raise AgentError(f"lost the agent connection ({e.strerror or e})") from None
    finally:
        sock.close()
    data = b"".join(chunks)
    if not data.strip():
        raise AgentError("the agent closed the connection without a reply")
    try:
        reply = lean.loads(data)
    except ValueError:
        raise AgentError("the agent sent a malformed reply") from None
    if not isinstance(reply, dict):
        raise AgentError("the agent sent a malformed reply")
    if not reply.get("ok"):
        err = reply.get("error")
        message = err.get("message") if isinstance(err, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        raise AgentError(str(message or "the agent refused the request"),
                         code if isinstance(code, str) else None)
    return reply


def _connect(socket_path: str) -> lean.Socket:
    # Only connecting is retried (an agent may be busy accepting); a sent request never is.
    attempts = max(1, _int_env("CRYO_CONNECT_ATTEMPTS", 3))
    backoff = _int_env("CRYO_CONNECT_BACKOFF_MS", 50) / 1000
    for attempt in range(attempts):
        sock = lean.unix_socket()
        try:
            sock.connect(socket_path)
            return sock
        except OSError as e:
            sock.close()
            transient = isinstance(e, (ConnectionRefusedError, BlockingIOError))
            if not transient or attempt + 1 == attempts:
                raise AgentError(
                    f"cannot reach the agent at {socket_path} ({e.strerror or e})"
                ) from None
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, ""))
    except ValueError:
        return default
