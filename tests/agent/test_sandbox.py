"""The sandbox itself, without a stack: what a confined job sees of the host."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agent.sandbox import Sandbox, probe

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (scripts/setup installs it)")


def _box() -> Sandbox:
    box = probe()
    assert isinstance(box, Sandbox), box
    return box


def test_code_bound_from_under_tmp_stays_visible_and_tmp_is_writable() -> None:
    # A checkout cloned under /tmp (as CI may) must not vanish under the job's own /tmp.
    code = Path(tempfile.mkdtemp(prefix="cryo-code-", dir="/tmp"))
    scratch = tempfile.mkdtemp(prefix="cryo-scratch-")
    try:
        (code / "tool.sh").write_text("echo tool-ran\n")
        code.chmod(0o755)
        (code / "tool.sh").chmod(0o755)
        box = _box()
        box = dataclasses.replace(box, readonly=(*box.readonly, str(code)))
        box.own(scratch)
        argv = box.command(["bash", "-c", f"bash {code}/tool.sh; echo x > /tmp/t && cat /tmp/t"],
                           writable=[scratch], cwd=scratch)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["tool-ran", "x"]
    finally:
        shutil.rmtree(code, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_job_sees_no_other_process_and_cannot_write_the_code() -> None:
    scratch = tempfile.mkdtemp(prefix="cryo-scratch-")
    try:
        box = _box()
        box.own(scratch)
        code = Path(__file__).resolve().parents[2] / "cryopg"
        script = f"ls /proc | grep -c '^[0-9]'; touch {code}/x || echo ro"
        argv = box.command(["bash", "-c", script], writable=[scratch], cwd=scratch)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        lines = done.stdout.split()
        assert int(lines[0]) <= 4, done.stdout  # bwrap's init, bash, ls, grep at most
        assert lines[-1] == "ro" and not (code / "x").exists()
        if os.geteuid() == 0:
            assert box.uid is not None and box.uid != 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
