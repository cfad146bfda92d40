"""`artifact.put|get|list` on the agent socket: the one place bytes ride the socket.

A put's request line announces `size` and the script sends that many raw bytes after
it; a get's reply line announces `size` and the agent sends that many raw bytes after
it. So a job moves files through the socket it already has, confined or not, and the
agent never opens a path the job names. Bytes are spooled to a file while hashed (the
SHA-256 is the blob's address) and sent on with a signed URL or through the server;
nothing holds a whole artifact in memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import aiohttp

from agent.journal import JobHooks, VerbError
from cryopg.artifacts.settings import CLIENT_TIMEOUT_ENV, client_timeout
from cryopg.artifacts.store import CHUNK, Spool

ARTIFACT_OPS = ("artifact.put", "artifact.get", "artifact.list")
MAX_SIZE = 1 << 50
# client_timeout(): how long a put or get keeps retrying once it failed (a replica gone,
# the store down) before the script gets a one-line error; also how long one transfer
# may go without a byte moving.
CALL_SECONDS = 60.0  # one JSON call (a commit waits on the store's answer, bounded there)
CONNECT_SECONDS = 10.0
# After the bytes of a proxied upload are sent the server still moves them to the store:
# its answer may take this long per byte on top of the idle bound.
ONWARD_BYTES_PER_SECOND = 4 << 20
T = TypeVar("T")


class Transient(Exception):
    """A failure another try may get past: a server that does not answer (the next try
    goes to the next URL the agent was given), or a store that does not."""


def _line(text: str) -> str:
    return " ".join(text.split())


def _brief(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):  # its text repeats the address
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = _line(str(exc))
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _name_fields(req: dict[str, Any]) -> dict[str, Any]:
    name = req.get("name")
    if not isinstance(name, str) or not name:
        raise VerbError("bad_request", "an artifact needs a non-empty string 'name'")
    fields: dict[str, Any] = {"name": name}
    for field in ("key", "run"):
        value = req.get(field)
        if value is not None and (not isinstance(value, str) or not value):
            raise VerbError("bad_request", f"'{field}' must be a non-empty string or null")
        if value is not None:
            fields[field] = value
    # Trust opt-ins (docs/security/trust.md), and a put's file mode's x bit.
    for opt in ("public", "tainted", "executable"):
        if req.get(opt) is True:
            fields[opt] = True
    return fields


class ArtifactCalls:
    """One artifact call of a script. Each is retried as a whole while it fails
    transiently: a put is prepare, upload, commit, all idempotent by the blob's SHA-256
    (the same bytes land at the same address, the commit points the name at it again),
    and a get resumes its download where the bytes stopped."""

    def __init__(self, job: JobHooks) -> None:
        self._job = job
        self._moved = False  # bytes landed since the last failure (an upload, a download's)

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """Tries until an attempt succeeds, fails for good, or has failed transiently
        for CRYOPG_ARTIFACTS_TIMEOUT seconds with nothing landed between failures. The
        count runs between tries only: a try that is moving bytes goes on (bounded by its
        idle watch), and one that landed some (an upload the store took, part of a
        download the script has) starts the count afresh when it fails."""
        budget = client_timeout()
        deadline: float | None = None
        delay = 0.1
        while True:
            self._moved = False
            try:
                return await attempt()
            except Transient as e:
                now = time.monotonic()
                if deadline is None or self._moved:
                    deadline = now + budget
                if now + delay >= deadline or self._job.ending():
                    raise VerbError("artifact_unavailable", f"{what} failed: {e} (retried for "
                                    f"{budget:g} s, {CLIENT_TIMEOUT_ENV})") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _post(self, suffix: str, body: dict[str, Any]) -> Any:
        api = self._job.api
        session, base = api.http()
        url = f"{base}/runs/{quote(self._job.run_id, safe=':')}/artifacts/{suffix}"
        body = {**body, "claim_token": self._job.claim_token}
        timeout = aiohttp.ClientTimeout(total=CALL_SECONDS, sock_connect=CONNECT_SECONDS)
        try:
            async with session.post(url, json=body, timeout=timeout) as resp:
                payload = await _json_or_text(resp)
        except (TimeoutError, aiohttp.ClientError) as e:
            api.fail_over(base)
            raise Transient(f"the cryopg server at {_origin(base)} does not answer "
                            f"({_brief(e)})") from None
        if resp.status in (502, 503, 504):
            code, message = _error_of(payload)
            if code != "artifact_store_unavailable":  # that one is the same on every replica
                api.fail_over(base)
            if code.startswith("http_"):  # a balancer's page, not the server's error
                message = ""
            raise Transient(message or f"the cryopg server at {_origin(base)} answered "
                            f"{resp.status}")
        if resp.status >= 300:
            raise _refused(resp.status, payload)
        return payload

    def _blob_url(self, sha256: str) -> tuple[str, dict[str, str], str]:
        _, base = self._job.api.http()
        return (f"{base}/runs/{quote(self._job.run_id, safe=':')}/artifacts/blobs/{sha256}",
                {"X-Cryo-Claim": str(self._job.claim_token)}, base)

    def _where(self, where: dict[str, Any],
               sha256: str) -> tuple[aiohttp.ClientSession, str, dict[str, str], str | None]:
        """(session, url, headers, the server's base URL or None for the store's)."""
        if where.get("proxy"):
            url, headers, base = self._blob_url(sha256)
            return self._job.api.http()[0], url, headers, base
        # A signed URL: the token-less session, so no agent token goes to the store.
        return (self._job.api.plain_http(), str(where["url"]),
                dict(where.get("headers") or {}), None)

    def _unreachable(self, where: dict[str, Any], base: str | None,
                     e: BaseException | str) -> Transient:
        reason = e if isinstance(e, str) else _brief(e)
        if base is not None:
            self._job.api.fail_over(base)
            return Transient(f"the cryopg server at {_origin(base)} does not answer ({reason})")
        store = where.get("store") or _origin(str(where.get("url", "")))
        return Transient(f"the artifact store ({store}) does not answer ({reason})")

    async def _answer(self, where: dict[str, Any], base: str | None,
                      resp: aiohttp.ClientResponse) -> None:
        """Raises for a refused transfer: Transient when another try may get past it."""
        if resp.status < 300:
            return
        payload = await _json_or_text(resp)
        code, message = _error_of(payload)
        if code == "artifact_store_unavailable":  # the server's word on its store
            raise Transient(message)
        # A gateway's or the store's own trouble (S3 asks for a retry on 500 and 503).
        if resp.status in (502, 503, 504) or (base is None and resp.status >= 500):
            raise self._unreachable(where, base, f"HTTP {resp.status}")
        raise _refused(resp.status, payload)

    async def put(self, req: dict[str, Any], reader: asyncio.StreamReader) -> dict[str, Any]:
        fields = _name_fields(req)
        fields.pop("run", None)
        size = req.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_SIZE:
            raise VerbError("bad_request", "artifact.put needs an integer 'size' >= 0")
        spool = Spool(_spool_dir())
        try:
            left = size
            while left:
                chunk = await reader.read(min(CHUNK, left))
                if not chunk:
                    raise VerbError("bad_request", f"the script sent {size - left} of the "
                                    f"{size} bytes it announced")
                await spool.write(chunk)
                left -= len(chunk)
            sha256 = spool.finish(None)
            blob = {"sha256": sha256, "size": size}
            force = False  # upload even when the index names the blob: the store lost it

            async def attempt() -> dict[str, Any]:
                nonlocal force
                for again in (False, True):
                    ready = await self._post("prepare", {**blob, "force": force})
                    if ready.get("upload"):
                        await self._upload(ready["upload"], spool, sha256, size)
                    try:
                        return dict(await self._post("commit", {**fields, **blob}))
                    except VerbError as e:
                        if e.code != "artifact_missing" or again:
                            raise
                        force = True
                raise AssertionError("unreachable")

            row = await self._retrying(f"artifact put {fields['name']!r}", attempt)
            return {"ok": True, **row}
        finally:
            spool.discard()

    async def _upload(self, where: dict[str, Any], spool: Spool, sha256: str, size: int) -> None:
        session, url, headers, base = self._where(where, sha256)
        headers["Content-Length"] = str(size)
        idle = client_timeout()
        loop = asyncio.get_running_loop()
        try:
            # No aiohttp timer covers a body being written: the watch is pushed back by
            # every chunk sent, so only a transfer that stops moving is given up.
            async with asyncio.timeout(idle) as watch:
                async def body() -> AsyncIterator[bytes]:
                    with open(spool.path, "rb") as fh:
                        while chunk := await asyncio.to_thread(fh.read, CHUNK):
                            watch.reschedule(loop.time() + idle)
                            yield chunk
                    # Sent: a proxied upload's answer waits on the server's own upload.
                    onward = size / ONWARD_BYTES_PER_SECOND if base is not None else 0
                    watch.reschedule(loop.time() + idle + onward)

                timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS)
                async with session.put(url, data=body(), headers=headers,
                                       timeout=timeout) as resp:
                    await self._answer(where, base, resp)
            self._moved = True  # the bytes are in the store
        except (TimeoutError, aiohttp.ClientError) as e:
            raise self._unreachable(where, base, e) from None

    async def get(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Replies itself: the line, then the bytes. A download cut short (a replica
        gone mid-stream) resumes from the bytes already sent, on another try."""
        fields = _name_fields(req)
        sent = 0
        head: dict[str, Any] | None = None

        async def attempt() -> None:
            nonlocal sent, head
            found = await self._post("find", fields)
            if head is not None and found.get("sha256") != head["sha256"]:
                raise VerbError("engine", f"artifact {fields['name']!r} was replaced "
                                "while it was downloaded")
            where = found.get("download") or {}
            session, url, headers, base = self._where(where, str(found["sha256"]))
            if sent:
                headers["Range"] = f"bytes={sent}-"
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS,
                                            sock_read=client_timeout())
            try:
                async with session.get(url, headers=headers, timeout=timeout) as resp:
                    await self._answer(where, base, resp)
                    skip = sent if resp.status != 206 else 0  # the range was not honoured
                    if head is None:
                        head = {"ok": True, **{k: v for k, v in found.items()
                                               if k != "download"}}
                        writer.write(json.dumps(head).encode() + b"\n")
                    while chunk := await resp.content.read(CHUNK):
                        if skip:
                            cut = min(skip, len(chunk))
                            chunk, skip = chunk[cut:], skip - cut
                        writer.write(chunk)
                        sent += len(chunk)
                        self._moved = True
                        await writer.drain()
            except (TimeoutError, aiohttp.ClientError) as e:
                raise self._unreachable(where, base, e) from None
            if sent < int(found["size"]):
                raise self._unreachable(where, base, f"the download stopped after {sent} "
                                        f"of {found['size']} bytes")

        try:
            await self._retrying(f"artifact get {fields['name']!r}", attempt)
        except VerbError:
            if head is None:
                raise  # the script still waits for a line: it gets the error
            writer.close()  # mid-bytes: the script sees the download cut short

    async def list(self, req: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {}
        run = req.get("run")
        if run is not None:
            if not isinstance(run, str) or not run:
                raise VerbError("bad_request", "'run' must be a non-empty string or null")
            body["run"] = run
        if req.get("cached"):
            body["cached"] = True
        if req.get("tainted") is True:
            body["tainted"] = True
        found = await self._retrying("artifact list", lambda: self._post("list", body))
        return {"ok": True, **found}


async def _json_or_text(resp: aiohttp.ClientResponse) -> Any:
    raw = await resp.read()
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"code": f"http_{resp.status}", "message": raw[:200].decode(
            "utf-8", "replace") or f"HTTP {resp.status}"}}


def _error_of(payload: Any) -> tuple[str, str]:
    err = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(err, dict):
        return "", ""
    return str(err.get("code") or ""), _line(str(err.get("message") or ""))


def _refused(status: int, payload: Any) -> VerbError:
    code, message = _error_of(payload)
    if code == "stale_claim":
        return VerbError("engine", "the claim on this run was lost")
    if code.startswith("http_") or status >= 500:
        return VerbError("engine", f"server refused the artifact call: {message or status}")
    return VerbError(code or "engine", message or f"HTTP {status}")


def _spool_dir() -> Path:
    """Spools go where the agent keeps its own temporary files, never the job's."""
    return Path(os.environ.get("CRYOPG_AGENT_SPOOL") or tempfile.gettempdir())
