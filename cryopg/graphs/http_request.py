"""The job an http or connector node runs on a connector agent: the request it was given
(as the run's input), and its answer printed as one line of JSON: {status, headers, body}.
A connector node's request names its connection's auth scheme and secret (`auth`); the
value comes from this job's environment (its claim grant) and goes to the URL's origin
only.
A status of 400 or more exits 1, so the node fails and its retry can cover it.

Every hop (the URL, then each redirect, at most MAX_REDIRECTS) passes the egress
policy (cryopg/egress.py) before anything is sent, and is fetched from the address
that was checked. A refusal, an answer over MAX_BYTES or a network failure is one
line ("http node: ...") and exit 1, with nothing of the response printed.

The agent's python3 need not have cryopg installed: the server ships this file with
the policy inlined (job_source), registered as the module `cryo_egress`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any
from urllib.parse import urljoin

if "cryo_egress" in sys.modules:  # shipped by job_source(): the server's own policy
    egress: Any = sys.modules["cryo_egress"]
else:
    from cryopg import egress

MAX_REDIRECTS = 5
MAX_BYTES = 10 * 1024 * 1024
TIMEOUT = 60
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Sent to the URL's origin only, never carried to another one by a redirect.
CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})


class Failed(Exception):
    """The node's one-line error."""


def fetch(method: str, url: str, headers: dict[str, str], data: bytes | None,
          allow: Any = None, resolve: Any = None,
          credentials: frozenset[str] = CREDENTIALS) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the last hop; raises egress.Refused or Failed. The
    `credentials` headers (lower-case names) are dropped at a hop to another origin."""
    kwargs = {"resolve": resolve} if resolve is not None else {}
    origin = None
    for hop in range(MAX_REDIRECTS + 1):
        target = egress.check_url(url, allow=allow, **kwargs)
        here = (target.scheme, target.host, target.port)
        if origin is not None and here != origin:
            headers = {k: v for k, v in headers.items() if k.lower() not in credentials}
        origin = here
        conn = egress.connection(target, TIMEOUT)
        try:
            conn.request(method, target.path, body=data, headers=headers)
            resp = conn.getresponse()
            location = resp.getheader("Location")
            if resp.status in REDIRECTS and location:
                if hop == MAX_REDIRECTS:
                    raise Failed(f"more than {MAX_REDIRECTS} redirects")
                url = urljoin(url, location.strip())
                if resp.status == 303 or (resp.status in (301, 302)
                                          and method not in ("GET", "HEAD")):
                    method, data = ("HEAD" if method == "HEAD" else "GET"), None
                    headers = {k: v for k, v in headers.items()
                               if k.lower() not in ("content-type", "content-length")}
                continue
            length = resp.getheader("Content-Length")
            if length and length.isdigit() and int(length) > MAX_BYTES:
                raise Failed(f"the response is larger than {MAX_BYTES // (1024 * 1024)} MiB")
            raw = resp.read(MAX_BYTES + 1)
            if len(raw) > MAX_BYTES:
                raise Failed(f"the response is larger than {MAX_BYTES // (1024 * 1024)} MiB")
            return resp.status, dict(resp.headers), raw
        finally:
            conn.close()
    raise AssertionError("unreachable")


def with_secrets(value: str, names: list[str]) -> str:
    """A header value with ${NAME} replaced by the project secret NAME, for the names the
    node lists: the agent has them in its environment from this job's claim grant (and
    redacts them from the log). A name it was not given fails the node, in one line."""
    for name in names:
        hole = "${" + str(name) + "}"
        if hole in value:
            if name not in os.environ:
                raise Failed(f"secret {name} is not available to this node (untrusted run, "
                             "or no such project secret)")
            value = value.replace(hole, os.environ[name])
    return value


def credential(auth: dict[str, Any]) -> tuple[str, str] | None:
    """(header, value) a connector node's connection authenticates with, its secret read
    from the environment the claim grant gave this job (and that the agent redacts from
    the log); None for a connection without one. A secret this job was not given fails
    the node in one line."""
    scheme, secret = auth.get("scheme"), auth.get("secret")
    if scheme in (None, "none"):
        return None
    name = auth.get("connection")
    if not isinstance(secret, str) or secret not in os.environ:
        raise Failed(f"connection {name}: secret {secret} is not available to this node "
                     "(untrusted run, or no such project secret)")
    value = os.environ[secret]
    if scheme == "bearer":
        return "Authorization", f"Bearer {value}"
    if scheme == "basic":
        import base64

        pair = f"{auth.get('username') or ''}:{value}".encode()
        return "Authorization", "Basic " + base64.b64encode(pair).decode()
    if scheme == "header" and isinstance(auth.get("header"), str):
        return str(auth["header"]), value
    raise Failed(f"connection {name}: unknown auth scheme {scheme}")


def run(req: dict[str, Any]) -> int:
    url, method = req.get("url"), str(req.get("method") or "GET").upper()
    if not isinstance(url, str) or not url:
        raise Failed("the request has no url")
    body = req.get("body")
    data = None
    headers = {str(k): with_secrets(str(v), req.get("secrets") or [])
               for k, v in (req.get("headers") or {}).items()}
    credentials = CREDENTIALS
    auth = credential(req["auth"]) if isinstance(req.get("auth"), dict) else None
    if auth is not None:  # the connection's, over any node header of that name
        headers = {k: v for k, v in headers.items() if k.lower() != auth[0].lower()}
        headers[auth[0]] = auth[1]
        credentials = CREDENTIALS | {auth[0].lower()}
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        if not isinstance(body, str) and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    try:
        status, got_headers, raw = fetch(method, url, headers, data, credentials=credentials)
    except (egress.Refused, Failed):
        raise
    except Exception as exc:  # network, TLS, protocol: one line, never a traceback
        why = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise Failed(f"{method} {url} failed: {why}"[:500]) from None
    text = raw.decode("utf-8", errors="replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    print(json.dumps({"status": status, "headers": got_headers, "body": parsed}))
    return 0 if status < 400 else 1


def main() -> int:
    who = "http node"
    try:
        with open(os.environ["CRYO_INPUT_FILE"], encoding="utf-8") as f:
            req = json.load(f)
        if not isinstance(req, dict):
            raise Failed("the request is not an object")
        if isinstance(req.get("auth"), dict):
            who = "connector node"
        return run(req)
    except egress.Refused as exc:
        print(exc.line(who))
    except Failed as exc:
        print(f"{who}: {exc}")
    except Exception as exc:  # a bad input file: still one line
        print(f"{who}: {type(exc).__name__}: {exc}".splitlines()[0])
    return 1


def job_source() -> str:
    """This file as the one script an agent runs, with cryopg/egress.py inlined."""
    from pathlib import Path

    here = Path(__file__).resolve()
    policy = (here.parent.parent / "egress.py").read_text()
    own = here.read_text()
    future = "from __future__ import annotations\n"
    prelude = ("import sys as _sys, types as _types\n"
               "_egress = _sys.modules['cryo_egress'] = _types.ModuleType('cryo_egress')\n"
               f"exec(compile({policy!r}, 'cryopg/egress.py', 'exec'), _egress.__dict__)\n")
    assert future in own and "from __future__" in policy
    return own.replace(future, future + prelude, 1)


if __name__ == "__main__":
    sys.exit(main())
