"""`--log-format json` (or CRYOPG_LOG_FORMAT=json) for `cryopg server`, `agent` and `dev`:
every line the process writes to stderr becomes one JSON object on one line, with the
time, level, process kind, replica, the run id and trace id where known, and the message.
The default stays the readable text it always was.

The servers and agents write their log lines to stderr in many places (and aiohttp,
psycopg and Python itself may too), so the format is applied where they all meet: stderr
itself, a line at a time. A traceback's lines are objects of their own, level "error".
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
import sys
import threading
from typing import Any

import click

from cryopg import tracing

FORMATS = ("text", "json")
_RUN_ID = re.compile(r"\b[a-z0-9][a-z0-9-]{0,62}:[a-z0-9][a-z0-9-]{0,62}:run-[0-9a-f]{8,40}\b")
_ERROR = re.compile(r"\b(failed|error|Traceback|unavailable|unreachable|refused)\b", re.I)
_TRACEBACK_LINE = re.compile(r"^(Traceback |\s+File \"|\s{2,}\S|\w+(\.\w+)*(Error|Exception):)")


class JsonLines(io.TextIOBase):
    """A text stream that writes each complete line to `out` as a JSON object."""

    def __init__(self, out: Any, component: str, replica: str | None) -> None:
        self._out, self._component, self._replica = out, component, replica
        self._buf = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        with self._lock:
            self._buf += s
            *lines, self._buf = self._buf.split("\n")
            for line in lines:
                if line.strip():
                    self._out.write(self.render(line) + "\n")
            if lines:
                self._out.flush()
        return len(s)

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self._out.fileno())

    def render(self, line: str) -> str:
        obj: dict[str, Any] = {
            "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z"),
            "level": "error" if _ERROR.search(line) or _TRACEBACK_LINE.match(line) else "info",
            "process": self._component,
        }
        if self._replica:
            obj["replica"] = self._replica
        run = _RUN_ID.search(line)
        if run:
            obj["run_id"] = run.group(0)
        trace = tracing.current_trace_id()
        if trace:
            obj["trace_id"] = trace
        obj["msg"] = line.rstrip("\r")
        return json.dumps(obj, ensure_ascii=False)


def install(fmt: str, component: str) -> None:
    """Makes this process's stderr write JSON lines (fmt "json"); "text" leaves it."""
    if fmt != "json" or isinstance(sys.stderr, JsonLines):
        return
    replica = os.environ.get("CRYOPG_REPLICA_ID") if component != "agent" else None
    if component != "agent" and not replica:
        from cryopg.replica import replica_id_from_env

        try:
            replica = replica_id_from_env()
        except ValueError:
            replica = None
    sys.stderr = JsonLines(sys.stderr, component, replica)


def option(component: str) -> Any:
    """The `--log-format [text|json]` option of a long-running command."""

    def apply(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        install(value, component)
        return value

    return click.option(
        "--log-format", type=click.Choice(FORMATS), default="text", show_default=True,
        envvar="CRYOPG_LOG_FORMAT", expose_value=False, is_eager=True, callback=apply,
        help="Log lines as readable text, or one JSON object a line (time, level, "
             "replica, run id, trace id, message) [env CRYOPG_LOG_FORMAT].")
