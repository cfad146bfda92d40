"""`cryopg server` runs its loop on uvloop when it is installed (the `fast` extra, which
the test extra pulls in), Python's with CRYOPG_EVENT_LOOP=asyncio, and refuses a value
it does not know in one line."""

from __future__ import annotations

import asyncio

import click
import pytest

from cryopg.cli.processes import run_server_loop


def _loop_module() -> str:
    got: list[str] = []

    async def main() -> None:
        got.append(type(asyncio.get_running_loop()).__module__)

    run_server_loop(main())
    return got[0]


def test_uvloop_by_default_and_asyncio_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv("CRYOPG_EVENT_LOOP", raising=False)
    assert _loop_module().startswith("uvloop")
    monkeypatch.setenv("CRYOPG_EVENT_LOOP", "uvloop")
    assert _loop_module().startswith("uvloop")
    monkeypatch.setenv("CRYOPG_EVENT_LOOP", "asyncio")
    assert _loop_module().startswith("asyncio")


def test_an_unknown_loop_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRYOPG_EVENT_LOOP", "tokio")

    async def main() -> None:
        raise AssertionError("never started")

    coro = main()
    with pytest.raises(click.ClickException, match="^CRYOPG_EVENT_LOOP must be uvloop or asyncio$"):
        run_server_loop(coro)
    coro.close()
