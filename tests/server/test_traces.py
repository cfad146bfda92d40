"""Traces (issue 40, item 3), through the SDK's in-memory exporter: a submit continues the
caller's W3C traceparent and stores its context on the run; a claim is a span of that
trace and hands the agent its context; a child run inherits the trace; the run page
gets the trace id. Off, nothing is stored and no grant carries a traceparent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cryopg import engine, tracing
from cryopg.errors import BadTraceparent, from_sqlstate
from tests.server.conftest import Server

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)


async def test_a_submit_continues_the_callers_trace_into_the_claim(
        srv: Server, spans: InMemorySpanExporter) -> None:
    async with srv.client.post(
            "/api/v1/orgs/dev/projects/default/runs",
            json={"source": "echo hi\n", "filename": "job.sh"},
            headers={"Authorization": f"Bearer {srv.tokens['owner']}",
                     "traceparent": CALLER}) as resp:
        assert resp.status == 201
        run_id = (await resp.json())["run_id"]
    async with await srv.connect() as conn:
        stored = await engine.run_traceparent(conn, run_id)
    assert tracing.trace_id(stored) == TRACE
    grant = await srv.claim_run(run_id)
    assert tracing.trace_id(grant["traceparent"]) == TRACE
    await srv.finish(grant)
    by_name = {s.name: s for s in spans.get_finished_spans()}
    submit, claim = by_name["cryopg submit"], by_name["cryopg claim"]
    assert submit.parent is not None and submit.parent.span_id == 0x00f067aa0ba902b7
    assert claim.context.trace_id == int(TRACE, 16)
    assert claim.attributes["cryopg.run_id"] == run_id
    # the agent's pass continues from the claim's span
    assert grant["traceparent"].split("-")[2] == f"{claim.context.span_id:016x}"
    assert (await srv.show(run_id))["trace_id"] == TRACE


async def test_a_child_run_inherits_its_parents_trace(srv: Server,
                                                      spans: InMemorySpanExporter) -> None:
    parent = await srv.submit()
    async with await srv.connect() as conn:
        tp = await engine.run_traceparent(conn, parent)
        assert tp is not None  # a new trace, started by the submit
        row = await (await conn.execute(
            "SELECT run_id FROM cryo.submit_script('dev', 'default', 'child.sh', NULL,"
            " '\\x00'::bytea, p_parent_run_id => %s)", (parent,))).fetchone()
        assert row is not None
        assert await engine.run_traceparent(conn, row[0]) == tp


async def test_a_bad_traceparent_is_refused_by_sql_and_ignored_from_a_caller(
        srv: Server, spans: InMemorySpanExporter) -> None:
    run_id = await srv.submit()
    async with await srv.connect() as conn:
        with pytest.raises(Exception) as got:
            await engine.set_run_traceparent(conn, run_id, "not-a-traceparent")
    assert getattr(got.value, "sqlstate", None) == "CR190"
    assert isinstance(from_sqlstate("CR190", "x"), BadTraceparent)
    async with srv.client.post(
            "/api/v1/orgs/dev/projects/default/runs",
            json={"source": "echo hi\n", "filename": "job.sh"},
            headers={"Authorization": f"Bearer {srv.tokens['owner']}",
                     "traceparent": "00-zz-yy-01"}) as resp:
        assert resp.status == 201
        other = (await resp.json())["run_id"]
    async with await srv.connect() as conn:
        assert tracing.trace_id(await engine.run_traceparent(conn, other)) not in (None, "zz")


async def test_tracing_off_stores_nothing(srv: Server) -> None:
    assert not tracing.enabled()
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    assert "traceparent" not in grant
    async with await srv.connect() as conn:
        assert await engine.run_traceparent(conn, run_id) is None
    assert "trace_id" not in await srv.show(run_id)
