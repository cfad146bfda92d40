"""Artifacts from a Python script: `script.artifact_put|artifact_get|artifact_list`.

The agent socket's one exception to one-JSON-line-each-way: a put's request line says
`size` and the file's bytes follow it; a get's reply line says `size` and `sha256` and
the bytes follow it. Files move a chunk at a time, and a download replaces PATH only
once its SHA-256 matched.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

from cryosleep._client import Client, _connect
from cryosleep.errors import AgentUnavailable, ScriptError

CHUNK = 1 << 20


def _reply(stream: Any, op: str) -> dict[str, Any]:
    line = stream.readline()
    if not line.strip():
        raise AgentUnavailable(f"the agent closed the connection without answering {op}")
    try:
        reply = json.loads(line)
    except ValueError:
        raise AgentUnavailable(f"the agent sent a malformed reply to {op}") from None
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        err = reply.get("error") if isinstance(reply, dict) else None
        code = str(err.get("code") or "error") if isinstance(err, dict) else "error"
        message = str(err.get("message") or "") if isinstance(err, dict) else ""
        raise ScriptError(code, message or f"the agent refused {op}")
    return reply


def put(client: Client, name: str, path: str | os.PathLike[str],
        key: str | None = None, public: bool = False) -> dict[str, Any]:
    st = os.stat(path)
    size = st.st_size
    sock = _connect(client.path)
    try:
        with sock, sock.makefile("rb") as stream, open(path, "rb") as fh:
            head = {"op": "artifact.put", "name": name, "key": key, "size": size,
                    **({"public": True} if public else {}),
                    # the x bit is kept: a get makes an executable file executable again
                    **({"executable": True} if st.st_mode & 0o100 else {})}
            sock.sendall(json.dumps(head).encode() + b"\n")
            left = size
            while left and (chunk := fh.read(min(CHUNK, left))):
                sock.sendall(chunk)
                left -= len(chunk)
            if left:
                raise ScriptError("bad_request", f"{os.fspath(path)} shrank while it was sent")
            return _reply(stream, "artifact.put")
    except OSError as e:
        raise AgentUnavailable(f"lost the agent connection ({e.strerror or e})") from None


def get(client: Client, name: str, path: str | os.PathLike[str] | None = None, *,
        key: str | None = None, run: str | None = None, tainted: bool = False) -> str:
    dest = os.fspath(path) if path is not None else name.rsplit("/", 1)[-1]
    sock = _connect(client.path)
    try:
        with sock, sock.makefile("rb") as stream:
            request = {"op": "artifact.get", "name": name, "key": key, "run": run,
                       **({"tainted": True} if tainted else {})}
            sock.sendall(json.dumps(request).encode() + b"\n")
            head = _reply(stream, "artifact.get")
            folder = os.path.dirname(dest) or "."
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".artifact-", dir=folder)
            try:
                digest, left = hashlib.sha256(), int(head["size"])
                with os.fdopen(fd, "wb") as out:
                    while left:
                        chunk = stream.read(min(CHUNK, left))
                        if not chunk:
                            raise AgentUnavailable("the artifact download stopped short")
                        digest.update(chunk)
                        out.write(chunk)
                        left -= len(chunk)
                if digest.hexdigest() != head["sha256"]:
                    raise AgentUnavailable("the artifact's bytes do not match its SHA-256")
                # A new file's mode (mkstemp's is 0600), with x where r is when it was put
                # executable.
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, (0o777 if head.get("executable") is True else 0o666) & ~umask)
                os.replace(tmp, dest)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return dest
    except OSError as e:
        raise AgentUnavailable(f"lost the agent connection ({e.strerror or e})") from None


def list_(client: Client, run: str | None = None, cached: bool = False) -> list[dict[str, Any]]:
    reply = client.call({"op": "artifact.list", "run": run, "cached": cached})
    rows = reply.get("artifacts")
    return rows if isinstance(rows, list) else []
