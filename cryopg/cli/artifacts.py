"""`cryopg artifact put|get|list`: inside a run through the agent socket, outside one
through the user API (cached `--key` artifacts, and any run's artifacts to read).

Inside a run the bytes ride the socket after the request line (put) or the reply line
(get), as agent/artifacts.py describes; outside, they are the body of an HTTP request or
response. Either way a file is read and written a chunk at a time, and a download lands
by rename only once its SHA-256 matched.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import click

from cryopg.artifacts.settings import CLIENT_TIMEOUT_ENV, client_timeout
from cryopg.cli import artifact_socket as inside
from cryopg.cli.artifact_socket import CHUNK, REFUSALS, ArtifactError

T = TypeVar("T")


class Refused(click.ClickException):
    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.exit_code = 2 if code in REFUSALS else 1


def _socket_path() -> str | None:
    return os.environ.get("CRYO_SOCKET") or None


def _inside(call: Any, *args: Any, **kwargs: Any) -> Any:
    """A call of artifact_socket.py (inside a run), its error as click's."""
    try:
        return call(*args, **kwargs)
    except ArtifactError as e:
        raise Refused(e.message, "bad_request" if e.exit_code == 2 else "error") from None


# -- outside a run: the user API -------------------------------------------------------

ONWARD_BYTES_PER_SECOND = 4 << 20  # the least rate a server moves a put on to its store


class _Unavailable(Exception):
    """The server did not answer, or answered that it or its store cannot now."""


def _retrying(what: str, call: Callable[[], T]) -> T:
    """`call` again while the server or its store is away, for CRYOPG_ARTIFACTS_TIMEOUT
    seconds from the first failure; then one line. A put is the same bytes at the same
    address each time, a get lands only whole, so a retry repeats nothing."""
    budget = client_timeout()
    deadline: float | None = None
    delay = 0.2
    while True:
        try:
            return call()
        except _Unavailable as e:
            now = time.monotonic()
            deadline = deadline or now + budget
            if now + delay >= deadline:
                raise Refused(f"{what} failed: {e} (retried for {budget:g} s, "
                              f"{CLIENT_TIMEOUT_ENV})") from None
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _http(method: str, path: str, *, query: dict[str, str] | None = None,
          data: Any = None, headers: dict[str, str] | None = None,
          wait: float | None = None) -> Any:
    from cryopg.cli.target import resolve

    target = resolve()
    url = target.url + target.project_path + path + (f"?{urlencode(query)}" if query else "")
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {target.token}", **(headers or {})})
    try:
        return urllib.request.urlopen(req, timeout=wait or client_timeout())
    except urllib.error.HTTPError as exc:
        try:
            err = json.loads(exc.read())["error"]
            code, message = err.get("code", "error"), " ".join(str(err["message"]).split())
        except (ValueError, KeyError, TypeError, OSError):
            code, message = "error", f"server answered {exc.code} {exc.reason}"
        if exc.code in (502, 503, 504):
            raise _Unavailable(message) from None
        raise Refused(message, code) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _Unavailable(f"the cryopg server at {target.url} does not answer "
                           f"({getattr(exc, 'reason', None) or exc or type(exc).__name__})"
                           ) from None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def http_put(name: str, source: Path, key: str, public: bool = False) -> dict[str, Any]:
    size = source.stat().st_size
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size),
               "X-Cryo-SHA256": _file_sha256(source)}
    # Its answer waits on the server moving the bytes on to the store.
    wait = client_timeout() + size / ONWARD_BYTES_PER_SECOND

    executable = inside.is_executable(source.stat().st_mode)

    def once() -> dict[str, Any]:
        query = {"key": key, **({"public": "1"} if public else {}),
                 **({"executable": "1"} if executable else {})}
        with open(source, "rb") as fh, _http("PUT", f"/artifacts/{quote(name, safe='')}",
                                             query=query, data=fh, headers=headers,
                                             wait=wait) as resp:
            try:
                return dict(json.loads(resp.read()))
            except (OSError, http.client.HTTPException) as exc:
                raise _Unavailable(f"the answer was cut ({exc or type(exc).__name__})") from None

    return _retrying(f"artifact put {name!r}", once)


def http_get(name: str, dest: Path, key: str | None, run: str | None,
             tainted: bool = False) -> None:
    if run is not None:
        path, query = f"/runs/{quote(run, safe=':')}/artifacts/{quote(name, safe='')}", {}
    else:
        path, query = f"/artifacts/{quote(name, safe='')}", {"key": key or ""}
        if tainted:
            query["tainted"] = "1"

    def once() -> None:
        # Through the server (a redirect would carry the bearer token to the store).
        with _http("GET", path, query={**query, "redirect": "0"}) as resp:
            try:
                _inside(inside.land, dest, iter(lambda: resp.read(CHUNK), b""),
                        resp.headers["X-Cryo-SHA256"],
                        executable=resp.headers.get("X-Cryo-Executable") == "1")
            except (OSError, http.client.HTTPException) as exc:
                raise _Unavailable(f"the download was cut ({exc or type(exc).__name__})"
                                   ) from None

    _retrying(f"artifact get {name!r}", once)


# -- the commands ----------------------------------------------------------------------

def _qualify(run: str | None) -> str | None:
    if run is None:
        return None
    if run.startswith("run-"):
        from cryopg.cli.target import resolve

        return resolve().qualify(run)
    return run


@click.group("artifact")
def artifact() -> None:
    """Files kept beside runs: put, get and list artifacts.

    Inside a run an artifact belongs to the run (collected with it) unless --key names
    a cached artifact of the project, kept for CRYOPG_RETENTION_ARTIFACTS. Outside a run
    put needs --key; get and list also read any run's artifacts with --run / RUN."""


@artifact.command("put")
@click.argument("name")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", help="A cache key: the project's artifact (NAME, KEY), not the run's.")
@click.option("--public", is_flag=True,
              help="Untrusted runs may read it (a trusted writer's put; docs/security/trust.md).")
def put_cmd(name: str, path: Path, key: str | None, public: bool) -> None:
    """Store the file PATH as artifact NAME; prints its SHA-256 and size."""
    sock = _socket_path()
    if sock:
        row = _inside(inside.socket_put, sock, name, path, key, public)
    else:
        _not_in_step()
        if key is None:
            raise Refused("outside a run an artifact needs --key KEY (a run's artifacts are "
                          "its own to write)", "bad_request")
        row = http_put(name, path, key, public)
    click.echo(f"{row['sha256']}\t{row['size']}\t{name}")


@artifact.command("get")
@click.argument("name")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--key", help="Get the cached artifact (NAME, KEY).")
@click.option("--run", "run", help="Get run RUN's artifact (default inside a run: this run's).")
@click.option("--tainted", is_flag=True,
              help="The one untrusted runs put, not the trusted one (docs/security/trust.md).")
def get_cmd(name: str, path: Path | None, key: str | None, run: str | None,
            tainted: bool) -> None:
    """Fetch artifact NAME into PATH (default: ./NAME's last part)."""
    if key and run:
        raise Refused("give --key or --run, not both", "bad_request")
    dest = path or Path(name.rsplit("/", 1)[-1])
    sock = _socket_path()
    if sock:
        _inside(inside.socket_get, sock, name, dest, key, run, tainted)
        return
    _not_in_step()
    if key is None and run is None:
        raise Refused("outside a run name the artifact's --run RUN or --key KEY", "bad_request")
    http_get(name, dest, key, _qualify(run), tainted)


@artifact.command("list")
@click.argument("run", required=False)
@click.option("--cached", is_flag=True, help="List the project's cached (--key) artifacts.")
@click.option("--tainted", is_flag=True,
              help="Inside a trusted run: also list cached artifacts untrusted runs put "
                   "(outside a run the list shows both, each row saying which).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(run: str | None, cached: bool, tainted: bool, as_json: bool) -> None:
    """List a run's artifacts (inside a run: this run's), or the cached ones."""
    sock = _socket_path()
    if sock:
        request: dict[str, Any] = {"op": "artifact.list", "run": run}
        if cached:
            request["cached"] = True
        if tainted:
            request["tainted"] = True
        rows = _inside(inside.socket_call, sock, request)["artifacts"]
    else:
        _not_in_step()
        run = _qualify(run)
        if run is not None and not cached:
            path = f"/runs/{quote(run, safe=':')}/artifacts"
        else:
            path = "/artifacts"
        def listed() -> list[dict[str, Any]]:
            with _http("GET", path) as resp:
                try:
                    return list(json.loads(resp.read())["artifacts"])
                except (OSError, http.client.HTTPException) as exc:
                    raise _Unavailable(f"the answer was cut ({exc})") from None

        rows = _retrying("artifact list", listed)
    inside.print_rows(rows, as_json)


def _not_in_step() -> None:
    from cryopg.cli.inscript_client import inside_run

    if inside_run():
        raise Refused("no agent socket here: this is a step's body, and artifacts are put "
                      "and got by the script itself, not inside a step", "bad_request")

