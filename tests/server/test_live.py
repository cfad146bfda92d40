"""What the web UI reads: the server-sent event streams (pushed from LISTEN/NOTIFY, with a
keepalive), checkpoints with the step running now, one bounded page of runs, and whoami."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from cryopg.server.user_api import live
from tests.server.conftest import PROJECT_PATH, Server


class Events:
    """Reads one SSE response event by event."""

    def __init__(self, resp: Any) -> None:
        self.resp, self.buf, self.comments = resp, b"", 0

    async def next(self, timeout: float = 10) -> tuple[str, Any]:
        while b"\n\n" not in self.buf:
            self.buf += await asyncio.wait_for(self.resp.content.readany(), timeout)
        raw, self.buf = self.buf.split(b"\n\n", 1)
        if raw.startswith(b":"):
            self.comments += 1
            return ":", raw.decode()
        lines = dict(line.split(": ", 1) for line in raw.decode().split("\n"))
        return lines["event"], json.loads(lines["data"])

    async def until(self, name: str, timeout: float = 10) -> Any:
        while True:
            got, data = await self.next(timeout)
            if got == name:
                return data


async def _stream(srv: Server, path: str, role: str = "viewer") -> Any:
    return await srv.client.get(PROJECT_PATH + path,
                                headers={"Authorization": f"Bearer {srv.tokens[role]}"})


async def test_run_stream_sends_the_tail_then_live_chunks_and_the_end(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    for i in range(5):
        await srv.log(grant, f"old {i}\n".encode() * 50)
    resp = await _stream(srv, f"/runs/{run_id}/stream?tail=400")
    assert resp.status == 200 and resp.content_type == "text/event-stream"
    ev = Events(resp)
    assert (await ev.until("hello"))["status"] == "running"
    tail = await ev.until("tail")
    assert tail["total_bytes"] > tail["skipped_bytes"] > 0
    first = await ev.until("log")
    assert first["text"] == "old 3\n" * 50  # the chunks of the last ~400 bytes only
    await ev.until("log")
    await srv.log(grant, b"\x1b[31mnew\x1b[0m\n")  # NOTIFY wakes the stream
    assert (await ev.until("log", timeout=5))["text"] == "\x1b[31mnew\x1b[0m\n"
    await srv.finish(grant)
    assert (await ev.until("end", timeout=5))["status"] == "succeeded"
    resp.close()


async def test_run_stream_keeps_alive_in_silence(srv: Server,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "KEEPALIVE_SECONDS", 0.3)
    run_id = await srv.submit()
    resp = await _stream(srv, f"/runs/{run_id}/stream")
    ev = Events(resp)
    await ev.until("tail")
    assert await ev.next(5) == (":", ": keepalive")
    resp.close()


async def test_stream_refusals_are_json(srv: Server) -> None:
    run_id = await srv.submit()
    (await srv.user("GET", f"/runs/{run_id}/stream?tail=-1")).refused(400, "invalid_argument")
    (await srv.user("GET", f"/runs/{run_id}/stream?tail=lots")).refused(400, "invalid_argument")
    other = run_id.replace("dev:default:", "dev:other:")
    (await srv.user("GET", f"/runs/{other}/stream")).refused(404, "run_not_found")
    (await srv.user("GET", "/stream", token="cryo_u_nope")).refused(401, "unauthorized")


async def test_project_stream_pushes_a_change_when_a_run_appears_or_moves(srv: Server) -> None:
    resp = await _stream(srv, "/stream")
    ev = Events(resp)
    await ev.until("hello")
    run_id = await srv.submit()
    assert run_id in (await ev.until("changed", timeout=3))["ids"]
    grant = await srv.claim_run(run_id)
    await srv.log(grant, b"x")  # a watched run's log NOTIFYs, so its claim shows now
    assert run_id in (await ev.until("changed", timeout=3))["ids"]
    await srv.finish(grant)
    assert run_id in (await ev.until("changed", timeout=3))["ids"]
    resp.close()


async def test_checkpoints_show_the_step_running_now(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "steps", family="step", name="a", ordinal=0, position=0,
                      stdout="", exit_code=0)).ok()
    (await srv.in_run(grant, "marks", family="step", name="b", ordinal=0, position=1)).ok()
    cps = (await srv.user("GET", f"/runs/{run_id}/checkpoints", role="viewer")).ok()
    assert [(c["seq"], c["name"], c["status"]) for c in cps["checkpoints"]] == [
        (0, "a", "done"), (1, "b", "pending")]
    (await srv.in_run(grant, "marks", family="step", name="b", ordinal="x")).refused(
        400, "invalid_argument")
    (await srv.in_run({**grant, "claim_token": "00000000-0000-0000-0000-000000000000"},
                      "marks", family="step", name="c", ordinal=0)).refused(409, "stale_claim")


async def test_runs_page_is_bounded_with_a_cursor_and_children(srv: Server) -> None:
    ids = [await srv.submit(filename=f"w{i % 2}.sh") for i in range(5)]
    page = (await srv.user("GET", "/runs?top=1&limit=2", role="viewer")).ok()
    assert [r["id"] for r in page["runs"]] == ids[::-1][:2] and page["next"] == ids[3]
    assert page["runs"][0]["trigger"] == "manual" and page["runs"][0]["children"] == 0
    rest = (await srv.user("GET", f"/runs?before={page['next']}&limit=3")).ok()
    assert [r["id"] for r in rest["runs"]] == ids[::-1][2:] and rest["next"] == ids[0]
    wf = (await srv.user("GET", "/runs?workflow=w1.sh")).ok()
    assert {r["id"] for r in wf["runs"]} == {ids[1], ids[3]} and wf["next"] is None
    (await srv.user("GET", "/runs?top=1&limit=0")).ok()
    (await srv.user("GET", "/runs?limit=10001")).refused(400, "invalid_argument")


async def test_whoami_names_the_member_and_role(srv: Server) -> None:
    me = (await srv.org("GET", "/me", role="viewer")).ok()
    assert me["role"] == "viewer" and me["org"] == "dev" and me["login"]
    (await srv.request("GET", "/api/v1/orgs/other/me", token=srv.tokens["owner"])).refused(
        404, "not_found")


async def test_entity_cells_the_run_touched_need_a_member(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "state/set", entity="cust-1", key="plan",
                      value={"tier": "gold"})).ok()
    other = await srv.submit()
    cells = (await srv.user("GET", f"/runs/{run_id}/entity-state", role="member")).ok()["cells"]
    assert [(c["entity"], c["key"], c["value"], c["version"]) for c in cells] == [
        ("cust-1", "plan", {"tier": "gold"}, 1)]
    assert (await srv.user("GET", f"/runs/{other}/entity-state")).ok()["cells"] == []
    (await srv.user("GET", f"/runs/{run_id}/entity-state", role="viewer")).refused(
        403, "forbidden")
    (await srv.user("GET", f"/runs/{run_id.replace('default', 'other')}/entity-state")).refused(
        404, "run_not_found")
