"""`--log-format json` (issue 40, item 4): one JSON object a line, with the run id,
replica and trace id where known; text stays the default."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider

from cryopg import tracing
from cryopg.cli.main import cli
from cryopg.logfmt import JsonLines


def test_each_line_is_one_object_with_run_replica_and_trace() -> None:
    out = io.StringIO()
    lines = JsonLines(out, "server", "r1")
    lines.write("cryopg: graph driver: run dev:default:run-0123456789abcdef0123: boom failed\n"
                "second line, no run")
    assert out.getvalue().count("\n") == 1  # the unfinished line waits for its newline
    tracing.use(TracerProvider())
    try:
        with tracing.span("t") as s:
            lines.write("\n")
            trace = f"{s.get_span_context().trace_id:032x}"
    finally:
        tracing.use(None)
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["run_id"] == "dev:default:run-0123456789abcdef0123"
    assert first["replica"] == "r1" and first["process"] == "server"
    assert first["level"] == "error" and first["msg"].endswith("boom failed")
    assert "trace_id" not in first and second["trace_id"] == trace
    assert second["level"] == "info" and "run_id" not in second


def test_the_long_running_commands_take_the_option() -> None:
    for command in ("server", "agent", "dev"):
        got = CliRunner().invoke(cli, [command, "--help"])
        assert "--log-format [text|json]" in got.output, got.output
    bad = CliRunner().invoke(cli, ["server", "--log-format", "xml"])
    assert bad.exit_code == 2 and "xml" in bad.output
