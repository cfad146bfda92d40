"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 20, every: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def script(dir: Path, name: str, body: str) -> Path:
    path = dir / name
    path.write_text(body)
    return path


def show(stack: Any, run_id: str) -> dict[str, Any]:
    done = stack.cli("runs", "show", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def submit(stack: Any, path: Path, *args: str) -> str:
    done = stack.cli("submit", str(path), *args)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert run_id.startswith("dev:default:run-"), done.stdout
    return run_id


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
