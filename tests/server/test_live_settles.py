"""A run's stream on a busy server: a database read that fails (the pool exhausted) does
not end it, since an ended stream makes the page reconnect and read everything again;
and a finished run's stream ends once, saying it is final."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cryopg.errors import DatabaseUnavailable
from cryopg.server.user_api import live
from tests.server.conftest import Server
from tests.server.test_live import Events, _stream


async def test_run_stream_outlives_an_unavailable_database(
        srv: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    real = live.connection
    failing = {"left": 0}

    @contextlib.asynccontextmanager
    async def flaky(pool: Any) -> AsyncIterator[Any]:
        if failing["left"] > 0:
            failing["left"] -= 1
            raise DatabaseUnavailable("database unavailable: no connection within 10 s")
        async with real(pool) as conn:
            yield conn

    monkeypatch.setattr(live, "connection", flaky)
    monkeypatch.setattr(live, "RETRY_SECONDS", (0.05,), raising=False)
    resp = await _stream(srv, f"/runs/{run_id}/stream")
    ev = Events(resp)
    await ev.until("tail")
    failing["left"] = 3  # the stream's next reads fail, as on a server out of connections
    await srv.log(grant, b"after the outage\n")
    assert (await ev.until("log", timeout=10))["text"] == "after the outage\n"
    assert failing["left"] == 0
    await srv.finish(grant)
    end = await ev.until("end", timeout=10)
    assert end == {"status": "succeeded", "final": True}
    resp.close()


async def test_a_finished_runs_stream_says_hello_finished_and_ends_final(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    await srv.log(grant, b"the only line\n")
    await srv.finish(grant)
    resp = await _stream(srv, f"/runs/{run_id}/stream")
    ev = Events(resp)
    assert (await ev.until("hello"))["finished"] is True
    assert (await ev.until("log"))["text"] == "the only line\n"
    assert (await ev.until("end"))["final"] is True
    assert await resp.content.read() == b""  # and the response is over
    resp.close()
