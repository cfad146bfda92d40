"""A small keep-alive HTTP/1.1 client for the agent's JSON posts (claims, finishes, log
flushes, the in-script verbs' calls).

A short job costs its agent about one request; through aiohttp's client that request
took some 0.6 ms of the agent's CPU (request and response objects, tracing hooks,
cookie jar, timers), a sixth of everything an agent spends per run. This client writes
the request in one send on a connection kept open between calls and reads a
Content-Length (or chunked) answer: a few dozen microseconds. Connections are pooled,
since a log flush, a verb's call and the job's finish may be in flight at once.
Artifact transfers, which stream bytes, keep using aiohttp (AgentAPI.http)."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

# The most bytes a response header block or its body may take (a grant carries a
# script, its input and its memos).
MAX_BODY = 256 << 20
LINE_LIMIT = 64 << 10
# Idle connections kept for reuse (one job at a time needs two or three).
KEEP_IDLE = 4


class ProtocolError(OSError):
    """The server's answer was not HTTP/1.1 as expected (or the connection was cut)."""


class Http1Client:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        host = self._host if ":" not in self._host else f"[{self._host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
        fixed = {"Host": host, "Content-Type": "application/json", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._ssl: ssl.SSLContext | None = None

    async def post_json(self, path: str, body: dict[str, Any],
                        timeout: float) -> tuple[int, Any]:
        """POSTs `body` as JSON; returns (status, decoded JSON body or None). Raises
        TimeoutError, OSError (ProtocolError for a malformed or cut answer)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        request = (f"POST {self._prefix}{path} HTTP/1.1\r\n{self._head}"
                   f"Content-Length: {len(data)}\r\n\r\n").encode("latin-1") + data
        async with asyncio.timeout(timeout):
            while self._idle:
                conn = self._idle.pop()
                if conn[0].at_eof() or conn[1].is_closing():
                    conn[1].close()
                    continue
                try:
                    return await self._exchange(conn, request)
                except _Unanswered:
                    continue  # the server had closed this idle connection: try another
            conn = await self._open()
            try:
                return await self._exchange(conn, request)
            except _Unanswered as exc:
                raise ProtocolError("the server closed the connection without answering") \
                    from exc

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        return await asyncio.open_connection(
            self._host, self._port, ssl=self._ssl if self._tls else None, limit=LINE_LIMIT)

    async def _exchange(self, conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                        request: bytes) -> tuple[int, Any]:
        reader, writer = conn
        keep = done = False
        try:
            writer.write(request)
            try:
                status_line = await reader.readline()
            except ConnectionError:
                status_line = b""
            if not status_line:
                raise _Unanswered
            parts = status_line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"bad status line {status_line[:80]!r}")
            status = int(parts[1])
            length: int | None = None
            chunked = False
            keep = parts[0] == b"HTTP/1.1"
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    raise ProtocolError("the answer's headers were cut")
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                value = value.strip()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = value.lower() == b"chunked"
                elif name == b"connection":
                    keep = value.lower() != b"close"
            if status == 204 or status == 304 or 100 <= status < 200:
                raw = b""
            elif chunked:
                raw = await _read_chunked(reader)
            elif length is not None:
                if length > MAX_BODY:
                    raise ProtocolError("answer too large")
                raw = await reader.readexactly(length)
            else:
                raw = await reader.read(MAX_BODY)
                keep = False
            done = True
        except asyncio.IncompleteReadError as exc:
            raise ProtocolError("the server closed the connection mid-answer") from exc
        except ValueError as exc:  # a bad length, or a line over the limit
            raise ProtocolError(f"malformed answer: {exc}") from exc
        finally:
            if not (done and keep):  # a cut, failed or timed-out exchange: never reused
                writer.close()
        if keep and len(self._idle) < KEEP_IDLE:
            self._idle.append(conn)
        elif keep:
            writer.close()
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, None


class _Unanswered(Exception):
    """Not a byte came back: a reused connection the server had already closed."""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"x", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        if len(out) + size > MAX_BODY:
            raise ProtocolError("answer too large")
        out += await reader.readexactly(size)
        await reader.readexactly(2)
