"""The private cluster `cryopg dev` and the test session run on."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from cryopg.devpg import Cluster, ClusterError


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # Not tmp_path: as root that is a 0700 tree the postgres OS user cannot enter.
    base = Path(tempfile.mkdtemp(prefix="cryopg-devpg-"))
    base.chmod(0o755)
    c = Cluster(base / "c", port=55999, options=["fsync=off"])
    try:
        yield c
    finally:
        try:
            c.stop()
        finally:
            shutil.rmtree(base, ignore_errors=True)


def test_start_reuse_and_restart_keeps_data(cluster: Cluster) -> None:
    assert not cluster.is_running()
    cluster.start()
    assert cluster.is_running()
    pid = (cluster.pgdata / "postmaster.pid").read_text().split()[0]

    cluster.start()  # already running: reused, not restarted
    assert (cluster.pgdata / "postmaster.pid").read_text().split()[0] == pid

    assert cluster.create_database("app") is True
    assert cluster.create_database("app") is False
    with psycopg.connect(cluster.dsn("app"), autocommit=True) as conn:
        conn.execute("create table kept (v int)")
        conn.execute("insert into kept values (42)")

    cluster.stop()
    assert not cluster.is_running()
    cluster.stop()  # stopping a stopped cluster is a no-op

    cluster.start()
    with psycopg.connect(cluster.dsn("app")) as conn:
        assert conn.execute("select v from kept").fetchall() == [(42,)]
        assert conn.execute("show listen_addresses").fetchone() == ("",)
        assert conn.execute("show fsync").fetchone() == ("off",)


def test_running_on_another_port_is_refused(cluster: Cluster) -> None:
    cluster.start()
    other = Cluster(cluster.base, port=cluster.port + 1)
    with pytest.raises(ClusterError, match="already running on port"):
        other.start()


def test_dsn_quotes_awkward_paths() -> None:
    dsn = Cluster(Path("/tmp/with space"), port=1234).dsn("db")
    assert psycopg.conninfo.conninfo_to_dict(dsn) == {
        "host": "/tmp/with space/run",
        "port": "1234",
        "user": "cryopg",
        "dbname": "db",
    }
