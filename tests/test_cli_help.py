"""`cryopg --help` names every in-script verb, which click itself never sees."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cryopg.cli.inscript import IN_SCRIPT_VERBS
from cryopg.cli.main import IN_SCRIPT_HELP


def test_help_lists_exactly_the_in_script_verbs() -> None:
    listed = set(re.findall(r"[a-z][a-z-]+", IN_SCRIPT_HELP.split(":", 1)[1]))
    assert listed == set(IN_SCRIPT_VERBS)


def test_every_in_script_verb_is_served_from_the_one_list() -> None:
    """cryopg/cli/verbs.py is the list: each wait verb has its usage line where it is
    served, and the compiled client answers only COMPILED_VERBS itself."""
    from cryopg.cli import inscript, inscript_waits
    from cryopg.cli.verbs import COMPILED_VERBS, CORE_VERBS, WAIT_VERBS

    assert tuple(inscript_waits.USAGE) == WAIT_VERBS
    assert set(CORE_VERBS) == set(inscript.USAGE)
    go = (Path(inscript.__file__).parent / "fast" / "main.go").read_text()
    assert tuple(re.findall(r'args\[0\] == "([a-z-]+)"', go)) == COMPILED_VERBS
    assert set(COMPILED_VERBS) <= IN_SCRIPT_VERBS


def _cryopg(args: list[str], inside: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYO_", "CRYOPG_"))}
    if inside:  # --help is answered before the socket is ever opened
        env["CRYO_SOCKET"] = "/nonexistent/cryo.sock"
    return subprocess.run([sys.executable, "-m", "cryopg.cli.entry", *args], env=env,
                          capture_output=True, text=True, timeout=60, cwd="/")


@pytest.mark.parametrize("inside", [False, True], ids=["outside-a-run", "inside-a-run"])
@pytest.mark.parametrize("op", ["get", "version", "list", "set", "delete", "add", "cas", "incr"])
def test_every_state_operation_has_help_in_both_places(op: str, inside: bool) -> None:
    done = _cryopg(["state", op, "--help"], inside)
    assert done.returncode == 0, done.stderr
    assert "--entity" in done.stdout and "Traceback" not in done.stderr
    if op in ("cas", "incr"):
        assert "--as" in done.stdout and "--op" in done.stdout
    if op == "cas":
        assert "--expect" in done.stdout
    # after other arguments too
    late = _cryopg(["state", op, "k", "--help"], inside)
    assert late.returncode == 0 and "--entity" in late.stdout, late.stderr


@pytest.mark.parametrize("verb", sorted(set(IN_SCRIPT_VERBS) - {"state"}))
def test_every_in_script_verb_explains_itself_beyond_its_usage_line(verb: str) -> None:
    """`cryopg step -h` and `lock -h` printed only a usage line (issue 42, item 5)."""
    done = _cryopg([verb, "-h"], inside=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"usage: cryopg {verb}")
    assert len([ln for ln in lines if not ln.startswith(("usage:", "   "))]) >= 2, lines
    wanted = {"step": ["--label", "--secret", "126", "127", "CRYO_IDEMPOTENCY_KEY"],
              "lock": ["-- COMMAND", "FIFO", "until the run ends"]}.get(verb, [])
    assert all(w in done.stdout for w in wanted), done.stdout
