"""The durable verbs, as functions: `from cryosleep import script`.

Every function is one request to the agent that runs this script. A durable call
returns its recorded answer on replay instead of acting again. Calls that wait (sleep,
the waits, activity collect / wait-all, lock, call_graph / call_node) may park the run:
the agent then stops this process, so on that pass the call never returns, and the run
replays from the top when the wait is over. Do not wrap them in a broad `except`;
nothing they could raise there is worth carrying on from.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from cryosleep._client import Client, to_json
from cryosleep.errors import (
    AgentTooOld,
    AgentUnavailable,
    CryoError,
    ScriptError,
    StepFailed,
    WaitEventTimeout,
    WaitSignalTimeout,
    WaitTimeout,
)

__all__ = [
    "AgentTooOld", "AgentUnavailable", "CryoError", "ScriptError", "StateCell", "StepFailed",
    "StepResult", "WaitEventTimeout", "WaitSignalTimeout", "WaitTimeout",
    "activity", "activity_collect", "activity_collect_unchecked", "activity_submit",
    "activity_wait_all", "annotate", "call_graph", "call_node", "emit", "input", "lock",
    "output_set", "seconds", "sleep", "spawn",
    "state_add", "state_cas", "state_cell", "state_delete", "state_get", "state_incr",
    "state_list", "state_set", "step", "step_fn", "step_unchecked", "wait_event", "wait_signal",
]

T = TypeVar("T")
Number = int | float

_client = Client()


def _use(client: Client) -> Client:
    """Swap the process's client (tests do, to start from a fresh `hello`)."""
    global _client
    previous, _client = _client, client
    return previous


@dataclass(frozen=True)
class StepResult:
    """What an unchecked step or activity gives back instead of raising."""

    exit_code: int
    stdout: str


@dataclass(frozen=True)
class StateCell:
    key: str
    value: Any
    version: int


# -- steps ------------------------------------------------------------------------------


def step_fn(name: str, fn: Callable[[], T], *, label: str | None = None) -> T:
    """Run `fn` once and record its JSON result under `name`; on replay return the
    recorded value without running it. A raising `fn` records nothing (its exception
    propagates), so the next attempt runs it again. The result must round-trip through
    JSON (ScriptError `not_json` otherwise); the decoded copy is returned, so the first
    pass and every replay see equal values. Shares its names with `step`."""
    reply = _client.call({"op": "step.begin", "name": name, "label": label})
    if reply.get("hit"):
        code = int(reply.get("exit_code") or 0)
        stdout = str(reply.get("stdout") or "")
        if code != 0:
            raise StepFailed(name, code, stdout)
        try:
            return json.loads(stdout)  # type: ignore[no-any-return]
        except ValueError:
            raise ScriptError(
                "not_json",
                f"step {name!r} was recorded by a command step, not step_fn: its output is "
                "not JSON",
            ) from None
    value = fn()
    text = to_json(value, f"the value step_fn {name!r} returned")
    _client.call({"op": "step.finish", "call_id": reply.get("call_id"), "stdout": text,
                  "exit_code": 0})
    return json.loads(text)  # type: ignore[no-any-return]


def step(name: str, command: Sequence[str] | str, *, label: str | None = None) -> str:
    """Run `command` once as a durable step and return its stdout (recorded with its exit
    code; replays return the recording). Non-zero: StepFailed. A string runs in `sh -c`."""
    result = step_unchecked(name, command, label=label)
    if result.exit_code != 0:
        raise StepFailed(name, result.exit_code, result.stdout)
    return result.stdout


def _shell_script(argv: list[str], env: dict[str, str]) -> list[str] | None:
    """["/bin/sh", PATH, args...] for a text file (no NUL in its first line, bash's test)
    that exec refused with ENOEXEC; None for anything else."""
    path = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    try:
        with open(path or "", "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    return None if b"\0" in head.split(b"\n", 1)[0] else ["/bin/sh", str(path), *argv[1:]]


def step_unchecked(name: str, command: Sequence[str] | str, *,
                   label: str | None = None) -> StepResult:
    """`step` that returns the exit code (and stdout) instead of raising StepFailed."""
    argv = ["sh", "-c", command] if isinstance(command, str) else [str(a) for a in command]
    if not argv:
        raise ScriptError("bad_request", f"step {name!r} needs a command")
    reply = _client.call({"op": "step.begin", "name": name, "label": label})
    if reply.get("hit"):
        return StepResult(int(reply.get("exit_code") or 0), str(reply.get("stdout") or ""))
    # The command gets no agent handles (a nested durable call must fail), only its key.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYO_")}
    env["CRYO_IDEMPOTENCY_KEY"] = str(reply.get("idempotency_key") or "")
    try:
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, env=env, check=False)
        except OSError as e:
            # A script without a `#!` line: /bin/sh reads it, as a shell (or execvp) would.
            if e.errno != errno.ENOEXEC or (script := _shell_script(argv, env)) is None:
                raise
            done = subprocess.run(script, stdout=subprocess.PIPE, env=env, check=False)
        raw, code = done.stdout, done.returncode
        if code < 0:
            code = 128 - code  # killed by signal N reads as 128+N, as in a shell
    except FileNotFoundError:
        raw, code = b"", 127
    except PermissionError:
        raw, code = b"", 126
    except OSError:  # a binary the kernel refuses (exec format error) and the like
        raw, code = b"", 127
    stdout = raw.decode("utf-8", errors="replace")
    _client.call({"op": "step.finish", "call_id": reply.get("call_id"), "stdout": stdout,
                  "exit_code": code})
    return StepResult(code, stdout)


# -- waiting ----------------------------------------------------------------------------


# A duration: a string with its unit as the CLI takes it ("30s", "5m", "1.5h", "500ms";
# no unit is seconds), or a datetime.timedelta. Across the SDKs a bare number is
# milliseconds (TypeScript's sleep(ms), timeoutMs); this SDK took it as seconds before,
# so it refuses one rather than let an old sleep(5) silently become 5 ms.
Duration = str | dt.timedelta
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(value: Duration, what: str = "duration") -> float:
    """A duration in seconds, as the agent takes it: a string with an optional unit ms,
    s, m, h or d ("30s", "5m", "1.5h", "500ms", "10") or a timedelta. A bare number, a
    malformed string or another type is ScriptError bad_request."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds()  # checked by the agent, as every SDK's numbers are
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ScriptError("bad_request", f"{what} {value!r} has no unit: write "
                          f"'{value}s' or '{value}ms' (or a timedelta). A bare number is "
                          "milliseconds in the TypeScript SDK and was seconds here, so it "
                          "is refused rather than guessed")
    if isinstance(value, str):
        raw = value.strip().lower()
        unit = next((u for u in ("ms", "s", "m", "h", "d") if raw.endswith(u)), "")
        number = raw[: len(raw) - len(unit)].strip()
        if number.replace(".", "", 1).isdigit() and number.isascii():
            return float(number) * _UNITS.get(unit, 1.0)
    raise ScriptError("bad_request", f"{what} must be a duration like 30s, 5m, 1.5h, 500ms "
                      f"or a timedelta; got {value!r}")


def sleep(duration: Duration) -> None:
    """Park the run for `duration` ("5m", "500ms" or a timedelta; the agent is freed);
    returns on the pass after it."""
    _client.call({"op": "sleep", "seconds": seconds(duration, "sleep")})


def wait_signal(name: str, *, timeout: Duration | None = None) -> Any:
    """Wait for the next signal `name` sent to this run and return its payload. With a
    timeout ("1s" or a timedelta), WaitSignalTimeout when none arrived by then."""
    return _wait("signal", name, timeout)


def wait_event(name: str, *, timeout: Duration | None = None, tainted: bool = False) -> Any:
    """Wait for the next project bus event `name` published after the wait began and return
    its payload. With a timeout ("1s" or a timedelta), WaitEventTimeout when
    none arrived by then. A trusted run hears untrusted runs' events only with
    tainted=True (docs/security/trust.md); an untrusted run hears those and published ones."""
    return _wait("event", name, timeout, {"tainted": True} if tainted else {})


def _wait(kind: str, name: str, given: Duration | None,
          extra: dict[str, Any] | None = None) -> Any:
    op = f"wait.{kind}"
    timeout = None if given is None else seconds(given, "timeout")
    if timeout is not None:
        _client.require(op)
    reply = _client.call({"op": op, "name": name, "timeout": timeout, **(extra or {})})
    if reply.get("timed_out"):
        error = WaitSignalTimeout if kind == "signal" else WaitEventTimeout
        raise error(name, float(timeout or 0))
    return reply.get("payload")


@contextmanager
def lock(group: str) -> Iterator[None]:
    """Hold the project's lease `group` for the block; runs wait FIFO (parked) for it.
    Released when the block ends, also by an exception."""
    _client.call({"op": "lock.acquire", "group": group, "scoped": True})
    try:
        yield
    finally:
        _client.call({"op": "lock.release", "group": group})


# -- activities -------------------------------------------------------------------------


def activity_submit(name: str, argv: Sequence[str], *, retries: int | None = None,
                    retry_backoff: Duration | None = None,
                    retry_on_exit: Sequence[int] | None = None) -> str:
    """Start `argv` as a child job named `name` (unique per run) and return its run id.
    retries: extra attempts after a failure, retry_backoff ("2s", a timedelta) apart, only for exit
    codes in retry_on_exit when given."""
    request: dict[str, Any] = {"op": "activity.submit", "name": name,
                               "argv": [str(a) for a in argv]}
    if retries is not None:
        request["retries"] = retries
    if retry_backoff is not None:
        request["retry_backoff"] = seconds(retry_backoff, "retry_backoff")
    if retry_on_exit is not None:
        request["retry_on"] = [int(c) for c in retry_on_exit]
    return str(_client.call(request).get("run_id"))


def activity_collect(name: str) -> str:
    """Wait for activity `name` and return its output (its last attempt's log);
    StepFailed when it failed (130: cancelled)."""
    result = activity_collect_unchecked(name)
    if result.exit_code != 0:
        raise StepFailed(name, result.exit_code, result.stdout, what="activity")
    return result.stdout


def activity_collect_unchecked(name: str) -> StepResult:
    """`activity_collect` that returns the exit code instead of raising."""
    reply = _client.call({"op": "activity.collect", "name": name})
    return StepResult(int(reply.get("exit_code") or 0), str(reply.get("stdout") or ""))


def activity_wait_all() -> int:
    """Wait for every activity submitted and not yet collected; return how many failed."""
    _client.require("activity.wait-all")
    return int(_client.call({"op": "activity.wait-all"}).get("failed") or 0)


def activity(name: str, argv: Sequence[str], *, retries: int | None = None,
             retry_backoff: Duration | None = None,
             retry_on_exit: Sequence[int] | None = None) -> str:
    """Submit, wait for and collect one activity (see activity_submit / activity_collect)."""
    activity_submit(name, argv, retries=retries, retry_backoff=retry_backoff,
                    retry_on_exit=retry_on_exit)
    return activity_collect(name)


# -- events, children, notes, outputs ---------------------------------------------------


def emit(name: str, payload: Any = None, *, public: bool = False) -> None:
    """Publish event `name` on the project bus (once: replays do not publish again). With
    public=True a trusted run's event reaches untrusted runs waiting on it too."""
    to_json(payload, f"the payload of event {name!r}")
    _client.call({"op": "emit", "name": name, "payload": payload,
                  **({"public": True} if public else {})})


def spawn(path: str | os.PathLike[str], *, input: Any = None,
          interpreter: str | None = None) -> str:
    """Start the script at `path` as a child run (once) and return its run id."""
    to_json(input, "the child's input")
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except OSError as e:
        where = os.fspath(path)
        raise ScriptError("bad_request", f"cannot read {where}: {e.strerror or e}") from None
    reply = _client.call({"op": "spawn", "filename": os.path.basename(os.fspath(path)),
                          "source": source, "input": input, "interpreter": interpreter})
    return str(reply.get("run_id"))


def call_graph(name: str, input: Any = None) -> Any:
    """Run the stored graph `name` (a cryosleep-graph/v1 workflow) with `input` as a child
    graph run, wait for it and return its output. The first pass parks until the child
    ends; replays return the recorded output and start nothing. A child that failed is
    ScriptError code "graph_failed", carrying the child's error."""
    to_json(input, f"the input of graph {name!r}")
    return _client.call({"op": "graph.call", "name": name, "input": input}).get("output")


def call_node(type: str, config: dict[str, Any], input: Any = None) -> Any:
    """Run one node (a cryosleep-node/v1 document: `type` and its `config`) as a child
    graph run, wait for it and return the node's output; as call_graph otherwise."""
    to_json(config, f"the config of the {type} node")
    to_json(input, f"the input of the {type} node")
    return _client.call({"op": "node.call", "type": type, "config": config,
                         "input": input}).get("output")


def artifact_put(name: str, path: str | os.PathLike[str], *,
                 key: str | None = None, public: bool = False) -> dict[str, Any]:
    """Store the file at `path` as artifact `name` of this run (or, with `key`, the
    project's cached artifact); returns its name, sha256 and size. Not journaled: a
    replay puts the same bytes again, which the store keeps once. public=True lets
    untrusted runs read a trusted run's artifact."""
    from cryosleep import artifacts

    return artifacts.put(_client, name, path, key, public)


def artifact_get(name: str, path: str | os.PathLike[str] | None = None, *,
                 key: str | None = None, run: str | None = None,
                 tainted: bool = False) -> str:
    """Fetch artifact `name` (this run's, the cached one with `key`, or run `run`'s) into
    `path` (default: the name's last part); returns the path written. tainted=True gets,
    for a trusted run, the one untrusted runs put."""
    from cryosleep import artifacts

    return artifacts.get(_client, name, path, key=key, run=run, tainted=tainted)


def artifact_list(run: str | None = None, *, cached: bool = False) -> list[dict[str, Any]]:
    """This run's artifacts (or run `run`'s, or with cached=True the project's cached)."""
    from cryosleep import artifacts

    return artifacts.list_(_client, run, cached)


def annotate(text: str) -> None:
    """Attach a markdown note to the run page (not durable: each pass adds it again)."""
    _client.call({"op": "annotate", "text": text})


def output_set(key: str, value: Any) -> None:
    """Set the run output `key` (not durable: every pass sets it again)."""
    to_json(value, f"output {key!r}")
    _client.call({"op": "output.set", "key": key, "value": value})


def input() -> Any:  # noqa: A001 - the run's input, named as users think of it
    """The run's input JSON (None when it was submitted without one)."""
    path = os.environ.get("CRYO_INPUT_FILE")
    if not path:
        raise ScriptError("outside_run", "not inside a run: CRYO_INPUT_FILE is not set")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    return json.loads(text) if text.strip() else None


# -- state ------------------------------------------------------------------------------
# With no entity a cell is this run's; with one it is the project's, shared across runs.


def state_get(key: str, *, entity: str | None = None, default: Any = None,
              tainted: bool = False) -> Any:
    """The cell's value, or `default` when it is unset (read afresh on every pass).
    tainted=True reads, for a trusted run, the cell untrusted runs wrote."""
    cell = state_cell(key, entity=entity, tainted=tainted)
    return default if cell is None else cell.value


def state_cell(key: str, *, entity: str | None = None,
               tainted: bool = False) -> StateCell | None:
    """The cell with its version (for state_cas), or None when unset."""
    reply = _client.call({"op": "state.get", "key": key, "entity": entity,
                          **({"tainted": True} if tainted else {})})
    if not reply.get("found"):
        return None
    return StateCell(key, reply.get("value"), int(reply.get("version") or 0))


def state_set(key: str, value: Any, *, entity: str | None = None, public: bool = False) -> int:
    """Write the cell; returns its new version. public=True lets untrusted runs read a
    trusted run's cell (until a set without it); docs/security/trust.md."""
    to_json(value, f"the value for state {key!r}")
    reply = _client.call({"op": "state.set", "key": key, "entity": entity, "value": value,
                          **({"public": True} if public else {})})
    return int(reply.get("version") or 0)


def state_delete(key: str, *, entity: str | None = None) -> bool:
    """Delete the cell; whether there was one."""
    return bool(_client.call({"op": "state.delete", "key": key, "entity": entity}).get("deleted"))


def state_list(*, entity: str | None = None, tainted: bool = False) -> list[StateCell]:
    """Every cell of the scope, in key order (tainted=True: those untrusted runs wrote)."""
    cells = _client.call({"op": "state.list", "entity": entity,
                          **({"tainted": True} if tainted else {})}).get("cells")
    return [StateCell(str(c["key"]), c.get("value"), int(c.get("version") or 0))
            for c in (cells if isinstance(cells, list) else [])]


def state_add(key: str, value: Any = True, *, entity: str | None = None) -> bool:
    """Create the cell only if absent; True when this run claimed it (durable: a replay
    gets the same answer)."""
    to_json(value, f"the value for state {key!r}")
    _client.require("state.add")
    reply = _client.call({"op": "state.add", "key": key, "entity": entity, "value": value})
    return bool(reply.get("claimed"))


def state_cas(key: str, value: Any, *, expect: int, entity: str | None = None,
              as_: str | None = None) -> bool:
    """Write the cell only if its version is still `expect`; whether it swapped. Each
    attempt needs its own name `as_` (default: the key)."""
    to_json(value, f"the value for state {key!r}")
    request: dict[str, Any] = {"op": "state.cas", "key": key, "entity": entity,
                               "value": value, "expect": expect}
    if as_ is not None:
        request["as"] = as_
    return bool(_client.call(request).get("swapped"))


def state_incr(key: str, by: Number = 1, *, entity: str | None = None,
               as_: str | None = None) -> Number:
    """Add `by` to a numeric cell (absent counts as 0); returns the new total. Durable
    under the name `as_` (default: the key), which a run uses once."""
    request: dict[str, Any] = {"op": "state.incr", "key": key, "entity": entity, "by": by}
    if as_ is not None:
        request["as"] = as_
    value = _client.call(request).get("value")
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
