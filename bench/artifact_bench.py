#!/usr/bin/env python3
"""Artifact throughput: put and get MB/s of one large blob against the directory store
and an S3 endpoint (moto's server mode on loopback), through the same store code the
server uses (cryopg/artifacts/store.py: hashed while spooled, read a chunk at a time).

Standalone: `python bench/artifact_bench.py [--mib N] [--json]`. From bench/run it is
the `artifacts` section.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cryopg.artifacts.settings import S3Settings  # noqa: E402
from cryopg.artifacts.store import CHUNK, BlobStore, DirStore, S3Store  # noqa: E402
from tests.artifacts_s3 import moto_s3  # noqa: E402


async def _chunks(size: int) -> AsyncIterator[bytes]:
    block = os.urandom(CHUNK)
    left = size
    while left:
        n = min(CHUNK, left)
        yield block[:n]
        left -= n


async def _measure(store: BlobStore, size: int) -> dict[str, float]:
    t0 = time.perf_counter()
    sha256, _ = await store.put("bench", "default", _chunks(size))
    put_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = 0
    async for chunk in store.read("bench", "default", sha256):
        got += len(chunk)
    get_s = time.perf_counter() - t0
    assert got == size
    await store.delete("bench", "default", sha256)
    mb = size / 1e6
    return {"put_mb_s": mb / put_s, "get_mb_s": mb / get_s, "mib": size >> 20}


async def _run(size: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="cryopg-artbench-"))
    try:
        out = {"directory": await _measure(DirStore(tmp / "blobs"), size)}
        with moto_s3("bench") as endpoint:
            s3 = S3Store(S3Settings("bench", endpoint, "us-east-1", "test", "test"), tmp)
            out["s3"] = await _measure(s3, size)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def artifacts(quick: bool) -> dict[str, Any]:
    return asyncio.run(_run((64 if quick else 256) << 20))


def render(r: dict[str, Any]) -> list[str]:
    d, s = r["directory"], r["s3"]
    return ["## Artifacts", "",
            f"Put and get of one {d['mib']} MiB blob through the server's store code "
            "(hashed while spooled to disk, read back in 1 MiB chunks), against the "
            "directory store and an S3 endpoint (moto's server mode on loopback: a Python "
            "server, so the S3 row measures moto as much as cryopg).", "",
            "| store | put MB/s | get MB/s |", "| --- | ---: | ---: |",
            f"| directory | {d['put_mb_s']:,.0f} | {d['get_mb_s']:,.0f} |",
            f"| S3 (moto) | {s['put_mb_s']:,.0f} | {s['get_mb_s']:,.0f} |", ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = asyncio.run(_run(args.mib << 20))
    print(json.dumps(r, indent=2) if args.json else "\n".join(render(r)))


if __name__ == "__main__":
    main()
