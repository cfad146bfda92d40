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
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from agent.journal import JobHooks, VerbError
from cryopg.artifacts.store import CHUNK, Spool

ARTIFACT_OPS = ("artifact.put", "artifact.get", "artifact.list")
MAX_SIZE = 1 << 50
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=300)


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
    for opt in ("public", "tainted"):  # trust opt-ins (docs/security/trust.md)
        if req.get(opt) is True:
            fields[opt] = True
    return fields


class ArtifactCalls:
    def __init__(self, job: JobHooks) -> None:
        self._job = job

    async def _post(self, suffix: str, body: dict[str, Any]) -> Any:
        session, base = self._job.api.http()
        url = f"{base}/runs/{quote(self._job.run_id, safe=':')}/artifacts/{suffix}"
        body = {**body, "claim_token": self._job.claim_token}
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(60)) as resp:
                payload = await resp.json(content_type=None)
                if resp.status >= 300:
                    raise _refused(resp.status, payload)
                return payload
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise VerbError("engine", f"server unreachable: {e}") from None

    def _blob_url(self, sha256: str) -> tuple[str, dict[str, str]]:
        _, base = self._job.api.http()
        return (f"{base}/runs/{quote(self._job.run_id, safe=':')}/artifacts/blobs/{sha256}",
                {"X-Cryo-Claim": str(self._job.claim_token)})

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
            for attempt in range(2):
                ready = await self._post("prepare", {**blob, "force": attempt > 0})
                if ready.get("upload"):
                    await self._upload(ready["upload"], spool, sha256, size)
                try:
                    row = await self._post("commit", {**fields, **blob})
                    return {"ok": True, **row}
                except VerbError as e:
                    if e.code != "artifact_missing" or attempt:
                        raise
            raise AssertionError("unreachable")
        finally:
            spool.discard()

    async def _upload(self, where: dict[str, Any], spool: Spool, sha256: str, size: int) -> None:
        session, _ = self._job.api.http()
        own = None
        if where.get("proxy"):
            url, headers = self._blob_url(sha256)
        else:  # a signed URL: a session of its own, so no agent token goes to the store
            own = aiohttp.ClientSession()
            url, headers = str(where["url"]), dict(where.get("headers") or {})
        headers["Content-Length"] = str(size)
        try:
            with open(spool.path, "rb") as fh:
                async with (own or session).put(url, data=_file_chunks(fh), headers=headers,
                                                timeout=TIMEOUT) as resp:
                    if resp.status >= 300:
                        raise _refused(resp.status, await _json_or_text(resp))
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise VerbError("engine", f"artifact upload failed: {e}") from None
        finally:
            if own is not None:
                await own.close()

    async def get(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Replies itself: the line, then the bytes."""
        found = await self._post("find", _name_fields(req))
        where = found.get("download") or {}
        session, _ = self._job.api.http()
        own = None
        if where.get("proxy"):
            url, headers = self._blob_url(found["sha256"])
        else:
            own = aiohttp.ClientSession()
            url, headers = str(where["url"]), dict(where.get("headers") or {})
        try:
            async with (own or session).get(url, headers=headers, timeout=TIMEOUT) as resp:
                if resp.status >= 300:
                    raise _refused(resp.status, await _json_or_text(resp))
                head = {"ok": True, **{k: v for k, v in found.items() if k != "download"}}
                writer.write(json.dumps(head).encode() + b"\n")
                async for chunk in resp.content.iter_chunked(CHUNK):
                    writer.write(chunk)
                    await writer.drain()
        except (TimeoutError, aiohttp.ClientConnectionError) as e:
            raise VerbError("engine", f"artifact download failed: {e}") from None
        finally:
            if own is not None:
                await own.close()

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
        return {"ok": True, **await self._post("list", body)}


async def _file_chunks(fh: Any) -> Any:
    while chunk := await asyncio.to_thread(fh.read, CHUNK):
        yield chunk


async def _json_or_text(resp: aiohttp.ClientResponse) -> Any:
    raw = await resp.read()
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"code": f"http_{resp.status}", "message": raw[:200].decode(
            "utf-8", "replace") or f"HTTP {resp.status}"}}


def _refused(status: int, payload: Any) -> VerbError:
    err = payload.get("error") if isinstance(payload, dict) else None
    code = str(err.get("code") or "") if isinstance(err, dict) else ""
    message = str(err.get("message") or "") if isinstance(err, dict) else ""
    if code == "stale_claim":
        return VerbError("engine", "the claim on this run was lost")
    if code.startswith("http_") or status >= 500:
        return VerbError("engine", f"server refused the artifact call: {message or status}")
    return VerbError(code or "engine", message or f"HTTP {status}")


def _spool_dir() -> Path:
    """Spools go where the agent keeps its own temporary files, never the job's."""
    return Path(os.environ.get("CRYOPG_AGENT_SPOOL") or tempfile.gettempdir())
