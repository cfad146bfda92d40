"""A scratch database for a standalone benchmark: the one given, or a private cluster."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryopg.devpg import Cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return 50000 + s.getsockname()[1] % 10000


@contextlib.contextmanager
def scratch_database(dsn: str | None, name: str) -> Iterator[tuple[str, Path]]:
    """Yields (dsn, a work directory). Without a dsn, a private cluster (the same code
    as `cryopg dev`, default durable settings) lives for the block."""
    workdir = Path(tempfile.mkdtemp(prefix=f"cryopg-{name}-"))
    cluster = None
    try:
        if not dsn:
            workdir.chmod(0o755)  # as root, the postgres OS user must enter it
            cluster = Cluster(workdir / "pg", port=free_port())
            cluster.ensure_initialized()
            cluster.start()
            cluster.create_database(name)
            dsn = cluster.dsn(name)
        yield dsn, workdir
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
