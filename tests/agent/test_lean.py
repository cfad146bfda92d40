"""cryopg/cli/lean.py: the in-script verbs' stand-ins for json, socket and subprocess
behave like the stdlib modules, and a verb's process never imports those."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cryopg.cli import lean

ROOT = Path(__file__).resolve().parents[2]

VALUES = [
    {"ok": True, "hit": True, "stdout": "41\n", "exit_code": 3},
    {"a": [1, -2.5, 1e300, None, False, "é\u2028\x00\"\\/", {"": []}], "b": {}},
    "naïve ☃ \udcff",
    [],
    0,
    -0.0,
    12345678901234567890,
    float("inf"),
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_matches_json(value: object) -> None:
    assert lean.dumps(value) == json.dumps(value)
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert lean.dumps(value, compact=True) == compact


@pytest.mark.parametrize("value", VALUES[:-1])
def test_loads_round_trips(value: object) -> None:
    text = json.dumps(value)
    assert lean.loads(text) == json.loads(text)
    assert lean.loads(f" \n{text}\r\t".encode()) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["", " ", "{", "[1,]", "1 2", "nan", "{'a': 1}", '"\\x"', "\ufeff1", "tru"]
)
def test_loads_refuses_what_json_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        lean.loads(text)


def test_loads_constants() -> None:
    assert lean.loads("[Infinity, -Infinity]") == [float("inf"), float("-inf")]

    def refuse(constant: str) -> object:
        raise ValueError(constant)

    with pytest.raises(ValueError):
        lean.loads("NaN", parse_constant=refuse)


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        lean.dumps({"x": object()})


def test_run_captured_like_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "WHO": "body"}
    out, code = lean.run_captured(["sh", "-c", 'printf "%s" "$WHO"; exit 7'], env)
    assert (out, code) == (b"body", 7)
    out, code = lean.run_captured(["sh", "-c", "kill -TERM $$"], env)
    assert code == -15
    with pytest.raises(FileNotFoundError):
        lean.run_captured(["no-such-command-cryopg-test"], env)
    with pytest.raises(PermissionError):
        lean.run_captured([str(tmp_path)], env)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_run_captured_body_gets_default_sigpipe_and_no_inherited_fds() -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    body = (f"[ -e /proc/self/fd/{write_end} ] && echo open || echo closed; "
            "sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status")
    try:
        out, code = lean.run_captured(["sh", "-c", body], dict(os.environ))
    finally:
        os.close(read_end)
        os.close(write_end)
    state, ignored = out.decode().split()
    assert (state, code) == ("closed", 0)  # as subprocess's close_fds
    assert not int(ignored, 16) & (1 << (13 - 1))  # SIGPIPE back to default


def test_a_verb_imports_no_heavy_stdlib(tmp_path: Path) -> None:
    """A replayed step, run as the launcher runs it (-S, only the checkout on sys.path)."""
    path = tmp_path / "cryo.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b'{"ok": true, "hit": true, "stdout": "41\\n", "exit_code": 0}\n')

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    code = (
        f"import sys; sys.path.append({str(ROOT)!r}); sys.argv = ['cryopg', 'step', 'n', '--',"
        " 'true']\nfrom cryopg.cli.entry import main\ntry:\n    main()\nexcept SystemExit:\n"
        "    pass\nheavy = {'json', 'socket', 'subprocess', 're', 'enum', 'selectors', 'signal'}\n"
        "print(sorted(heavy & set(sys.modules)))"
    )
    env = {**os.environ, "CRYO_SOCKET": str(path)}
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env=env, timeout=30)
    thread.join(timeout=5)
    srv.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "41\n[]\n"
