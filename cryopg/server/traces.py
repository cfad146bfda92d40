"""Where a trace starts on the server: a submit, a webhook delivery, a schedule tick. The
span's context is stored on the run, so every later claim, pass and turn continues it
(cryopg/tracing.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cryopg import engine, tracing


def incoming(request: web.Request) -> str | None:
    """The W3C traceparent header a caller sent, if well formed."""
    return tracing.valid(request.headers.get("traceparent"))


async def start_run_trace(conn: Any, run_id: str | None, name: str, parent: str | None = None,
                          **attrs: Any) -> None:
    """A span for the start of a run (continuing `parent`), stored on the run."""
    if not tracing.enabled() or not run_id:
        return
    with tracing.span(name, parent, run_id=run_id, **attrs) as s:
        tp = tracing.traceparent_of(s)
        if tp:
            await engine.set_run_traceparent(conn, run_id, tp)


async def continue_run_trace(conn: Any, run_id: str) -> str | None:
    """The trace stored on a run, when tracing is on (one read), else None."""
    if not tracing.enabled():
        return None
    return await engine.run_traceparent(conn, run_id)
