"""The in-script verbs on their own: durations, argument errors, exit codes, and the
socket conversation against a small real unix-socket peer standing in for the agent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cryopg.cli.inscript import IN_SCRIPT_VERBS, main, parse_duration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2s", 2.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1.5s", 1.5),
        ("500ms", 0.5),
        ("10", 10.0),
        ("0.25", 0.25),
        (" 3M ", 180.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration_accepts(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "-1s", "abc", "1.2.3s", "5x", "1h30m", "inf", "nan"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_verb_set() -> None:
    assert {"step", "sleep", "annotate"} <= IN_SCRIPT_VERBS


@pytest.fixture
def outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRYO_SOCKET", raising=False)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["step", "count"], "missing '--'"),
        (["step", "--", "echo"], "missing step NAME"),
        (["step", "count", "--"], "missing COMMAND"),
        (["step", "count", "--bogus", "--", "echo"], "unknown option --bogus"),
        (["step", "count", "--label"], "missing '--'"),
        (["step", "a", "b", "--", "echo"], "unexpected argument"),
        (["sleep"], "usage: cryopg sleep"),
        (["sleep", "soon"], "invalid duration"),
        (["sleep", "1s", "2s"], "usage: cryopg sleep"),
        (["annotate"], "usage: cryopg annotate"),
    ],
)
def test_argument_errors_exit_2(
    outside: None, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cryopg {argv[0]}: ")
    assert fragment in err


@pytest.mark.parametrize(
    "argv", [["step", "count", "--", "echo", "41"], ["sleep", "2s"], ["annotate", "hi"]]
)
def test_outside_a_run(outside: None, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"cryopg {argv[0]}: not inside a run (CRYO_SOCKET is not set)\n"


def _run_module(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**env, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cryopg.cli.inscript", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_module_entry_outside_a_run() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYO_")}
    done = _run_module(["step", "count", "--", "sh", "-c", "echo 41"], env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "cryopg step: not inside a run (CRYO_SOCKET is not set)\n"


def test_hot_path_imports_stay_light() -> None:
    code = (
        "import sys, cryopg.cli.inscript\n"
        "heavy = {'aiohttp', 'click', 'psycopg', 'psycopg_pool', 'cryptography'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_agent_gone_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CRYO_SOCKET", str(tmp_path / "nobody.sock"))
    assert main(["annotate", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("cryopg annotate: cannot reach the agent")
    assert err.count("\n") == 1


class Peer:
    """A unix socket that answers each request line with the next canned reply."""

    def __init__(self, path: Path, replies: list[dict | None]) -> None:
        self.requests: list[dict] = []
        self._replies = list(replies)
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(path))
        self._srv.listen(8)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._replies:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                self.requests.append(json.loads(buf))
                reply = self._replies.pop(0)
                if reply is not None:
                    conn.sendall(json.dumps(reply).encode() + b"\n")

    def close(self) -> None:
        self._srv.close()
        self._thread.join(timeout=5)


@pytest.fixture
def peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Peer]]:
    made: list[Peer] = []

    def make(*replies: dict | None) -> Peer:
        path = tmp_path / "cryo.sock"
        monkeypatch.setenv("CRYO_SOCKET", str(path))
        made.append(Peer(path, list(replies)))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_step_hit_prints_recorded_answer(peer, capfd: pytest.CaptureFixture[str]) -> None:
    p = peer({"ok": True, "hit": True, "stdout": "41\n", "exit_code": 3})
    assert main(["step", "count", "--label", "first", "--", "false"]) == 3
    assert capfd.readouterr().out == "41\n"
    assert p.requests == [{"op": "step.begin", "name": "count", "label": "first"}]


def test_step_miss_runs_and_records(
    peer, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRYO_RUN_ID", "o:p:run-1")
    monkeypatch.setenv("CRYO_IDEMPOTENCY_KEY", "shadowed")
    p = peer(
        {"ok": True, "hit": False, "call_id": "c1", "idempotency_key": "k" * 32},
        {"ok": True},
    )
    body = 'echo "key=$CRYO_IDEMPOTENCY_KEY run=${CRYO_RUN_ID-unset}"; echo oops >&2; exit 4'
    assert main(["step", "deploy", "--", "sh", "-c", body]) == 4
    out, err = capfd.readouterr()
    expected = f"key={'k' * 32} run=unset\n"
    assert out == expected
    assert "oops" in err  # stderr is inherited, not recorded
    assert p.requests[1] == {
        "op": "step.finish",
        "call_id": "c1",
        "stdout": expected,
        "exit_code": 4,
    }


def test_step_command_not_found_records_127(peer, capfd: pytest.CaptureFixture[str]) -> None:
    p = peer({"ok": True, "hit": False, "call_id": "c1", "idempotency_key": "k"}, {"ok": True})
    assert main(["step", "x", "--", "no-such-command-cryopg-test"]) == 127
    err = capfd.readouterr().err
    assert err == "cryopg step: command not found: no-such-command-cryopg-test\n"
    assert p.requests[1]["exit_code"] == 127


def test_step_exec_format_error_records_127(peer, tmp_path: Path,
                                            capfd: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00\x01 not a program\n")
    junk.chmod(0o755)
    p = peer({"ok": True, "hit": False, "call_id": "c1", "idempotency_key": "k"}, {"ok": True})
    assert main(["step", "x", "--", str(junk)]) == 127
    assert capfd.readouterr().err == f"cryopg step: cannot run {junk}: exec format error\n"
    assert p.requests[1]["exit_code"] == 127


@pytest.mark.parametrize("on_path", [False, True], ids=["by-path", "on-PATH"])
def test_step_runs_a_script_without_a_shebang_with_sh(
        peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str], on_path: bool) -> None:
    """The spec's `cryopg step charge -- ./charge.sh "$account"`, where charge.sh has no
    `#!` line: exec says ENOEXEC, and /bin/sh reads it, as a shell (or execvp) would."""
    script = tmp_path / "charge.sh"
    script.write_text('echo "charged $1 key=$CRYO_IDEMPOTENCY_KEY"\nexit 5\n')
    script.chmod(0o755)
    if on_path:
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    p = peer({"ok": True, "hit": False, "call_id": "c1", "idempotency_key": "k1"}, {"ok": True})
    argv = ["charge.sh" if on_path else str(script), "acct-1"]
    assert main(["step", "charge", "--", *argv]) == 5
    out, err = capfd.readouterr()
    assert (out, err) == ("charged acct-1 key=k1\n", "")
    assert p.requests[1]["stdout"] == "charged acct-1 key=k1\n"
    assert p.requests[1]["exit_code"] == 5


def test_engine_error_reply_exits_1(peer, capfd: pytest.CaptureFixture[str]) -> None:
    message = "determinism error: position 0 was step/a/0 but this pass reached step/b/0"
    peer({"ok": False, "error": {"code": "determinism", "message": message}})
    assert main(["step", "b", "--", "true"]) == 1
    assert capfd.readouterr().err == f"cryopg step: {message}\n"


def test_sleep_sends_seconds(peer) -> None:
    p = peer({"ok": True})
    assert main(["sleep", "1.5m"]) == 0
    assert p.requests == [{"op": "sleep", "seconds": 90.0}]


def test_no_reply_means_agent_gone(peer, capfd: pytest.CaptureFixture[str]) -> None:
    peer(None)
    assert main(["annotate", "hello"]) == 1
    assert "without a reply" in capfd.readouterr().err
