"""The http node's job as an agent runs it: the script the server ships (the egress
policy inlined), run by a bare `python3 -I` that cannot import cryopg, against servers
on loopback only. A refused hop gets no request, and nothing from it is printed."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cryopg.graphs.http_request import MAX_BYTES, job_source

SECRET = "s3cret-body-never-shown"


class Server:
    """A loopback HTTP server whose handler is a function of the request; it counts
    every connection it accepts."""

    def __init__(self, host: str, answer: Callable[[http.server.BaseHTTPRequestHandler],
                                                   tuple[int, dict[str, str], bytes]]) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append({"method": self.command, "path": self.path,
                                       "headers": dict(self.headers),
                                       "body": self.rfile.read(length)})
                status, headers, body = answer(self)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = handle_one  # noqa: N815 (http.server's names)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(answer: Any, host: str = "127.0.0.1") -> Server:
        made.append(Server(host, answer))
        return made[-1]

    yield make
    for s in made:
        s.close()


def ok(body: bytes = json.dumps({"secret": SECRET}).encode()) -> Any:
    return lambda h: (200, {"Content-Type": "application/json",
                            "Content-Length": str(len(body))}, body)


def redirect(to: str, status: int = 302) -> Any:
    return lambda h: (status, {"Location": to}, f"moved {SECRET}".encode())


def run_job(tmp_path: Path, request: dict[str, Any], allow: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "cryo_http_node.py"
    script.write_text(job_source())
    (tmp_path / "input.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CRYOPG_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy"))}
    env["CRYO_INPUT_FILE"] = str(tmp_path / "input.json")
    if allow is not None:
        env["CRYOPG_EGRESS_ALLOW"] = allow
    # -I: no PYTHONPATH, no user site, no script dir imports of cryopg: the shipped file
    # must stand alone, as on an agent without cryopg.
    return subprocess.run(["python3", "-I", str(script)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


def one_line_refusal(done: subprocess.CompletedProcess[str], *phrases: str) -> str:
    assert done.returncode == 1, done
    out = done.stdout + done.stderr
    assert "Traceback" not in out and SECRET not in out, out
    assert len(out.strip().splitlines()) == 1, out
    assert out.startswith("http node: "), out
    for p in phrases:
        assert p in out, out
    return out


def test_a_file_url_is_refused_and_the_file_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "dev.json"
    secret.write_text(json.dumps({"token": SECRET}))
    done = run_job(tmp_path, {"url": secret.as_uri()}, allow="127.0.0.1")
    one_line_refusal(done, "refused file://", "file: scheme is not allowed")


def test_a_loopback_server_gets_no_request_without_the_allowlist(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    srv = servers(ok())
    port = srv.url.rsplit(":", 1)[1]
    for url in (srv.url + "/", f"http://localhost:{port}/", f"http://2130706433:{port}/",
                f"http://0x7f.1:{port}/", f"http://[::ffff:127.0.0.1]:{port}/",
                f"http://0.0.0.0:{port}/"):
        done = run_job(tmp_path, {"url": url})
        one_line_refusal(done, "refused", "(set CRYOPG_EGRESS_ALLOW to allow it)")
    assert srv.requests == []
    done = run_job(tmp_path, {"url": srv.url + "/"})
    assert done.stdout.strip() == (f"http node: refused {srv.url}/: 127.0.0.1 is a loopback "
                                   "address (set CRYOPG_EGRESS_ALLOW to allow it)")


def test_with_the_allowlist_the_same_request_succeeds(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    srv = servers(ok())
    done = run_job(tmp_path, {"url": srv.url + "/x?y=1", "method": "POST",
                              "headers": {"X-Ask": "1"}, "body": {"a": 1}}, allow="127.0.0.1")
    assert done.returncode == 0, done
    got = json.loads(done.stdout)
    assert got["status"] == 200 and got["body"] == {"secret": SECRET}
    [req] = srv.requests
    assert (req["method"], req["path"], req["body"]) == ("POST", "/x?y=1", b'{"a": 1}')
    assert req["headers"]["X-Ask"] == "1"
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["Host"] == srv.url.split("//")[1]


def test_a_redirect_to_another_loopback_address_is_refused(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    # 127.0.0.2 would answer (it listens), so only the policy can keep it unasked.
    inner = servers(ok(), host="127.0.0.2")
    outer = servers(redirect(inner.url + "/internal"))
    done = run_job(tmp_path, {"url": outer.url + "/"}, allow="127.0.0.1")
    out = one_line_refusal(done, f"refused {inner.url}/internal", "127.0.0.2 is a loopback")
    assert "moved" not in out  # nothing of the redirecting answer either
    assert len(outer.requests) == 1 and inner.requests == []
    # Without any allowlist, the first hop is already refused.
    one_line_refusal(run_job(tmp_path, {"url": outer.url + "/"}), "127.0.0.1 is a loopback")
    assert len(outer.requests) == 1


@pytest.mark.parametrize("to", ["file:///etc/passwd", "gopher://127.0.0.1:1/",
                                "http://169.254.169.254/latest/meta-data/",
                                "http://[::ffff:127.0.0.2]:1/"])
def test_a_redirect_off_the_web_or_to_metadata_is_refused(
        tmp_path: Path, servers: Callable[..., Server], to: str) -> None:
    outer = servers(redirect(to, 301))
    done = run_job(tmp_path, {"url": outer.url + "/"}, allow="127.0.0.1")
    one_line_refusal(done, f"refused {to}")
    assert len(outer.requests) == 1


def test_an_allowed_redirect_is_followed_without_credentials_to_another_origin(
        tmp_path: Path, servers: Callable[..., Server]) -> None:
    inner = servers(ok(b'"inner"'), host="127.0.0.2")
    outer = servers(redirect(inner.url + "/there", 303))
    done = run_job(tmp_path, {"url": outer.url + "/", "method": "POST", "body": "x",
                              "headers": {"Authorization": "Bearer t", "Cookie": "c=1"}},
                   allow="127.0.0.1,127.0.0.2")
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["body"] == "inner"
    assert outer.requests[0]["headers"]["Authorization"] == "Bearer t"
    [req] = inner.requests
    assert req["method"] == "GET" and req["body"] == b""
    assert "Authorization" not in req["headers"] and "Cookie" not in req["headers"]


def test_redirects_are_bounded(tmp_path: Path, servers: Callable[..., Server]) -> None:
    loop = servers(lambda h: (302, {"Location": h.path + "x"}, b""))
    done = run_job(tmp_path, {"url": loop.url + "/"}, allow="127.0.0.1")
    one_line_refusal(done, "more than 5 redirects")
    assert len(loop.requests) == 6


@pytest.mark.parametrize("with_length", [True, False])
def test_an_answer_over_10_mib_is_refused(tmp_path: Path, servers: Callable[..., Server],
                                          with_length: bool) -> None:
    body = b"[" + b" " * MAX_BYTES + b"]"
    big = servers(lambda h: (200, {"Content-Length": str(len(body))} if with_length else {},
                             body))
    done = run_job(tmp_path, {"url": big.url + "/"}, allow="127.0.0.1")
    one_line_refusal(done, "larger than 10 MiB")
    assert len(done.stdout) < 300


def test_a_failed_connection_is_one_line(tmp_path: Path) -> None:
    done = run_job(tmp_path, {"url": "http://127.0.0.1:1/"}, allow="127.0.0.1")
    one_line_refusal(done, "GET http://127.0.0.1:1/ failed", "ConnectionRefusedError")
