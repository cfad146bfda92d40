"""`cryopg agent`: agents that claim and run jobs in this process, and `--drain` to ask
running ones to finish and exit. `cryopg dev` starts its embedded agents with
`_run_agents` too."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from typing import Any

import click

from cryopg import logfmt
from cryopg.cli.target import find_dev_file
from cryopg.secret_env import scrub_secrets

# How long stopping agents get to kill their scripts and hand their runs back.
AGENT_STOP_SECONDS = 5.0


async def _run_agents(url: str, token: str, count: int, caps: list[str], prefix: str,
                      stop: asyncio.Event, *, local: bool, isolate_all: bool = False,
                      announce: Any = None,
                      drain: asyncio.Event | None = None) -> list[asyncio.Task[None]]:
    from agent.loop import prepare_isolation, run_agent

    try:
        box = await asyncio.to_thread(prepare_isolation, isolate_all)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    if announce is not None:
        await announce(box is not None)
    return [asyncio.create_task(run_agent(url, token, agent_id=f"{prefix}-{i + 1}",
                                          capabilities=caps, stop=stop, local=local,
                                          sandbox=box, isolate_all=isolate_all,
                                          drain=drain))
            for i in range(count)]


async def _stop_agents(tasks: list[asyncio.Task[None]]) -> None:
    """With `stop` set, each agent kills its script and hands the run back (so it resumes
    at once on the next start); one still busy after a few seconds is cancelled, and its
    run resumes when its claim expires."""
    if tasks:
        _, late = await asyncio.wait(tasks, timeout=AGENT_STOP_SECONDS)
        for task in late:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _announce_agent(url: str, prefix: str, count: int, caps: list[str], *, local: bool,
                          isolate_all: bool) -> None:
    """The agent's first line: which server, whether it answers, what this agent takes and
    where its scripts run, so a wrong URL or a missing capability shows at once."""
    import aiohttp

    from agent.api import server_urls

    servers = []
    for one in server_urls(url):  # a comma list: replicas tried in turn
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session, \
                    session.get(f"{one}/api/v1/health") as resp:
                reached = "answers" if resp.status == 200 else f"answered {resp.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            reached = f"does not answer yet ({type(exc).__name__}); the agent keeps retrying"
        servers.append(f"{one} (server {reached})")
    ids = f"{prefix}-1" if count == 1 else f"{prefix}-1..{prefix}-{count}"
    where = ("the directory each run was submitted from" if local
             else "a fresh scratch directory per run")
    confined = "; every run confined" if isolate_all else ""
    click.echo(f"cryopg agent: connected to {', '.join(servers)} as {ids}; "
               f"capabilities: {', '.join(caps)}; scripts run in {where}{confined}", err=True)


@click.command("agent")
@click.option("--url", envvar="CRYOPG_URL",
              help="Server URL, or several replicas' separated by commas (the next is used "
                   "when one stops answering) [env CRYOPG_URL]; default: the dev stack here.")
@click.option("--token", envvar="CRYOPG_AGENT_TOKEN", help="Agent token [env CRYOPG_AGENT_TOKEN].")
@click.option("--cap", "caps", multiple=True, envvar="CRYOPG_AGENT_CAPABILITIES",
              help="Capability to advertise (repeatable; default shell and polyglot).")
@click.option("--id", "agent_id", help="Agent id (default: host-pid).")
@click.option("--count", default=1, show_default=True, help="How many agents in this process.")
@click.option("--local/--scratch", "local", default=None,
              help="Run scripts in the directory they were submitted from (--local), or in a "
                   "scratch directory (--scratch). Default: --local when serving the dev stack "
                   "found here, else --scratch.")
@click.option("--isolate", is_flag=True,
              help="Confine every run, not only untrusted ones: another OS user, its own PID, "
                   "mount and network namespaces (needs bubblewrap).")
@click.option("--drain", is_flag=True,
              help="Run no agent: ask the running agent(s) of --id to drain (finish the run "
                   "held, take no new one, exit). SIGTERM to an agent does the same.")
@logfmt.option("agent")
def agent_cmd(url: str | None, token: str | None, caps: tuple[str, ...], agent_id: str | None,
              count: int, local: bool | None, isolate: bool, drain: bool) -> None:
    """Run an agent that claims and runs jobs (from a dev directory, or with --url and --token).

    SIGTERM drains it (the run it holds finishes, then it exits); a second SIGTERM or
    SIGINT stops it at once, handing its run back."""
    if local is None:
        local = not url and find_dev_file() is not None
    if not url or not token:
        found = find_dev_file()
        if found is None:
            raise click.ClickException("no --url/--token given and no cryopg dev stack found here")
        dev = json.loads(found.read_text())
        url, token = url or dev["url"], token or dev["agent_token"]
    from agent.api import server_urls

    try:
        urls = server_urls(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    if drain:
        for i, one in enumerate(urls):  # the first replica that answers
            try:
                _ask_drain(one, token, agent_id)
                return
            except click.ClickException as exc:
                if i == len(urls) - 1 or not exc.message.startswith("cannot reach"):
                    raise
    capabilities = ([c for cap in caps for c in cap.replace(",", " ").split()]
                    or ["shell", "polyglot"])
    prefix = agent_id or f"{socket.gethostname()}-{os.getpid()}"

    async def announce(isolating: bool) -> None:
        await _announce_agent(url, prefix, count, [*capabilities, *(
            ["isolated"] if isolating and "isolated" not in capabilities else [])],
            local=local, isolate_all=isolate)

    async def run() -> None:
        from agent.drain import signal_events

        stop, draining = signal_events()
        scrub_secrets()  # the token is read: a job cannot find it in /proc/$PPID/environ
        tasks = await _run_agents(url, token, count, capabilities, prefix, stop, local=local,
                                  isolate_all=isolate, announce=announce, drain=draining)
        stopping = asyncio.create_task(stop.wait())
        # Until stopped, or every agent has drained and returned.
        await asyncio.wait([stopping, asyncio.gather(*tasks, return_exceptions=True)],
                           return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        await _stop_agents(tasks)

    asyncio.run(run())


def _ask_drain(url: str, token: str, agent_id: str | None) -> None:
    """`cryopg agent --drain --id ID`: the server marks the agent(s) draining."""
    import urllib.error
    import urllib.request

    if not agent_id:
        raise click.UsageError("--drain needs --id (the id the agent was started with)")
    req = urllib.request.Request(
        f"{url.rstrip('/')}/api/v1/agent/drain", method="POST",
        data=json.dumps({"agent_id": agent_id}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            n = json.loads(resp.read())["draining"]
    except urllib.error.HTTPError as exc:
        raise click.ClickException(f"the server refused the drain ({exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"cannot reach the server at {url}: {exc}") from None
    click.echo(f"draining {n} agent(s) of id {agent_id}")


COMMANDS = [agent_cmd]
