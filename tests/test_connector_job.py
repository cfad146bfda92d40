"""A connector node's request as the shipped job makes it (a bare `python3 -I`): the
connection's credential from the job's environment in the scheme's header, sent to the
URL's origin only (a redirect elsewhere drops even a custom header), and a secret the
job was not given failing it in one line, before any request."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryopg.graphs.http_request import job_source
from tests.test_http_node_job import Server, ok, redirect, servers  # noqa: F401 (fixture)

VALUE = "conn-credential-7d2f9a"


def run(tmp_path: Path, url: str, auth: dict[str, Any], secret: str | None = VALUE,
        allow: str = "127.0.0.1") -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.py").write_text(job_source())
    (tmp_path / "input.json").write_text(json.dumps({"url": url, "headers": {"X-Api-Key": "n"},
                                                     "auth": {"connection": "svc", **auth}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRYOPG_")}
    env.update(CRYO_INPUT_FILE=str(tmp_path / "input.json"), CRYOPG_EGRESS_ALLOW=allow)
    if secret is not None:
        env["SVC_KEY"] = secret
    return subprocess.run(["python3", "-I", str(tmp_path / "job.py")], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_each_scheme_sends_the_credential(tmp_path: Path,
                                          servers: Callable[..., Server]) -> None:  # noqa: F811
    srv = servers(ok())
    for auth, header, want in (
            ({"scheme": "bearer", "secret": "SVC_KEY"}, "Authorization", f"Bearer {VALUE}"),
            ({"scheme": "basic", "secret": "SVC_KEY", "username": "ann"}, "Authorization",
             "Basic " + base64.b64encode(f"ann:{VALUE}".encode()).decode()),
            ({"scheme": "header", "secret": "SVC_KEY", "header": "X-Api-Key"}, "X-Api-Key",
             VALUE)):  # over the node's own header of that name
        done = run(tmp_path, srv.url + "/x", auth)
        assert done.returncode == 0, done
        assert srv.requests[-1]["headers"][header] == want


def test_a_redirect_to_another_origin_drops_a_custom_credential_header(
        tmp_path: Path, servers: Callable[..., Server]) -> None:  # noqa: F811
    inner = servers(ok(b'"inner"'), host="127.0.0.2")
    outer = servers(redirect(inner.url + "/there"))
    done = run(tmp_path, outer.url + "/", {"scheme": "header", "secret": "SVC_KEY",
                                           "header": "X-Api-Key"}, allow="127.0.0.1,127.0.0.2")
    assert done.returncode == 0, done
    assert outer.requests[0]["headers"]["X-Api-Key"] == VALUE
    assert "X-Api-Key" not in inner.requests[0]["headers"]


def test_a_secret_not_given_fails_in_one_line_before_any_request(
        tmp_path: Path, servers: Callable[..., Server]) -> None:  # noqa: F811
    srv = servers(ok())
    done = run(tmp_path, srv.url + "/", {"scheme": "bearer", "secret": "SVC_KEY"}, secret=None)
    assert done.returncode == 1 and srv.requests == []
    assert done.stdout.strip() == ("connector node: connection svc: secret SVC_KEY is not "
                                   "available to this node (untrusted run, or no such project "
                                   "secret)")
