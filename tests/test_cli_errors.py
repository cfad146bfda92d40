"""The CLI answers bad input with one line and a non-zero exit, never a traceback: deep
or oversized JSON options, run ids and names that are not valid UTF-8. Each is refused
before any request (the server here is a port nothing listens on, so a request that
did go out would say "cannot reach", which the tests rule out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEEP = "[" * 50_000 + "]" * 50_000  # one argv string is at most 128 KiB
NOT_UTF8 = "run-\udcff\udcfe"  # what Python makes of the bytes ff fe in argv


def cryopg(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYO_", "CRYOPG_"))}
    env.update(CRYOPG_URL="http://127.0.0.1:9", CRYOPG_TOKEN="cryo_u_none")
    # argv goes out through the file system encoding, so a surrogate-escaped str is the
    # invalid byte itself on the command line.
    return subprocess.run([sys.executable, "-m", "cryopg.cli.entry", *args], env=env,
                          capture_output=True, text=True, errors="replace", timeout=60,
                          cwd=tmp_path)


@pytest.mark.parametrize("args", [
    ("submit", "job.sh", "--input", DEEP),
    ("submit", "job.sh", "--input", "[" * 65 + "]" * 65),
    ("submit", "job.sh", "--input", "9" * 5000),
    ("submit", "job.sh", "--input", '"\\u0000"'),
    ("submit", "job.sh", "--input", '"\\ud800"'),
    ("approve", "run-1", "ok", "--json", DEEP),
    ("signal", "run-1", "go", DEEP),
    ("runs", "show", NOT_UTF8),
    ("logs", NOT_UTF8),
    ("cancel", NOT_UTF8),
    ("signal", "run-1", NOT_UTF8),
    ("approve", NOT_UTF8, "ok", "--json", "{}"),
    ("events", "--name", NOT_UTF8),
    ("state", "get", NOT_UTF8, "--entity", "e"),
    ("workflow", "get", NOT_UTF8),
    ("token", "create", "--kind", "user", "--expires", "99999999999d",
     "--database-url", "postgresql://nobody@127.0.0.1:9/none"),
    ("token", "create", "--kind", "agent", "--expires", "0s",
     "--database-url", "postgresql://nobody@127.0.0.1:9/none"),
], ids=["deep-input", "depth65-input", "digits-input", "nul-input", "surrogate-input",
        "deep-approve", "deep-signal", "utf8-show", "utf8-logs", "utf8-cancel", "utf8-signal",
        "utf8-approve", "utf8-events", "utf8-state", "utf8-workflow", "absurd-expiry",
        "zero-expiry"])
def test_bad_input_is_one_line_and_a_failing_exit(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "job.sh").write_text("echo hi\n")
    done = cryopg(tmp_path, *args)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 400, done.stderr[:2000]
    assert "cannot reach" not in done.stderr  # refused before any request went out
