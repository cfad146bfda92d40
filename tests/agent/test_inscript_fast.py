"""The compiled `cryopg step` (cryopg/cli/fast, built by scripts/setup) against the
Python one: for the same agent replies, the same requests, stdout, stderr and exit
code. Both run as processes the way a script calls them, beside a small unix-socket peer
standing in for the agent."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.env import sealed_env
from tests.agent.test_inscript import Peer, peer  # noqa: F401 - the fixture

BIN = Path(sys.executable).parent
FAST = BIN.parent / "libexec" / "cryopg-fast" / "cryopg"
CLIENTS = {"python": BIN / "cryopg", "compiled": FAST}

pytestmark = pytest.mark.skipif(not os.access(FAST, os.X_OK),
                                reason="no compiled client (scripts/setup builds it with Go)")

MISS = {"ok": True, "hit": False, "call_id": "c1", "idempotency_key": "k" * 32}

# (argv after `cryopg`, the peer's replies, environment additions)
CASES: dict[str, tuple[list[str], list[dict | None], dict[str, str]]] = {
    "hit": (["step", "count", "--label", "first", "--", "false"],
            [{"ok": True, "hit": True, "stdout": "41\n", "exit_code": 3}], {}),
    "miss": (["step", "deploy", "--secret=TOKEN", "--", "sh", "-c",
              'echo "key=$CRYO_IDEMPOTENCY_KEY run=${CRYO_RUN_ID-unset}"; echo oops >&2; '
              'printf "\\377"; exit 4'],
             [MISS, {"ok": True}], {"CRYO_RUN_ID": "o:p:run-1",
                                    "CRYO_IDEMPOTENCY_KEY": "shadowed"}),
    "killed": (["step", "k", "--", "sh", "-c", "kill -TERM $$"], [MISS, {"ok": True}], {}),
    "not found": (["step", "x", "--", "no-such-command-cryopg-test"],
                  [MISS, {"ok": True}], {}),
    "not executable": (["step", "x", "--", "/dev/null"], [MISS, {"ok": True}], {}),
    # {junk}: an executable file no kernel loader takes (exec format error)
    "exec format": (["step", "x", "--", "{junk}"], [MISS, {"ok": True}], {}),
    # {script}: an executable text file without a `#!` line: /bin/sh runs it
    "no shebang": (["step", "x", "--", "{script}", "acct-1"], [MISS, {"ok": True}], {}),
    "engine error": (["step", "b", "--", "true"],
                     [{"ok": False, "error": {"code": "determinism",
                                              "message": "determinism error: b"}}], {}),
    "refused": (["step", "b", "--", "true"],
                [{"ok": False, "error": {"code": "bad_request", "message": "no"}}], {}),
    "finish refused": (["step", "b", "--", "echo", "hi"],
                       [MISS, {"ok": False, "error": {"code": "stale_claim",
                                                      "message": "claim lost"}}], {}),
    "no reply": (["step", "b", "--", "true"], [None], {}),
    "usage": (["step", "b", "true"], [], {}),
    "unknown option": (["step", "--nope", "b", "--", "true"], [], {}),
    "help": (["step", "--help"], [], {}),
    "other verb": (["annotate", "hello"], [{"ok": True}], {}),
}


def _run(client: Path, argv: list[str],
         extra: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYO_")}
    env.update(extra, CRYO_SOCKET=os.environ["CRYO_SOCKET"])
    return subprocess.run([str(client), *argv], capture_output=True, env=env, timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_step_answers_as_the_python_one(
        peer: Callable[..., Peer], tmp_path: Path, case: str) -> None:  # noqa: F811
    argv, replies, extra = CASES[case]
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00\x01 not a program\n")
    junk.chmod(0o755)
    script = tmp_path / "charge.sh"
    script.write_text('echo "charged $1 key=$CRYO_IDEMPOTENCY_KEY"\n')
    script.chmod(0o755)
    argv = [{"{junk}": str(junk), "{script}": str(script)}.get(a, a) for a in argv]
    seen = []
    for name, client in CLIENTS.items():
        p = peer(*replies)
        done = _run(client, argv, extra)
        p.close()
        (tmp_path / "cryo.sock").unlink(missing_ok=True)
        seen.append((name, done.returncode, done.stdout, done.stderr, p.requests))
    (_, *python), (_, *compiled) = seen
    assert compiled == python
    if case == "exec format":
        assert python[0] == 127
        assert python[2] == f"cryopg step: cannot run {junk}: exec format error\n".encode()
    if case == "no shebang":
        assert python[:3] == [0, f"charged acct-1 key={'k' * 32}\n".encode(), b""]


def test_an_agent_puts_the_compiled_client_first_on_a_jobs_path(tmp_path: Path) -> None:
    env = sealed_env({"PATH": "/usr/bin:/bin"}, run_id="o:p:run-1", attempt=1,
                     socket_path=str(tmp_path / "s"), input_file=str(tmp_path / "i"),
                     agent_token="t", secrets={})
    assert env["PATH"].split(os.pathsep)[:2] == [str(FAST.parent), str(BIN)]
