"""The chaos tier's fixtures (the deployment itself is tests/chaos/deploy.py):

- `s3`: an `S3Store`, moto's S3 server behind a gate that can stop, start and freeze it.
- `chaos`: a `Chaos` deployment on the test's fresh database with no process started:
  replicas, agents over them, HAProxy in front, each to kill mid-work.

Every test under tests/chaos is marked `chaos` here. Each must stay bounded (the tier runs
in the normal suite): wait for conditions (tests/e2e/helpers.py `wait_for`), never sleep
for a fixed time, never assert on wall-clock durations.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.deploy import Chaos, S3Store

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.chaos)


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3Store]:
    store = S3Store(tmp_path)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def chaos(request: pytest.FixtureRequest, dsn: str, tmp_path: Path) -> Iterator[Chaos]:
    deployment = Chaos(dsn, tmp_path)
    try:
        yield deployment
    finally:
        deployment.close()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(deployment.tail_logs(), file=sys.stderr)
