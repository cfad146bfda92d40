"""A cold build of a .go/.rs workflow says so in the run's log while it lasts; warming the
build caches (scripts/setup) builds once and is silent when nothing changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent import toolchains

ROOT = Path(__file__).resolve().parents[2]


def test_a_cold_build_announces_itself_and_says_it_is_still_going(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(toolchains, "BUILD_HEARTBEAT", 0.2)
    assert toolchains._build(["sh", "-c", "sleep 0.7; echo compiled"], Path("."),
                             "flow.go with go") == 0
    out, err = capfd.readouterr()
    lines = err.splitlines()
    assert lines[0].startswith("cryopg: building flow.go with go (first build")
    assert any(ln.startswith("cryopg: still building flow.go with go (") for ln in lines)
    assert lines[-1].startswith("cryopg: built flow.go with go in ")
    assert out == "compiled\n"
    # A warm rebuild (a replay) says nothing of its own.
    assert toolchains._build(["sh", "-c", "exit 4"], Path(".")) == 4
    assert capfd.readouterr() == ("", "")


def test_serde_is_added_only_to_rust_files_that_use_it() -> None:
    uses = [b"use serde::{Deserialize, Serialize};", b"#[derive(Debug, Serialize)]",
            b"#[derive(serde::Deserialize)] struct A;"]
    plain = [b"use cryosleep::serde_json::Value;", b"let v = serde_json::json!({});"]
    assert all(toolchains._USES_SERDE.search(s) for s in uses)
    assert not any(toolchains._USES_SERDE.search(s) for s in plain)


@pytest.mark.skipif(shutil.which("go") is None, reason="needs go")
def test_warming_go_builds_once_then_says_nothing(tmp_path: Path) -> None:
    def warm() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent.toolchains", "--warm", "go"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "CRYO_BUILD_CACHE": str(tmp_path)})

    first = warm()
    assert first.returncode == 0, first.stderr
    assert "warming the go build cache" in first.stderr
    assert (tmp_path / "warm" / "go.stamp").is_file()
    again = warm()
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    bad = subprocess.run([sys.executable, "-m", "agent.toolchains", "--warm", "cobol"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
