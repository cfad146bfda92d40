"""OpenTelemetry traces of runs (docs/operations.md), off unless configured.

A submit, a webhook delivery or a schedule tick starts a trace (or continues the W3C
`traceparent` header it came with); its context is stored on the run
(cryo.set_run_traceparent, inherited by child runs), so whichever replica or agent works
on the run later continues the same trace: a claim, a pass, each step and wait, a graph
turn are spans in it, and a script sees TRACEPARENT in its environment.

Configured by the standard variables: OTEL_TRACES_EXPORTER (`otlp` or `console`; `none`
or unset with no OTLP endpoint: off), OTEL_EXPORTER_OTLP_ENDPOINT /
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTLP over HTTP), OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED. Needs the `otel` extra
(opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http); without it tracing is off.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_provider: Any = None  # the TracerProvider spans go to; None: tracing is off


def enabled() -> bool:
    return _provider is not None


def wanted() -> str | None:
    """The exporter the OTEL_* variables ask for: otlp, console, or None (off)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter in ("", "otlp") and (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                                     or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return "otlp"
    return exporter if exporter in ("otlp", "console") else None


def configure(service: str) -> bool:
    """Sets up tracing from the environment for this process (`service` unless
    OTEL_SERVICE_NAME names it); returns whether it is on."""
    global _provider
    kind = wanted()
    if kind is None or _provider is not None:
        return _provider is not None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        return False  # the otel extra is not installed: tracing stays off
    provider = TracerProvider(resource=Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service}))
    if kind == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter: Any = OTLPSpanExporter()
    else:
        exporter = ConsoleSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    atexit.register(provider.shutdown)  # the last spans are sent as the process exits
    _provider = provider
    return True


def use(provider: Any) -> None:
    """Sends spans to this provider (tests: one with an in-memory exporter); None: off."""
    global _provider
    _provider = provider


def shutdown() -> None:
    """Flushes and stops the exporter (at a process's end)."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


def valid(traceparent: str | None) -> str | None:
    """The traceparent if it is a W3C one (version 00), else None."""
    return traceparent if traceparent and _TRACEPARENT.match(traceparent.strip()) else None


def trace_id(traceparent: str | None) -> str | None:
    m = _TRACEPARENT.match(traceparent or "")
    return m.group(1) if m else None


@contextlib.contextmanager
def span(name: str, parent: str | None = None, /, **attributes: Any) -> Iterator[Any]:
    """A span named `name`, child of `parent` (a traceparent) or else of the current span;
    yields None when tracing is off."""
    if _provider is None:
        yield None
        return
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    ctx = (TraceContextTextMapPropagator().extract({"traceparent": parent})
           if valid(parent) else None)
    tracer = _provider.get_tracer("cryopg")
    attrs = {f"cryopg.{k}": v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(name, context=ctx, attributes=attrs) as s:
        yield s


def traceparent_of(s: Any) -> str | None:
    """The W3C traceparent naming span `s` (None when tracing is off)."""
    if s is None:
        return None
    c = s.get_span_context()
    if not c.is_valid:
        return None
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def current_trace_id() -> str | None:
    """The trace id of the current span, for log lines."""
    if _provider is None:
        return None
    from opentelemetry import trace

    c = trace.get_current_span().get_span_context()
    return f"{c.trace_id:032x}" if c.is_valid else None
