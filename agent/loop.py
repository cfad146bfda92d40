"""The claim loop: one job at a time, until asked to stop."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

from agent.api import AgentAPI, AgentAPIError, ServerUnavailable, claim_body
from agent.job import Job, release, sweep_job_dirs
from agent.jobtree import host_setup, sweep_cgroups
from agent.sandbox import Sandbox, probe
from cryopg import tracing

T = TypeVar("T")

CLAIM_WAIT = 25
BACKOFF_START = 0.5
BACKOFF_MAX = 10.0
GOODBYE_SECONDS = 0.5


class _Stopped(Exception):
    pass


async def run_agent(
    url: str,
    token: str,
    *,
    agent_id: str,
    capabilities: list[str],
    stop: asyncio.Event | None = None,
    replay_mode: str | None = None,
    local: bool = False,
    sandbox: Sandbox | None = None,
    isolate_all: bool = False,
    drain: asyncio.Event | None = None,
) -> None:
    """Claim and run jobs one at a time until `stop` is set (forever without one).

    A `local` agent (the dev stack's, or one started from a dev directory) runs each
    script in the directory it was submitted from; any other runs it in a scratch
    directory. With a `sandbox` it also takes untrusted runs and confines them (every
    run with `isolate_all`). With `drain` set (agent/drain.py) it finishes the run it
    holds and returns, as when the server refuses its claim as draining."""
    tracing.configure("cryopg-agent")  # off unless the OTEL_* variables ask for it
    stop = stop or asyncio.Event()
    drain = drain or asyncio.Event()
    if sandbox is not None and "isolated" not in capabilities:
        capabilities = [*capabilities, "isolated"]
    mode = (replay_mode or os.environ.get("CRYO_REPLAY_MODE") or "strict").strip().lower()
    strict = mode != "lenient"
    # A job's finish asks for the next run in the same request, without waiting (so a
    # stopping agent is never held in a finish); the loop long-polls on its own only
    # when that brought none, or the job ended without a finish.
    claim_next = claim_body(agent_id, capabilities, 0)
    async with AgentAPI(url, token) as api:
        # A SIGTERM drain is told to the server at once: every replica refuses this
        # agent's claims from then on, and `cryopg agents` lists it as draining.
        telling = asyncio.create_task(_tell_draining(api, agent_id, drain, stop))
        try:
            await _claim_loop(api, agent_id, capabilities, claim_next, token, strict, local,
                              sandbox, isolate_all, stop, drain)
        finally:
            telling.cancel()
            # So `cryopg agents` lists it gone at once; one short try, never what holds
            # a stopping agent up (its closed long-poll, or its silence, says it too).
            await _say(api, agent_id, "gone", GOODBYE_SECONDS)


async def _claim_loop(api: AgentAPI, agent_id: str, capabilities: list[str],
                      claim_next: dict[str, Any], token: str, strict: bool, local: bool,
                      sandbox: Sandbox | None, isolate_all: bool, stop: asyncio.Event,
                      drain: asyncio.Event) -> None:
    backoff = BACKOFF_START
    outage = False
    grant: dict[str, Any] | None = None
    while True:
        if stop.is_set() or drain.is_set():  # a grant not yet started goes back
            if grant is not None:
                await release(api, grant["run_id"], grant["claim_token"])
            break
        if grant is not None:
            job = Job(api, grant, strict=strict, stop=stop, agent_token=token,
                      local=local, claim_next=claim_next, sandbox=sandbox,
                      isolate_all=isolate_all, drain=drain)
            await job.run()
            grant = job.next_grant
            del job  # with it the grant's secrets and its log streamer's copies
            continue
        try:
            grant = await _unless_stopped(
                api.claim(agent_id, capabilities, wait=CLAIM_WAIT), stop, drain
            )
        except _Stopped:
            break
        except Exception as e:
            if isinstance(e, AgentAPIError) and e.code == "draining":
                _log(f"{agent_id}: asked to drain; exiting")
                break
            # Unreachable or refusing: say so once per outage, back off, keep trying.
            if not outage:
                _log(f"{agent_id}: {_describe(e)}; retrying with backoff")
                outage = True
            await _sleep_unless_stopped(backoff, stop)
            backoff = min(backoff * 2, BACKOFF_MAX)
            continue
        if outage:
            _log(f"{agent_id}: server reachable again")
            outage = False
        backoff = BACKOFF_START


async def _tell_draining(api: AgentAPI, agent_id: str, drain: asyncio.Event,
                         stop: asyncio.Event) -> None:
    await drain.wait()
    if not stop.is_set():
        await _say(api, agent_id, "draining")


async def _say(api: AgentAPI, agent_id: str, state: str, timeout: float = 3.0) -> None:
    try:
        await api.note_state(agent_id, state, timeout)
    except AgentAPIError as e:
        _log(f"{agent_id}: could not tell the server it is {state} ({e.message})")
    except Exception as e:  # noqa: BLE001 - a courtesy; never what stops an agent
        _log(f"{agent_id}: could not tell the server it is {state} ({type(e).__name__})")


def prepare_isolation(isolate_all: bool) -> Sandbox | None:
    """Once per agent process: sweep what dead agents left, and find out whether this
    agent can confine jobs. One that cannot says so, and takes no untrusted runs (they
    wait for an agent that can); asked to isolate every run, it refuses to start."""
    cgroups, _ = host_setup()
    killed = sweep_cgroups(cgroups)
    if killed:
        _log(f"killed what {killed} jobs of agents that are gone left running")
    swept = sweep_job_dirs()
    if swept:
        _log(f"removed {swept} job directories left by agents that are gone")
    box = probe()
    if isinstance(box, Sandbox):
        return box
    if isolate_all:
        raise RuntimeError(f"cannot isolate runs: {box}")
    _log(f"cannot isolate jobs ({box}); untrusted runs wait for an agent that can")
    return None


async def _unless_stopped(call: Awaitable[T], *events: asyncio.Event) -> T:
    task = asyncio.ensure_future(call)
    stopping = [asyncio.create_task(ev.wait()) for ev in events]
    try:
        await asyncio.wait({task, *stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in stopping:
            waiter.cancel()
        if not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
    if not task.done() or task.cancelled():
        raise _Stopped
    return task.result()


async def _sleep_unless_stopped(seconds: float, stop: asyncio.Event) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


def _describe(e: Exception) -> str:
    if isinstance(e, ServerUnavailable):
        return f"server unreachable ({e.message})"
    if isinstance(e, AgentAPIError):
        return f"server refused the claim ({e.message})"
    return f"claim failed ({type(e).__name__}: {e})"


def _log(line: str) -> None:
    print(f"cryopg agent {line}", file=sys.stderr)
