"""aiohttp client for the agent half of the HTTP API (`/api/v1/agent/...`)."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import time
from collections.abc import Callable
from typing import Any, NamedTuple
from urllib.parse import quote

import aiohttp

from agent.http1 import Http1Client

# Calls that record something retry through an outage instead of failing the run: for
# as long as the run's claim may still be live (see retry_until), else for this long.
# Claims and log flushes have their own retry (the claim loop, the next flush tick).
RECORD_RETRY_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 30.0


# When a recording call made for a job stops retrying through an outage: a function
# returning the monotonic time the job's claim lapses if it is not renewed meanwhile.
# While the server is away the agent cannot renew, so once that passes the run may
# belong to another agent, and the job stops its script rather than report anything.
_RETRY_UNTIL: contextvars.ContextVar[Callable[[], float] | None] = contextvars.ContextVar(
    "cryo_retry_until", default=None)


def retry_until(deadline: Callable[[], float] | None) -> None:
    _RETRY_UNTIL.set(deadline)


class AgentAPIError(Exception):
    """The server answered with an error (or not at all)."""

    def __init__(self, code: str, message: str, status: int | None = None,
                 log_end: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.log_end = log_end  # a log_gap's stored end


class LogAck(NamedTuple):
    """A log post's answer: the cancel flag, and where the pass's stored log now ends
    (None from a server that predates numbered posts)."""

    cancel: bool
    log_end: int | None = None


class StaleClaim(AgentAPIError):
    """The claim token is no longer valid: the run belongs to someone else now."""


class RunTimedOut(StaleClaim):
    """The run passed its deadline and the database failed it: stop the whole job."""


class ServerUnavailable(AgentAPIError):
    """The server could not be reached, or answered with a gateway/unavailable status."""


def server_urls(url: str) -> list[str]:
    """`--url`/CRYOPG_URL of an agent: one server URL, or several replicas' separated by
    commas (tried in turn when one stops answering)."""
    urls = [u.strip().rstrip("/") for u in url.split(",") if u.strip()]
    if not urls:
        raise ValueError("no server URL given")
    return urls


class AgentAPI:
    def __init__(self, url: str, token: str) -> None:
        # Several replicas' URLs: calls go to one until it stops answering, then to the
        # next (fail_over), so a replica's death costs a retry, not the run.
        self._bases = [u + "/api/v1/agent" for u in server_urls(url)]
        self._at = 0
        self._headers = {"Authorization": f"Bearer {token}"}
        # JSON calls go through the lean keep-alive client (agent/http1.py); the aiohttp
        # session, for the artifact calls that stream bytes, opens on first use.
        self._client: Http1Client | None = None
        self._session: aiohttp.ClientSession | None = None
        self._plain: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AgentAPI:
        self._client = Http1Client(self._base, self._headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for session in (self._session, self._plain):
            if session is not None:
                await session.close()
        self._session = self._plain = None

    @property
    def _base(self) -> str:
        return self._bases[self._at]

    def fail_over(self, base: str) -> None:
        """The server at `base` did not answer: later calls go to the next URL given (a
        no-op with one URL, or when another call already moved on)."""
        if len(self._bases) == 1 or self._base != base:
            return
        self._at = (self._at + 1) % len(self._bases)
        if self._client is not None:
            self._client.close()  # its idle connections lead to the one that failed
            self._client = Http1Client(self._base, self._headers)

    def http(self) -> tuple[aiohttp.ClientSession, str]:
        """The session (with the agent token) and `…/api/v1/agent` base, for calls that
        move bytes rather than JSON (agent/artifacts.py)."""
        assert self._client is not None, "AgentAPI used outside 'async with'"
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        return self._session, self._base

    def plain_http(self) -> aiohttp.ClientSession:
        """A session without the agent token, for URLs the artifact store signed: one
        for the agent's life, so its connections (and TLS handshakes) are reused."""
        if self._plain is None:
            self._plain = aiohttp.ClientSession()
        return self._plain

    # -- low level -------------------------------------------------------------------

    async def _post_once(self, path: str, body: dict[str, Any], timeout: float) -> tuple[int, Any]:
        assert self._client is not None, "AgentAPI used outside 'async with'"
        base = self._base
        try:
            status, payload = await self._client.post_json(path, body, timeout)
        except (TimeoutError, OSError) as e:
            self.fail_over(base)
            raise ServerUnavailable("unreachable", f"{type(e).__name__}: {e}".rstrip(": ")) from e
        if status == 204:
            return 204, None
        if status < 300:
            return status, payload
        error = _error_from(status, payload)
        if isinstance(error, ServerUnavailable):
            self.fail_over(base)
        raise error

    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        retry_for: float = 0.0,
        timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> tuple[int, Any]:
        until = _RETRY_UNTIL.get() if retry_for > 0 else None
        deadline = time.monotonic() + retry_for
        delay = 0.2
        while True:
            try:
                return await self._post_once(path, body, timeout)
            except ServerUnavailable:
                if until is not None:
                    deadline = until()  # renewals made meanwhile push it back
                if time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    @staticmethod
    def _run_path(run_id: str, what: str) -> str:
        return f"/runs/{quote(run_id, safe=':')}/{what}"

    # -- endpoints -------------------------------------------------------------------

    async def claim(
        self, agent_id: str, capabilities: list[str], wait: float = 25
    ) -> dict[str, Any] | None:
        """Long-poll for a grant; None when nothing arrived within `wait` seconds."""
        status, payload = await self._post(
            "/claim", claim_body(agent_id, capabilities, wait), timeout=wait + 15,
        )
        return payload if status != 204 and payload else None

    async def logs(self, run_id: str, claim_token: str, data: bytes,
                   timeout: float = CALL_TIMEOUT_SECONDS, context: bytes | None = None,
                   offset: int | None = None) -> LogAck:
        """Append log bytes (empty = heartbeat); renews the claim. `offset` numbers the
        bytes (where the first falls in the pass's log), so a repeat after a lost answer
        is stored once: the answer's log_end says where the stored log ends (None from a
        server that predates offsets). `context` (the log masker's last bytes, for the
        run's next pass) replaces the run's stored one when given."""
        body: dict[str, Any] = {"claim_token": claim_token,
                                "data": base64.b64encode(data).decode("ascii")}
        if context is not None:
            body["context"] = base64.b64encode(context).decode("ascii")
        if offset is not None:
            body["offset"] = offset
        _, payload = await self._post(self._run_path(run_id, "logs"), body, timeout=timeout)
        end = payload.get("log_end") if isinstance(payload, dict) else None
        return LogAck(bool(payload and payload.get("cancel")),
                      end if isinstance(end, int) and not isinstance(end, bool) else None)

    async def mark_step(
        self, run_id: str, claim_token: str, *, position: int | None, path: str, name: str,
        ordinal: int,
    ) -> None:
        """Pin a pending marker for a step about to run, at its own position."""
        await self._post(
            self._run_path(run_id, "marks"),
            {"claim_token": claim_token, "position": position, "path": path,
             "family": "step", "name": name, "ordinal": ordinal},
        )

    async def record_step(
        self,
        run_id: str,
        claim_token: str,
        *,
        path: str,
        family: str,
        name: str,
        ordinal: int,
        label: str | None,
        stdout: str,
        exit_code: int,
        position: int | None,
        started_at: float | None = None,
    ) -> int:
        """Record a finished step (begun at `started_at`, Unix seconds) at the position
        the pass reached it (agent/journal.py); returns its seq."""
        _, payload = await self._post(
            self._run_path(run_id, "steps"),
            {
                "claim_token": claim_token,
                "position": position,
                "path": path,
                "family": family,
                "name": name,
                "ordinal": ordinal,
                "label": label,
                "stdout": stdout,
                "exit_code": exit_code,
                "started_at": started_at,
            },
            retry_for=RECORD_RETRY_SECONDS,
        )
        return int(payload["seq"])

    async def park(
        self, run_id: str, claim_token: str, *, position: int | None, path: str, ordinal: int,
        seconds: float,
    ) -> dict[str, Any]:
        _, payload = await self._post(
            self._run_path(run_id, "park"),
            {"claim_token": claim_token, "position": position, "path": path, "ordinal": ordinal,
             "seconds": seconds},
            retry_for=RECORD_RETRY_SECONDS,
        )
        return payload or {}

    async def annotate(self, run_id: str, claim_token: str, text: str) -> None:
        await self._post(
            self._run_path(run_id, "annotate"),
            {"claim_token": claim_token, "text": text},
            retry_for=RECORD_RETRY_SECONDS,
        )

    async def state(self, run_id: str, claim_token: str, op: str, **fields: Any) -> dict[str, Any]:
        """One durable-state operation (get, list, set, delete, add, cas, incr) for the run.

        Retried through a short outage like every recording call: reads and sets are
        idempotent, and add/cas/incr are memoized by their path, so a repeat after a lost
        answer gets the first answer back.
        """
        _, payload = await self._post(
            self._run_path(run_id, f"state/{op}"),
            {"claim_token": claim_token, **fields},
            retry_for=RECORD_RETRY_SECONDS,
        )
        return payload or {}

    async def call(self, run_id: str, claim_token: str, what: str, **fields: Any) -> dict[str, Any]:
        """A durable call of the waits family (signals, events, children, outputs).

        Retried through a short outage: each is memoized by its path on the server, so a
        repeat after a lost answer gets the first answer back.
        """
        _, payload = await self._post(
            self._run_path(run_id, what),
            {"claim_token": claim_token, **fields},
            retry_for=RECORD_RETRY_SECONDS,
        )
        return payload or {}

    async def finish(
        self,
        run_id: str,
        claim_token: str,
        *,
        outcome: str,
        exit_code: int | None = None,
        error: str | None = None,
        data: bytes = b"",
        offset: int | None = None,
        claim_next: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """End the run, carrying the script's last output (one request for both). With
        `claim_next` (what claim() sends), the same request then long-polls for the
        agent's next run: returns its grant, or None when none came."""
        body: dict[str, Any] = {
            "claim_token": claim_token,
            "outcome": outcome,
            "exit_code": exit_code,
            "error": error,
            "data": base64.b64encode(data).decode("ascii"),
        }
        if offset is not None:  # numbered as a log post's bytes are (see logs)
            body["offset"] = offset
        if claim_next is not None:
            body["claim"] = claim_next
        wait = float(claim_next.get("wait") or 0) if claim_next else 0.0
        _, payload = await self._post(
            self._run_path(run_id, "finish"), body, retry_for=RECORD_RETRY_SECONDS,
            timeout=max(CALL_TIMEOUT_SECONDS, wait + 15),
        )
        return (payload or {}).get("next") or None

    async def release(self, run_id: str, claim_token: str, timeout: float) -> None:
        """Hand the run back now (the agent is stopping); one short try, since a lapsed
        lease does the same later."""
        await self._post_once(self._run_path(run_id, "release"), {"claim_token": claim_token},
                              timeout)

    async def note_state(self, agent_id: str, state: str, timeout: float = 3.0) -> None:
        """Tell the server this agent process is "draining" or "gone" (one short try:
        its long-poll closing, or its silence, says the same later)."""
        from agent.drain import INSTANCE

        await self._post_once("/state", {"agent_id": agent_id, "instance": INSTANCE,
                                         "state": state}, timeout)


def claim_body(agent_id: str, capabilities: list[str], wait: float) -> dict[str, Any]:
    """What a claim asks for, alone or riding on a finish."""
    from agent.drain import INSTANCE, build_id

    return {"agent_id": agent_id, "capabilities": list(capabilities), "wait": wait,
            "build": build_id(), "instance": INSTANCE}


def _error_from(status: int, payload: Any) -> AgentAPIError:
    err = payload.get("error") if isinstance(payload, dict) else None
    code = str(err.get("code") or "") if isinstance(err, dict) else ""
    message = str(err.get("message") or "") if isinstance(err, dict) else ""
    message = message or f"HTTP {status}"
    if status == 409 and code == "run_timed_out":
        return RunTimedOut(code, message, status)
    if status == 409 and code == "stale_claim":
        return StaleClaim(code, message, status)
    if status in (502, 503, 504):
        return ServerUnavailable(code or "unavailable", message, status)
    end = err.get("log_end") if isinstance(err, dict) else None
    return AgentAPIError(code or f"http_{status}", message, status,
                         end if isinstance(end, int) and not isinstance(end, bool) else None)
