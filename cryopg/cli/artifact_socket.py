"""`cryopg artifact put|get|list` inside a run: the agent socket, without click.

A job may call these often, and starting the whole CLI (click and every command group)
cost some 0.25 s a call, several times the put or get itself; entry.py sends plainly
valid calls here first, and anything else (--help, a missing file, a bad option) to
the click command in artifacts.py, which uses the same functions.

The bytes ride the socket after the request line (put) or the reply line (get), as
agent/artifacts.py describes; a download lands by rename only once its SHA-256 matched.
"""

from __future__ import annotations

import os
import sys

from cryopg.cli import lean

# Only what starts in no time (a cold `import json, tempfile, pathlib, typing, hashlib`
# took longer than the put itself): lean.py's json and socket, OpenSSL's SHA-256.
try:
    from _hashlib import openssl_sha256 as sha256
except ImportError:
    from hashlib import sha256
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

CHUNK = 1 << 20
# Codes that mean the caller asked for something it cannot have: exit 2.
REFUSALS = frozenset({"bad_request", "invalid_argument", "artifact_quota", "not_found",
                      "run_not_found"})


class ArtifactError(Exception):
    """One line for the user; exit 2 for a refusal, 1 for anything else."""

    def __init__(self, message: str, code: str = "error") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = 2 if code in REFUSALS else 1


def _connect(path: str) -> Any:
    sock = lean.unix_socket()
    try:
        sock.connect(path)
    except OSError as e:
        sock.close()
        raise ArtifactError(f"cannot reach the agent at {path} ({e.strerror or e})") from None
    return sock


class _Stream:
    """Reads of a socket that lean.py gives bare (_socket has no makefile): a reply
    line, then raw bytes."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._buf = b""

    def readline(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = self._sock.recv(CHUNK)
            if not chunk:
                line, self._buf = self._buf, b""
                return line
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line + b"\n"

    def read(self, n: int) -> bytes:
        if not self._buf:
            return bytes(self._sock.recv(n))
        out, self._buf = self._buf[:n], self._buf[n:]
        return out


def _read_line(stream: _Stream) -> dict[str, Any]:
    line = stream.readline()
    if not line.strip():
        raise ArtifactError("the agent closed the connection without a reply")
    try:
        reply = lean.loads(line)
    except ValueError:
        raise ArtifactError("the agent sent a malformed reply") from None
    if not isinstance(reply, dict):
        raise ArtifactError("the agent sent a malformed reply")
    if not reply.get("ok"):
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {}
        raise ArtifactError(str(err.get("message") or "the agent refused the request"),
                            str(err.get("code") or "error"))
    return reply


def socket_put(path: str, name: str, source: str | os.PathLike[str],
               key: str | None, public: bool = False) -> dict[str, Any]:
    st = os.stat(source)
    size = st.st_size
    sock = _connect(path)
    try:
        with open(source, "rb") as fh:
            request = {"op": "artifact.put", "name": name, "key": key, "size": size,
                       **({"public": True} if public else {}),
                       **({"executable": True} if is_executable(st.st_mode) else {})}
            sock.sendall(lean.dumps(request).encode() + b"\n")
            sent = 0
            while chunk := fh.read(CHUNK):
                sock.sendall(chunk[: size - sent])
                sent += len(chunk)
                if sent >= size:
                    break
            if sent < size:
                raise ArtifactError(f"{os.fspath(source)} shrank while it was sent")
            return _read_line(_Stream(sock))
    except OSError as e:
        raise ArtifactError(f"lost the agent connection ({e.strerror or e})") from None
    finally:
        sock.close()


def socket_get(path: str, name: str, dest: str | os.PathLike[str], key: str | None,
               run: str | None, tainted: bool = False) -> dict[str, Any]:
    sock = _connect(path)
    try:
        stream = _Stream(sock)
        request = {"op": "artifact.get", "name": name, "key": key, "run": run,
                   **({"tainted": True} if tainted else {})}
        sock.sendall(lean.dumps(request).encode() + b"\n")
        head = _read_line(stream)
        land(dest, _exactly(stream, int(head["size"])), str(head["sha256"]),
             executable=head.get("executable") is True)
        return head
    except OSError as e:
        raise ArtifactError(f"lost the agent connection ({e.strerror or e})") from None
    finally:
        sock.close()


def socket_call(path: str, request: dict[str, Any]) -> dict[str, Any]:
    sock = _connect(path)
    try:
        sock.sendall(lean.dumps(request).encode() + b"\n")
        return _read_line(_Stream(sock))
    except OSError as e:
        raise ArtifactError(f"lost the agent connection ({e.strerror or e})") from None
    finally:
        sock.close()


def _exactly(stream: _Stream, size: int) -> Iterator[bytes]:
    left = size
    while left:
        chunk = stream.read(min(CHUNK, left))
        if not chunk:
            raise ArtifactError(f"the download stopped after {size - left} of {size} bytes")
        left -= len(chunk)
        yield chunk


def is_executable(mode: int) -> bool:
    """What an artifact keeps of a file's mode: whether its owner may execute it."""
    return bool(mode & 0o100)


def land(dest: str | os.PathLike[str], chunks: Iterator[bytes], sha256_hex: str, *,
         executable: bool = False) -> None:
    """Chunks into a temporary file beside dest, renamed over it once the digest holds,
    with a new file's mode (0666 less the umask), plus x where r is when it was put
    executable."""
    dest = os.fspath(dest)
    folder = os.path.dirname(dest) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(dest)}.{os.urandom(6).hex()}")
    digest = sha256()
    try:
        with open(tmp, "xb") as out:
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256_hex:
            raise ArtifactError(f"the bytes received do not match SHA-256 {sha256_hex}")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, (0o777 if executable else 0o666) & ~umask)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        import json  # (the one place that needs its indent)

        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        where = f"key={row['key']}" if row.get("key") else row.get("run_id") or ""
        print(f"{row['name']}\t{row['size']}\t{row['sha256'][:12]}\t{where}")


# -- the fast path ----------------------------------------------------------------------

def _parse(args: list[str], flags: set[str],
           options: set[str]) -> tuple[list[str], dict[str, Any]] | None:
    """Positional arguments and options; None for anything click should judge."""
    positional: list[str] = []
    found: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1:]
            break
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in flags and not eq and name not in found:
                found[name] = True
            elif name in options and name not in found:
                if not eq:
                    i += 1
                    if i == len(args):
                        return None
                    value = args[i]
                found[name] = value
            else:
                return None
        else:
            positional.append(arg)
        i += 1
    return positional, found


def fast(argv: list[str]) -> int | None:
    """`cryopg artifact ...` with CRYO_SOCKET set: the exit code, or None to hand the
    call to click (help, usage errors, a path that is not a file)."""
    sock = os.environ.get("CRYO_SOCKET")
    if not sock or len(argv) < 2:
        return None
    verb, args = argv[1], argv[2:]
    try:
        if verb == "put":
            got = _parse(args, {"--public"}, {"--key"})
            if got is None or len(got[0]) != 2 or not os.path.isfile(got[0][1]):
                return None
            (name, path), opts = got
            row = socket_put(sock, name, path, opts.get("--key"), bool(opts.get("--public")))
            print(f"{row['sha256']}\t{row['size']}\t{name}")
        elif verb == "get":
            got = _parse(args, {"--tainted"}, {"--key", "--run"})
            if got is None or not 1 <= len(got[0]) <= 2 or len(
                    [o for o in got[1] if o != "--tainted"]) > 1:
                return None
            pos, opts = got
            dest = pos[1] if len(pos) == 2 else pos[0].rsplit("/", 1)[-1]
            socket_get(sock, pos[0], dest, opts.get("--key"), opts.get("--run"),
                       bool(opts.get("--tainted")))
        elif verb == "list":
            got = _parse(args, {"--cached", "--json", "--tainted"}, set())
            if got is None or len(got[0]) > 1:
                return None
            pos, opts = got
            request: dict[str, Any] = {"op": "artifact.list", "run": pos[0] if pos else None}
            if opts.get("--cached"):
                request["cached"] = True
            if opts.get("--tainted"):
                request["tainted"] = True
            print_rows(socket_call(sock, request)["artifacts"], bool(opts.get("--json")))
        else:
            return None
    except ArtifactError as e:
        print(f"Error: {e.message}", file=sys.stderr)
        return e.exit_code
    return 0
