"""What confining a job costs: the start of `bash -c true` run plainly and run in the
agent's sandbox (agent/sandbox.py), interleaved in one run so load hits both alike.

    .venv/bin/python bench/isolation_bench.py [--n 40]

Prints the median wall time of each and their ratio (sandboxed / plain)."""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.sandbox import Sandbox, probe  # noqa: E402


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    n = ap.parse_args().n
    box = probe()
    if not isinstance(box, Sandbox):
        print(f"isolation bench: no sandbox here ({box})")
        return 1
    scratch = tempfile.mkdtemp(prefix="cryo-bench-")
    try:
        box.own(scratch)
        plain_argv = ["bash", "-c", "true"]
        boxed_argv = box.command(plain_argv, writable=[scratch], cwd=scratch)
        plain: list[float] = []
        boxed: list[float] = []
        for _ in range(n):
            plain.append(_time(plain_argv))
            boxed.append(_time(boxed_argv))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    p, b = statistics.median(plain) * 1000, statistics.median(boxed) * 1000
    print(f"job start plain ms: {p:.2f}")
    print(f"job start sandboxed ms: {b:.2f}")
    print(f"ratio sandboxed/plain: {b / p:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
