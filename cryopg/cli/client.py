"""A small synchronous HTTP client for the user API (stdlib only, so the CLI starts fast)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import click

from cryopg.cli.target import Target

# The server refused the request: bad input (a graph that does not compile, a reserved
# key, a body too large), a name it does not know (a run, node, workflow, schedule) or a
# conflict with what is there (a workflow a trigger still starts, a finished run): exit
# 2, as for any usage error. An unreachable server, a token it does not accept (401, 403)
# and its own failures (5xx) are 1.
REFUSED_STATUSES = frozenset({400, 404, 409, 413, 422})
# A 403 that is the request's own fault, not the token's: a member outside an approval's
# role or group.
REFUSED_CODES = frozenset({"not_an_approver"})


class ApiError(click.ClickException):
    def __init__(self, message: str, code: str = "error", status: int = 0) -> None:
        super().__init__(message)
        self.code, self.status = code, status
        self.exit_code = 2 if status in REFUSED_STATUSES or code in REFUSED_CODES else 1


def valid_text(value: str, what: str) -> str:
    """`value` when it is text a server can take: a command-line argument that is not
    valid UTF-8 reaches Python as lone surrogates, which nothing can encode."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "backslashreplace").decode("ascii", "replace")
        raise click.ClickException(f"{what} {shown[:80]!r} is not valid UTF-8") from None
    if "\x00" in value:
        raise click.ClickException(f"{what} must not hold a NUL character")
    return value


def part(value: str, what: str = "a name") -> str:
    """One path segment, percent-encoded (a ':' is kept: run ids read better with it),
    so a '/', '?' or '#' in a name stays in the name."""
    return quote(valid_text(value, what), safe=":")


class Client:
    def __init__(self, target: Target) -> None:
        self.target = target

    def _request(self, method: str, path: str, body: Any = None,
                 timeout: float | None = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        valid_text(path, "the path")
        req = urllib.request.Request(
            self.target.url + quote(path, safe="/:?&=%+,;@!$'()*~"), data=data, method=method,
            headers={"Authorization": f"Bearer {self.target.token}",
                     "Content-Type": "application/json"})
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read())["error"]
                raise ApiError(err["message"], err.get("code", "error"), exc.code) from None
            except (ValueError, KeyError, TypeError):
                raise ApiError(f"server answered {exc.code} {exc.reason}",
                               status=exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(
                f"cannot reach the cryopg server at {self.target.url}: {reason}") from None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        with self._request(method, self.target.project_path + path, body) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else {}

    def stream(self, path: str) -> Iterator[bytes]:
        with self._request("GET", self.target.project_path + path, timeout=None) as resp:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    return
                yield chunk
