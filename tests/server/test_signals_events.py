"""Signals to runs and the project's event bus: the user routes that send and publish,
and the agent routes (`waits/signal`, `waits/event`, `emit`) that wait and emit."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server


def _wait(name: str, ordinal: int = 0, timeout: float | None = None) -> dict[str, Any]:
    """A wait's fields; no path, so SQL derives it from the identity."""
    return {"name": name, "ordinal": ordinal, "timeout": timeout}


async def test_signal_to_a_finished_or_unknown_run_is_an_error(srv: Server) -> None:
    finished = await srv.run_to_end()
    message = (await srv.user("POST", f"/runs/{finished}/signal/late", {})).refused(
        409, "run_finished")
    assert "already finished" in message
    unknown = "dev:default:run-ffffffffffffffff"
    assert "no run" in (await srv.user("POST", f"/runs/{unknown}/signal/x", {})).refused(
        404, "run_not_found")
    late = await srv.cli("signal", finished, "late")
    assert late.returncode == 2 and "already finished" in late.stderr
    lost = await srv.cli("signal", "run-ffffffffffffffff", "x")
    assert lost.returncode == 2 and "no run" in lost.stderr
    live = await srv.submit()
    elsewhere = f"/api/v1/orgs/dev/projects/other/runs/{live}/signal/x"
    async with await srv.connect() as conn:
        await conn.execute("SELECT cryo.ensure_project('dev', 'other', 'Other')")
    (await srv.user("POST", elsewhere, {})).refused(404, "run_not_found")
    too_long = (await srv.user("POST", f"/runs/{live}/signal/{'n' * 201}", {}))
    assert "name" in too_long.refused(400, "invalid_argument")
    (await srv.user("POST", f"/runs/{live}/signal/go", {}, role="viewer")).refused(
        403, "forbidden")
    (await srv.user("POST", f"/runs/{live}/signal/go", data=b"{oops")).refused(
        400, "invalid_argument")
    history = [e["kind"] for e in (await srv.show(live))["history"]]
    assert "signal_sent" not in history  # none of the refused signals landed


async def test_a_signal_sent_after_the_wait_wakes_the_run(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    assert (await srv.in_run(grant, "waits/signal", **_wait("approve"))).ok() == {
        "parked": True, "timed_out": False, "payload": None}
    run = await srv.show(run_id)
    assert (run["status"], run["substate"]) == ("parked", "awaiting-signal")
    sent = (await srv.user("POST", f"/runs/{run_id}/signal/approve", {"payload": {"by": "ann"}},
                           role="member")).ok(201)
    assert isinstance(sent["signal_id"], int)
    assert await srv.status(run_id) == "pending"
    again = await srv.claim_run(run_id)
    memo = next(m for m in again["journal"] if m["path"] == "signal/approve/0")
    assert (memo["status"], memo["answer"]) == ("done", {"by": "ann"})
    assert (await srv.in_run(again, "waits/signal", **_wait("approve"))).ok() == {
        "parked": False, "timed_out": False, "payload": {"by": "ann"}}  # the replay


async def test_signals_sent_before_the_wait_queue_in_order(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    for payload in ("one", "two"):
        (await srv.user("POST", f"/runs/{run_id}/signal/item", {"payload": payload})).ok(201)
    (await srv.user("POST", f"/runs/{run_id}/signal/other")).ok(201)  # no body: null
    got = [(await srv.in_run(grant, "waits/signal", **_wait("item", n))).ok() for n in range(3)]
    assert [g["payload"] for g in got[:2]] == ["one", "two"]
    assert [g["parked"] for g in got] == [False, False, True]
    assert (await srv.show(run_id))["substate"] == "awaiting-signal"


async def test_a_timed_out_wait_is_recorded_and_replayed(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    assert (await srv.in_run(grant, "waits/signal", **_wait("now", timeout=0))).ok() == {
        "parked": False, "timed_out": True, "payload": None}  # a zero timeout never parks
    parked = (await srv.in_run(grant, "waits/signal", **_wait("nudge", timeout=1))).ok()
    assert parked["parked"] is True
    assert await srv.tick(later=2) == (0, 1)
    again = await srv.claim_run(run_id)
    memo = next(m for m in again["journal"] if m["path"] == "signal/nudge/0")
    assert (memo["status"], memo["exit_code"]) == ("done", 124)
    # A signal that comes after the timeout does not change the recorded branch.
    (await srv.user("POST", f"/runs/{run_id}/signal/nudge", {"payload": "late"})).ok(201)
    assert (await srv.in_run(again, "waits/signal", **_wait("nudge", timeout=1))).ok() == {
        "parked": False, "timed_out": True, "payload": None}
    kinds = [e["kind"] for e in (await srv.show(run_id))["history"]]
    assert "wait_timed_out" in kinds


async def test_a_published_event_wakes_every_waiter_and_only_later_ones(srv: Server) -> None:
    (await srv.user("POST", "/events/release", {"payload": "early"})).ok(201)
    waiters = [await srv.submit() for _ in range(3)]
    for run_id in waiters:
        grant = await srv.claim_run(run_id)
        assert (await srv.in_run(grant, "waits/event", **_wait("release"))).ok()["parked"]
        assert (await srv.show(run_id))["substate"] == "awaiting-event"
    (await srv.user("POST", "/events/release", {"payload": "v7"}, role="viewer")).refused(
        403, "forbidden")
    published = (await srv.user("POST", "/events/release", {"payload": "v7"},
                                role="member")).ok(201)
    assert isinstance(published["event_id"], int)
    for run_id in waiters:
        assert await srv.status(run_id) == "pending"
        grant = await srv.claim_run(run_id)
        assert (await srv.in_run(grant, "waits/event", **_wait("release"))).ok()["payload"] == "v7"


async def test_emit_from_a_run_is_recorded_once_and_listed(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    emit = {"path": "emit//0", "ordinal": 0, "name": "deployed", "payload": {"v": 2}}
    first = (await srv.in_run(grant, "emit", **emit)).ok()["event_id"]
    assert (await srv.in_run(grant, "emit", **emit)).ok()["event_id"] == first  # a retry
    await srv.tick(later=3600)  # the agent vanished; the next pass replays the emit
    again = await srv.claim_run(run_id)
    assert (await srv.in_run(again, "emit", **emit)).ok()["event_id"] == first
    (await srv.in_run(again, "emit", **{**emit, "path": "emit//1", "ordinal": 1,
                                        "payload": {"v": 3}})).ok()
    async with await srv.connect() as app:  # an application emits from SQL, in the clear
        await app.execute("SELECT cryo.publish_event('dev', 'default', 'deployed', "
                          "'{\"v\": 4}'::jsonb)")
    (await srv.user("POST", "/events/other")).ok(201)
    listed = (await srv.user("GET", "/events?name=deployed", role="viewer")).ok()["events"]
    assert sorted(e["payload"]["v"] for e in listed) == [2, 3, 4]
    assert sorted(str(e["emitted_by_run"]) for e in listed) == sorted(
        [run_id, run_id, "None"])
    assert {e["name"] for e in (await srv.user("GET", "/events")).ok()["events"]} == {
        "deployed", "other"}
    assert len((await srv.user("GET", "/events?limit=1")).ok()["events"]) == 1
    (await srv.user("GET", "/events?limit=some")).refused(400, "invalid_argument")


async def test_events_limit_out_of_range_is_400(srv: Server) -> None:
    (await srv.user("GET", "/events?limit=99999999999")).refused(400, "invalid_argument")


async def test_a_nul_in_a_signal_name_is_400(srv: Server) -> None:
    run_id = await srv.submit()
    (await srv.user("POST", f"/runs/{run_id}/signal/a%00b", {})).refused(400, "invalid_argument")
