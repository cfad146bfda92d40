"""`cryopg artifact put|get|list`: inside a run through the agent socket, outside one
through the user API (cached `--key` artifacts, and any run's artifacts to read).

Inside a run the bytes ride the socket after the request line (put) or the reply line
(get), as agent/artifacts.py describes; outside, they are the body of an HTTP request or
response. Either way a file is read and written a chunk at a time, and a download lands
by rename only once its SHA-256 matched.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

import click

CHUNK = 1 << 20
# Codes that mean the caller asked for something it cannot have: exit 2.
REFUSALS = frozenset({"bad_request", "invalid_argument", "artifact_quota", "not_found",
                      "run_not_found"})


class Refused(click.ClickException):
    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.exit_code = 2 if code in REFUSALS else 1


# -- inside a run: the agent socket ---------------------------------------------------

def _socket_path() -> str | None:
    return os.environ.get("CRYO_SOCKET") or None


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        raise Refused(f"cannot reach the agent at {path} ({e.strerror or e})") from None
    return sock


def _read_line(stream: BinaryIO) -> dict[str, Any]:
    line = stream.readline()
    if not line.strip():
        raise Refused("the agent closed the connection without a reply")
    try:
        reply = json.loads(line)
    except ValueError:
        raise Refused("the agent sent a malformed reply") from None
    if not isinstance(reply, dict):
        raise Refused("the agent sent a malformed reply")
    if not reply.get("ok"):
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        raise Refused(str(err.get("message") or "the agent refused the request"),
                      str(err.get("code") or "error"))
    return reply


def socket_put(path: str, name: str, source: Path, key: str | None,
               public: bool = False) -> dict[str, Any]:
    size = source.stat().st_size
    sock = _connect(path)
    try:
        with sock, sock.makefile("rb") as replies, open(source, "rb") as fh:
            request = {"op": "artifact.put", "name": name, "key": key, "size": size,
                       **({"public": True} if public else {})}
            sock.sendall(json.dumps(request).encode() + b"\n")
            sent = 0
            while chunk := fh.read(CHUNK):
                sock.sendall(chunk[: size - sent])
                sent += len(chunk)
                if sent >= size:
                    break
            if sent < size:
                raise Refused(f"{source} shrank while it was sent")
            return _read_line(replies)
    except OSError as e:
        raise Refused(f"lost the agent connection ({e.strerror or e})") from None


def socket_get(path: str, name: str, dest: Path, key: str | None,
               run: str | None, tainted: bool = False) -> dict[str, Any]:
    sock = _connect(path)
    try:
        with sock, sock.makefile("rb") as stream:
            request = {"op": "artifact.get", "name": name, "key": key, "run": run,
                       **({"tainted": True} if tainted else {})}
            sock.sendall(json.dumps(request).encode() + b"\n")
            head = _read_line(stream)
            _land(dest, _exactly(stream, int(head["size"])), str(head["sha256"]))
            return head
    except OSError as e:
        raise Refused(f"lost the agent connection ({e.strerror or e})") from None


def socket_call(path: str, request: dict[str, Any]) -> dict[str, Any]:
    sock = _connect(path)
    with sock, sock.makefile("rb") as stream:
        sock.sendall(json.dumps(request).encode() + b"\n")
        return _read_line(stream)


def _exactly(stream: BinaryIO, size: int) -> Iterator[bytes]:
    left = size
    while left:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            raise Refused(f"the download stopped after {size - left} of {size} bytes")
        left -= len(chunk)
        yield chunk


def _land(dest: Path, chunks: Iterator[bytes], sha256: str) -> None:
    """Chunks into a temporary file beside dest, renamed over it once the digest holds."""
    folder = dest.parent if str(dest.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=folder)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise Refused(f"the bytes received do not match SHA-256 {sha256}")
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- outside a run: the user API -------------------------------------------------------

def _http(method: str, path: str, *, query: dict[str, str] | None = None,
          data: Any = None, headers: dict[str, str] | None = None) -> Any:
    from cryopg.cli.target import resolve

    target = resolve()
    url = target.url + target.project_path + path + (f"?{urlencode(query)}" if query else "")
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {target.token}", **(headers or {})})
    try:
        return urllib.request.urlopen(req, timeout=None)
    except urllib.error.HTTPError as exc:
        try:
            err = json.loads(exc.read())["error"]
            raise Refused(err["message"], err.get("code", "error")) from None
        except (ValueError, KeyError, TypeError):
            raise Refused(f"server answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Refused(f"cannot reach the cryopg server at {target.url}: "
                      f"{getattr(exc, 'reason', exc)}") from None


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
    query = {"key": key, **({"public": "1"} if public else {})}
    with open(source, "rb") as fh, _http("PUT", f"/artifacts/{quote(name, safe='')}",
                                         query=query, data=fh, headers=headers) as resp:
        return json.loads(resp.read())


def http_get(name: str, dest: Path, key: str | None, run: str | None,
             tainted: bool = False) -> None:
    if run is not None:
        path, query = f"/runs/{quote(run, safe=':')}/artifacts/{quote(name, safe='')}", {}
    else:
        path, query = f"/artifacts/{quote(name, safe='')}", {"key": key or ""}
        if tainted:
            query["tainted"] = "1"
    # Through the server (a redirect would carry the bearer token to the store).
    with _http("GET", path, query={**query, "redirect": "0"}) as resp:
        _land(dest, iter(lambda: resp.read(CHUNK), b""), resp.headers["X-Cryo-SHA256"])


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
        row = socket_put(sock, name, path, key, public)
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
        socket_get(sock, name, dest, key, run, tainted)
        return
    _not_in_step()
    if key is None and run is None:
        raise Refused("outside a run name the artifact's --run RUN or --key KEY", "bad_request")
    http_get(name, dest, key, _qualify(run), tainted)


@artifact.command("list")
@click.argument("run", required=False)
@click.option("--cached", is_flag=True, help="List the project's cached (--key) artifacts.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_cmd(run: str | None, cached: bool, as_json: bool) -> None:
    """List a run's artifacts (inside a run: this run's), or the cached ones."""
    sock = _socket_path()
    if sock:
        request: dict[str, Any] = {"op": "artifact.list", "run": run}
        if cached:
            request["cached"] = True
        rows = socket_call(sock, request)["artifacts"]
    else:
        _not_in_step()
        run = _qualify(run)
        if run is not None and not cached:
            path = f"/runs/{quote(run, safe=':')}/artifacts"
        else:
            path = "/artifacts"
        with _http("GET", path) as resp:
            rows = json.loads(resp.read())["artifacts"]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        where = f"key={row['key']}" if row.get("key") else row.get("run_id") or ""
        click.echo(f"{row['name']}\t{row['size']}\t{row['sha256'][:12]}\t{where}")


def _not_in_step() -> None:
    from cryopg.cli.inscript_client import inside_run

    if inside_run():
        raise Refused("no agent socket here: this is a step's body, and artifacts are put "
                      "and got by the script itself, not inside a step", "bad_request")

