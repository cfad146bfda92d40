"""Replay answers durable calls by identity: concurrent calls may reach the agent in any
order on a replay, while a pass that goes somewhere else still fails loudly (item 5)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent import journal
from agent.journal import VerbError
from agent.socket_server import DurableVerbs


class FakeJob:
    """Only what the cursor touches for replayed calls; no server is asked."""

    api: Any = None
    run_id = "dev:default:run-1"
    claim_token = "t"
    secret_names: frozenset[str] = frozenset()
    withheld: frozenset[str] = frozenset()

    exited = False

    def ending(self) -> bool:
        return False

    def mask(self, text: str) -> str:
        return text

    def script_exited(self) -> bool:
        return self.exited

    def claim_deadline(self) -> float:
        return float("inf")


def _recorded(*paths: str) -> list[dict[str, Any]]:
    return [{"seq": i, "path": p, "family": "step", "name": p.split("/")[1], "ordinal": 0,
             "status": "done", "stdout": str(i), "exit_code": 0} for i, p in enumerate(paths)]


async def _begin(verbs: DurableVerbs, name: str) -> dict[str, Any]:
    return await verbs.dispatch({"op": "step.begin", "name": name})


def test_recorded_calls_replay_in_any_order() -> None:
    async def main() -> None:
        # The first pass recorded p6 first and p4 second; the replay reaches p4 first.
        verbs = DurableVerbs(FakeJob(), _recorded("step/p6/0", "step/p4/0"), strict=True)
        got = await asyncio.gather(_begin(verbs, "p4"), _begin(verbs, "p6"))
        assert [g["hit"] for g in got] == [True, True]
        assert [g["stdout"] for g in got] == ["1", "0"]

    asyncio.run(main())


def test_a_new_call_waits_for_a_late_concurrent_sibling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "REPLAY_GRACE_SECONDS", 2.0)

    async def main() -> None:
        # The first pass recorded p6 at position 0 and died before p1 finished; on the
        # replay p1 (unrecorded) arrives first, p6 a moment later: no divergence.
        verbs = DurableVerbs(FakeJob(), _recorded("step/p6/0"), strict=True)
        first = asyncio.create_task(_begin(verbs, "p1"))
        await asyncio.sleep(0.2)
        assert not first.done()  # held back until p6 shows up or the grace passes
        assert (await _begin(verbs, "p6"))["hit"] is True
        assert (await first)["hit"] is False

    asyncio.run(main())


def test_the_grace_counts_from_the_latest_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "REPLAY_GRACE_SECONDS", 0.6)

    async def main() -> None:
        # p6 shows up 1.2 s after p1, past the grace, but other siblings kept arriving
        # in between: the pass was still starting its concurrent calls, not diverging.
        verbs = DurableVerbs(FakeJob(), _recorded("step/p6/0"), strict=True)
        first = asyncio.create_task(_begin(verbs, "p1"))
        for name in ("p2", "p3", "p4"):
            await asyncio.sleep(0.3)
            asyncio.create_task(_begin(verbs, name))
        await asyncio.sleep(0.3)
        assert (await _begin(verbs, "p6"))["hit"] is True
        assert (await first)["hit"] is False

    asyncio.run(main())


def test_a_call_waiting_when_the_script_exits_is_dropped_not_diverged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "REPLAY_GRACE_SECONDS", 30.0)

    async def main() -> None:
        # The replay exits before a late sibling could start: the call that waited for
        # it ends quietly (an engine error nobody reads), not as a determinism error.
        job = FakeJob()
        verbs = DurableVerbs(job, _recorded("step/p6/0"), strict=True)
        waiting = asyncio.create_task(_begin(verbs, "p1"))
        await asyncio.sleep(0.2)
        job.exited = True
        async with asyncio.timeout(2):
            with pytest.raises(VerbError) as exc:
                await waiting
        assert exc.value.code == "engine"

    asyncio.run(main())


def test_a_different_call_where_one_was_recorded_still_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "REPLAY_GRACE_SECONDS", 0.3)

    async def main() -> None:
        verbs = DurableVerbs(FakeJob(), _recorded("step/first/0"), strict=True)
        with pytest.raises(VerbError) as exc:
            await _begin(verbs, "second")
        assert exc.value.code == "determinism"
        assert "step/first/0" in exc.value.message and "step/second/0" in exc.value.message

    asyncio.run(main())


def test_lenient_mode_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "REPLAY_GRACE_SECONDS", 30.0)

    async def main() -> None:
        verbs = DurableVerbs(FakeJob(), _recorded("step/first/0"), strict=False)
        got = await asyncio.wait_for(_begin(verbs, "second"), 1.0)
        assert got["hit"] is False

    asyncio.run(main())


def test_each_recording_request_carries_its_own_position() -> None:
    """The position a call reached is passed explicitly to the request that records it:
    two steps begun concurrently and finished in the other order each record their own."""
    sent: list[tuple[str, int | None]] = []

    class Api:
        async def record_step(self, run_id: str, token: str, *, path: str,
                              position: int | None, **_: Any) -> int:
            sent.append((path, position))
            return position or 0

        async def mark_step(self, *args: Any, **kwargs: Any) -> None:
            pass

    async def main() -> None:
        job = FakeJob()
        job.api = Api()
        verbs = DurableVerbs(job, [], strict=True)
        a, b = await asyncio.gather(_begin(verbs, "a"), _begin(verbs, "b"))
        for began in (b, a):
            await verbs.dispatch({"op": "step.finish", "call_id": began["call_id"],
                                  "stdout": "", "exit_code": 0})

    asyncio.run(main())
    assert sorted(sent) == [("step/a/0", 0), ("step/b/0", 1)]
