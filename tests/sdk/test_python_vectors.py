"""The Python SDK against the shared socket vectors (sdks/conformance/vectors), replayed
on a fake agent socket; plus the connect-retry and JSON round-trip rules."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryosleep import script
from cryosleep._client import Client

from tests.sdk.conftest import CONFORMANCE
from tests.sdk.fake_agent import FakeAgent, same_request

UNENCODABLE = {1, 2}  # a set has no JSON form


class FunctionError(Exception):
    """What the vectors' user functions raise (must come through the SDK unchanged)."""


def _cases() -> list[Any]:
    out = []
    for path in sorted((CONFORMANCE / "vectors").glob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            out.append(pytest.param(case, id=f"{path.stem}:{case['id']}"))
    return out


@pytest.fixture
def sockdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))  # unix socket paths are short
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _duration(given: float | None) -> dt.timedelta | None:
    """A vector's neutral seconds as this SDK takes a duration."""
    return None if given is None else dt.timedelta(seconds=given)


def _argv(call: dict[str, Any], files: Path) -> list[str]:
    """A step's argv; with `script`, that file written (executable) and its path first."""
    if "script" not in call:
        return list(call["argv"])
    path = files / call["script"]["file"]
    path.write_text(call["script"]["source"])
    path.chmod(0o755)
    return [str(path), *call["argv"]]


def _run(call: dict[str, Any], files: Path, counter: list[int]) -> Any:
    """Make the neutral call of a vector with the Python SDK; return its JSON-ish result."""
    verb = call["verb"]
    opt = {k: call[k] for k in ("entity",) if k in call}
    if verb == "step_fn":
        def fn() -> Any:
            counter[0] += 1
            if "raises" in call:
                raise FunctionError(call["raises"])
            return UNENCODABLE if call.get("returns_unencodable") else call.get("returns")
        return script.step_fn(call["name"], fn, label=call.get("label"))
    if verb == "step":
        return script.step(call["name"], _argv(call, files), label=call.get("label"))
    if verb == "step_unchecked":
        r = script.step_unchecked(call["name"], _argv(call, files), label=call.get("label"))
        return {"exit_code": r.exit_code, "stdout": r.stdout}
    if verb == "sleep":
        return script.sleep(dt.timedelta(seconds=call["seconds"]))
    if verb in ("wait_signal", "wait_event"):
        return getattr(script, verb)(call["name"], timeout=_duration(call.get("timeout")))
    if verb == "emit":
        payload = UNENCODABLE if call.get("payload_unencodable") else call.get("payload")
        return script.emit(call["name"], payload)
    if verb == "spawn":
        path = files / call["file"]
        path.write_text(call["source"])
        return script.spawn(path, input=call.get("input"), interpreter=call.get("interpreter"))
    if verb == "call_graph":
        graph_input = UNENCODABLE if call.get("input_unencodable") else call.get("input")
        return script.call_graph(call["name"], graph_input)
    if verb == "call_node":
        return script.call_node(call["type"], call["config"], call.get("input"))
    if verb == "annotate":
        return script.annotate(call["text"])
    if verb == "output_set":
        return script.output_set(call["key"], call["value"])
    if verb == "state_get":
        return script.state_get(call["key"], **opt)
    if verb == "state_cell":
        cell = script.state_cell(call["key"], **opt)
        return None if cell is None else {"value": cell.value, "version": cell.version}
    if verb == "state_set":
        value = UNENCODABLE if call.get("value_unencodable") else call["value"]
        return script.state_set(call["key"], value, **opt)
    if verb == "state_delete":
        return script.state_delete(call["key"], **opt)
    if verb == "state_list":
        return [{"key": c.key, "value": c.value, "version": c.version}
                for c in script.state_list(**opt)]
    if verb == "state_add":
        return script.state_add(call["key"], call.get("value", True), **opt)
    if verb == "state_cas":
        return script.state_cas(call["key"], call["value"], expect=call["expect"],
                                as_=call.get("as"), **opt)
    if verb == "state_incr":
        return script.state_incr(call["key"], call.get("by", 1), as_=call.get("as"), **opt)
    if verb in ("activity_submit", "activity"):
        return getattr(script, verb)(call["name"], call["argv"], retries=call.get("retries"),
                                     retry_backoff=_duration(call.get("retry_backoff")),
                                     retry_on_exit=call.get("retry_on_exit"))
    if verb == "activity_collect":
        return script.activity_collect(call["name"])
    if verb == "activity_wait_all":
        return script.activity_wait_all()
    if verb == "lock":
        with script.lock(call["group"]):
            counter[0] += 1
            for inner in call["body"]:
                _run(inner, files, counter)
            if call.get("body_raises"):
                raise FunctionError("the body failed")
        return None
    if verb == "sequence":
        return [_run(inner, files, counter) for inner in call["calls"]]
    raise AssertionError(f"unknown verb {verb}")


_KINDS: dict[str, type[BaseException]] = {
    "StepFailed": script.StepFailed,
    "ScriptError": script.ScriptError,
    "AgentUnavailable": script.AgentUnavailable,
    "WaitTimeout": script.WaitTimeout,
    "FunctionError": FunctionError,
}


@pytest.mark.parametrize("case", _cases())
def test_vector(case: dict[str, Any], sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(sockdir / "agent.sock")
    monkeypatch.setenv("CRYO_SOCKET", path)
    for name, value in case.get("env", {}).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    previous = script._use(Client())
    agent = None if case.get("server") == "absent" else FakeAgent(path, case["exchanges"])
    counter = [0]
    outcome: Any
    try:
        try:
            outcome = ("value", _run(case["call"], sockdir, counter))
        except Exception as e:  # noqa: BLE001 - the vector says which kind it must be
            outcome = ("error", e)
    finally:
        script._use(previous)
        if agent is not None:
            agent.close()

    received = agent.received if agent is not None else []
    want = case["exchanges"]
    assert len(received) == len(want), f"sent {received}, expected {[x['request'] for x in want]}"
    for got, exchange in zip(received, want, strict=True):
        assert same_request(got, exchange["request"], exchange.get("json_fields", [])), (
            f"sent {got}, expected {exchange['request']}")

    result = case["result"]
    if "value" in result:
        assert outcome[0] == "value", f"raised {outcome[1]!r}"
        assert outcome[1] == result["value"]
    else:
        assert outcome[0] == "error", f"returned {outcome[1]!r}, expected {result['error']}"
        error = outcome[1]
        assert isinstance(error, _KINDS[result["error"]]), repr(error)
        if "code" in result:
            assert error.code == result["code"]
        if "exit_code" in result:
            assert error.exit_code == result["exit_code"]
        for part in result.get("message_contains", []):
            assert part in str(error)
    if "fn_calls" in case:
        assert counter[0] == case["fn_calls"]


# -- beyond the vectors: Python-specific rules ------------------------------------------


@pytest.mark.parametrize("value", [(1, 2), {1: "a"}, float("nan"), object(), b"x", [1, {2}]])
def test_values_that_do_not_round_trip_are_refused(value: Any) -> None:
    from cryosleep._client import to_json

    with pytest.raises(script.ScriptError) as caught:
        to_json(value, "the value")
    assert caught.value.code == "not_json" and "JSON" in str(caught.value)


@pytest.mark.parametrize("value", [None, True, 0, 1.5, "é", [1, [2]], {"a": {"b": [None]}}])
def test_values_that_round_trip_are_accepted(value: Any) -> None:
    from cryosleep._client import to_json

    assert json.loads(to_json(value, "v")) == value


def test_connect_is_retried_until_the_agent_listens(
        sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that starts listening during the backoff is reached; the request is sent
    once."""
    path = str(sockdir / "late.sock")
    monkeypatch.setenv("CRYO_CONNECT_ATTEMPTS", "6")
    monkeypatch.setenv("CRYO_CONNECT_BACKOFF_MS", "40")
    holder: list[FakeAgent] = []

    def start_late() -> None:
        time.sleep(0.15)
        holder.append(FakeAgent(path, [{"request": {}, "reply": {"ok": True}}]))

    starter = threading.Thread(target=start_late)
    starter.start()
    try:
        Client(path).call({"op": "annotate", "text": "late"})
    finally:
        starter.join()
        for agent in holder:
            agent.close()
    assert holder[0].received == [{"op": "annotate", "text": "late"}]


def test_connect_attempts_are_bounded(sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(sockdir / "refusing.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)  # bound but not listening: every connect is refused
    monkeypatch.setenv("CRYO_CONNECT_ATTEMPTS", "3")
    monkeypatch.setenv("CRYO_CONNECT_BACKOFF_MS", "20")
    started = time.monotonic()
    try:
        with pytest.raises(script.AgentUnavailable, match="after 3 attempt"):
            Client(path).call({"op": "annotate", "text": "x"})
    finally:
        s.close()
    assert time.monotonic() - started >= 0.05  # 20 ms + 40 ms of backoff


def test_a_parking_call_flushes_stdout_first(
        sockdir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Output printed before a park reaches the log: it is flushed before the request."""
    path = str(sockdir / "agent.sock")
    seen: list[str] = []

    class Peeking(FakeAgent):
        def _answer(self, conn: socket.socket) -> None:
            seen.append(capfd.readouterr().out)
            super()._answer(conn)

    agent = Peeking(path, [{"request": {}, "reply": {"ok": True}}])
    monkeypatch.setenv("CRYO_SOCKET", path)
    previous = script._use(Client())
    try:
        print("before the park", end="")
        script.sleep("1s")
    finally:
        script._use(previous)
        agent.close()
    assert seen == ["before the park"]


def test_suspension_is_not_swallowed_by_a_broad_except(
        sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parked call never returns normally: in a real run the agent kills the process
    while the SDK waits; here (no kill) the wait ends in AgentUnavailable, not a return."""
    path = str(sockdir / "agent.sock")
    agent = FakeAgent(path, [{"request": {}, "reply": None}])
    monkeypatch.setenv("CRYO_SOCKET", path)
    monkeypatch.setenv("CRYO_SUSPEND_GRACE_MS", "300")
    previous = script._use(Client())
    started = time.monotonic()
    returned = False
    try:
        try:
            script.wait_signal("approve")
            returned = True
        except script.ScriptError:
            returned = True  # a suspension must not look like a catchable script error
        except script.AgentUnavailable:
            pass
    finally:
        script._use(previous)
        agent.close()
    assert not returned
    assert time.monotonic() - started >= 0.3


def test_input_reads_the_run_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "input.json"
    f.write_text('{"dir": "/x"}')
    monkeypatch.setenv("CRYO_INPUT_FILE", str(f))
    assert script.input() == {"dir": "/x"}
    monkeypatch.delenv("CRYO_INPUT_FILE")
    with pytest.raises(script.ScriptError, match="CRYO_INPUT_FILE"):
        script.input()


def test_the_package_is_typed_and_stdlib_only() -> None:
    root = CONFORMANCE.parent / "python" / "cryosleep"
    assert (root / "py.typed").exists()
    import ast
    import sys

    for source in root.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top in ("cryosleep", "__future__"), (
                    f"{source.name} imports {name}")


def test_the_agent_puts_the_sdk_on_the_script_path() -> None:
    from agent.env import sealed_env

    env = sealed_env({"PATH": "/usr/bin", "PYTHONPATH": "/mine"}, run_id="r", attempt=1,
                     socket_path="/s", input_file="/i")
    parts = env["PYTHONPATH"].split(os.pathsep)  # not passed through: only the SDK's dir
    assert parts[-1].endswith("sdks/python") and "/mine" not in parts
    assert env["CRYO_PRELUDE"].endswith("sdks/bash/prelude.sh")


@pytest.mark.parametrize(("given", "sent"), [("1s", 1.0), ("500ms", 0.5), ("5m", 300.0),
                                             ("1.5h", 5400.0), ("10", 10.0),
                                             (dt.timedelta(seconds=2), 2.0),
                                             (dt.timedelta(milliseconds=250), 0.25)])
def test_durations_are_strings_with_units_or_timedeltas(given: object, sent: float) -> None:
    from cryosleep import script

    assert script.seconds(given) == sent


@pytest.mark.parametrize("given", [1000, 2, 0.5])
def test_a_bare_number_is_refused_not_guessed(given: object) -> None:
    """sleep(1000) meant seconds here and milliseconds in TypeScript (issue 42, item 5):
    one meaning across the SDKs, and an old call fails loudly instead of changing unit."""
    from cryosleep import ScriptError, script

    for call in (lambda: script.sleep(given), lambda: script.wait_signal("go", timeout=given),
                 lambda: script.activity_submit("a", ["true"], retry_backoff=given)):
        with pytest.raises(ScriptError) as exc:
            call()
        assert exc.value.code == "bad_request"
        assert f"'{given}s' or '{given}ms'" in str(exc.value)


@pytest.mark.parametrize("given", ["1x", "-1s", "", "soon", None, True])
def test_a_malformed_duration_is_a_script_error(given: object) -> None:
    from cryosleep import ScriptError, script

    with pytest.raises(ScriptError) as exc:
        script.wait_signal("go", timeout=given) if given is not None else script.seconds(given)
    assert exc.value.code == "bad_request"


@pytest.mark.parametrize("content", ["shell", "binary"])
def test_step_runs_a_script_without_a_shebang_with_sh(
        content: str, sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """script.step(["./charge.sh", acct]) where charge.sh has no `#!` line runs it with
    /bin/sh, as the CLI's step does (issue 42, item 1); a binary no kernel loader takes
    records 127 instead of raising with the step begun and never finished."""
    charge = sockdir / "charge.sh"
    if content == "shell":
        charge.write_text('echo "charged $1"\n')
    else:
        charge.write_bytes(b"\x00\x01 not a program\n")
    charge.chmod(0o755)
    path = str(sockdir / "agent.sock")
    monkeypatch.setenv("CRYO_SOCKET", path)
    previous = script._use(Client())
    agent = FakeAgent(path, [
        {"request": {}, "reply": {"ok": True, "hit": False, "call_id": "c1",
                                  "idempotency_key": "k"}},
        {"request": {}, "reply": {"ok": True}}])
    try:
        result = script.step_unchecked("charge", [str(charge), "acct-1"])
    finally:
        script._use(previous)
        agent.close()
    if content == "shell":
        assert (result.exit_code, result.stdout) == (0, "charged acct-1\n")
    else:
        assert (result.exit_code, result.stdout) == (127, "")
    assert agent.received[1]["exit_code"] == result.exit_code
