"""Each SDK's own test suite (`npm test`, `go test ./...`, `cargo test`), run here so the
suite covers them: they replay sdks/conformance/vectors against a fake agent socket in
the language itself. A language is skipped only when its toolchain is not installed
(scripts/setup installs them on Debian)."""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from agent import toolchains

SDKS = Path(__file__).resolve().parents[2] / "sdks"


def _run(argv: list[str], cwd: Path, timeout: float, **env: str) -> None:
    done = subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} in {cwd} exited {done.returncode}\n"
                    f"--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-6000:]}")


def _need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (scripts/setup installs it)")


def test_typescript_suite() -> None:
    _need("node")
    _need("npm")
    _run(["npm", "test", "--silent"], SDKS / "typescript", timeout=300)


def test_typescript_dist_matches_src() -> None:
    """dist/ is committed (node 20 cannot run .ts): it must be what src/ compiles to."""
    sdk = SDKS / "typescript"
    tsc = sdk / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        pytest.skip("typescript is not installed in sdks/typescript (npm install there)")
    with tempfile.TemporaryDirectory() as out:
        _run([str(tsc), "-p", "tsconfig.json", "--outDir", out], sdk, timeout=300)
        built = sorted(p.name for p in Path(out).iterdir())
        committed = sorted(p.name for p in (sdk / "dist").iterdir())
        assert built == committed, "rebuild dist/ with `npm run build` in sdks/typescript"
        _, mismatch, errors = filecmp.cmpfiles(out, sdk / "dist", built, shallow=False)
        assert not mismatch and not errors, (
            f"dist/ is stale for {mismatch + errors}: run `npm run build` in sdks/typescript")


def test_go_suite() -> None:
    _need("go")
    _run(["go", "test", "-count=1", "./..."], SDKS / "go", timeout=600)


def test_rust_suite() -> None:
    _need("cargo")
    # Under the cache the agent builds .rs workflows in, but one target directory per
    # checkout: cargo gives the SDK the same artifact names in every checkout, so in a
    # directory shared with another checkout it may take that checkout's test binary (and
    # its older SDK) as up to date.
    # The vectors are named at run time, so the binary reads this checkout's.
    checkout = hashlib.sha256(str(SDKS).encode()).hexdigest()[:12]
    _run(["cargo", "test", "--quiet"], SDKS / "rust", timeout=900,
         CARGO_TARGET_DIR=str(toolchains.rust_target_dir() / f"sdk-{checkout}"),
         CRYO_CONFORMANCE_VECTORS=str(SDKS / "conformance" / "vectors"))
