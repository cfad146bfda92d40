"""A script run's log by ranges and searched (`…/logs?after|before=ID&max_bytes=N`,
`…/logs?find=TEXT`): what the web UI's log viewer reads instead of the whole log."""

from __future__ import annotations

from tests.server.conftest import Server


async def _run_with_chunks(srv: Server, n: int = 6) -> str:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    for i in range(n):
        await srv.log(grant, f"chunk {i} line a\nchunk {i} line b NEEDLE\n".encode())
    await srv.finish(grant)
    return run_id


async def test_ranges_after_and_before_a_chunk_with_a_byte_budget(srv: Server) -> None:
    run_id = await _run_with_chunks(srv)
    first = (await srv.user("GET", f"/runs/{run_id}/logs?after=0&max_bytes=1")).ok()
    assert [c["text"].split()[1] for c in first["chunks"]] == ["0"] and first["more"] is True
    assert first["chunks"][0]["at"]
    ids = [first["chunks"][0]["id"]]
    nxt = (await srv.user("GET", f"/runs/{run_id}/logs?after={ids[0]}&max_bytes=100")).ok()
    assert [c["text"].split()[1] for c in nxt["chunks"]] == ["1", "2", "3"], nxt
    last = (await srv.user("GET", f"/runs/{run_id}/logs?before=0&max_bytes=60")).ok()
    assert [c["text"].split()[1] for c in last["chunks"]] == ["4", "5"] and last["more"] is True
    top = last["chunks"][0]["id"]
    rest = (await srv.user("GET", f"/runs/{run_id}/logs?before={top}&max_bytes=10000")).ok()
    assert [c["text"].split()[1] for c in rest["chunks"]] == ["0", "1", "2", "3"]
    assert rest["more"] is False
    tail = (await srv.user("GET", f"/runs/{run_id}/logs?after={last['chunks'][-1]['id']}"
                                  "&max_bytes=10")).ok()
    assert tail == {"chunks": [], "more": False}


async def test_find_searches_the_whole_log_ignoring_case(srv: Server) -> None:
    run_id = await _run_with_chunks(srv)
    got = (await srv.user("GET", f"/runs/{run_id}/logs?find=needle")).ok()
    assert got["truncated"] is False
    assert [m["line"] for m in got["matches"]] == [f"chunk {i} line b NEEDLE" for i in range(6)]
    chunks = (await srv.user("GET", f"/runs/{run_id}/logs?after=0&max_bytes=1000")).ok()["chunks"]
    text = {c["id"]: c["text"] for c in chunks}
    for m in got["matches"]:
        assert text[m["id"]][m["offset"]:m["offset"] + 6] == "NEEDLE"
    few = (await srv.user("GET", f"/runs/{run_id}/logs?find=LINE%20A&limit=2")).ok()
    assert len(few["matches"]) == 2 and few["truncated"] is True
    none = (await srv.user("GET", f"/runs/{run_id}/logs?find=absent")).ok()
    assert none == {"matches": [], "truncated": False}


async def test_bad_ranges_are_refused_in_json(srv: Server) -> None:
    run_id = await _run_with_chunks(srv, 1)
    for q in ("find=", "max_bytes=0", "max_bytes=99999999999", "before=-1&max_bytes=5",
              "find=x&limit=0"):
        (await srv.user("GET", f"/runs/{run_id}/logs?{q}")).refused(400, "invalid_argument")
