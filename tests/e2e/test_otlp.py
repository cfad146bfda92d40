"""One OTLP export to a loopback receiver (issue 40, item 3): a replica and an agent
configured by the standard OTEL_* variables send their spans of a run over OTLP/HTTP;
the submit (continuing the caller's traceparent), the claim, the agent's pass and its
step are one trace, and the script saw TRACEPARENT of that trace."""

from __future__ import annotations

import gzip
import http.server
import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import _free_tcp_port, _healthy
from tests.e2e.conftest import Split
from tests.e2e.helpers import wait_for

TRACE = "0af7651916cd43dd8448eb211c80319c"


class _Receiver(http.server.BaseHTTPRequestHandler):
    spans: list[tuple[str, str, str]] = []  # (service, span name, trace id)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            service = next((a.value.string_value for a in rs.resource.attributes
                            if a.key == "service.name"), "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append((service, s.name, s.trace_id.hex()))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_spans_of_a_run_reach_an_otlp_receiver(split: Split, tmp_path: Path) -> None:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
        split.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
        port = _free_tcp_port()
        replica = f"http://127.0.0.1:{port}"
        split.spawn("server", "--database-url", split.dsn, "--port", str(port),
                    "--claim-seconds", "2", "--tick-interval", "0.2")
        wait_for("the traced replica", lambda: _healthy(replica), timeout=30)
        split.spawn("agent", "--url", replica, "--token", split.agent_token, "--id", "traced")
        seen = tmp_path / "traceparent.txt"
        body = (f'cryopg step hello -- sh -c "echo hi"\necho "$TRACEPARENT" > {seen}\n')
        req = urllib.request.Request(
            f"{replica}/api/v1/orgs/dev/projects/default/runs", method="POST",
            data=json.dumps({"source": body, "filename": "t.sh"}).encode(),
            headers={"Authorization": f"Bearer {split.user_token}",
                     "Content-Type": "application/json",
                     "traceparent": f"00-{TRACE}-b7ad6b7169203331-01"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 201
        wait_for("the script's TRACEPARENT", lambda: seen.exists() and seen.read_text().strip(),
                 timeout=60)
        assert seen.read_text().split("-")[1] == TRACE

        def names() -> set[tuple[str, str]]:
            return {(svc, n) for svc, n, t in list(_Receiver.spans) if t == TRACE}

        want = {("cryopg-server", "cryopg submit"), ("cryopg-server", "cryopg claim"),
                ("cryopg-agent", "cryopg pass"), ("cryopg-agent", "cryopg step.begin")}
        wait_for("the run's spans at the receiver", lambda: want <= names(), timeout=60)
    finally:
        receiver.shutdown()
