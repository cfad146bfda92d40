"""`cryopg run FILE`: run one workflow locally, start to finish, as `act` or `go run` would.

It runs FILE from the directory FILE is in. When a stack already serves this directory
(`cryopg dev` here or above, or CRYOPG_URL) the run goes there. Otherwise an embedded
stack starts for the run alone: the dev cluster under `./.cryopg/` (made on first use,
as `cryopg dev` makes it), the server on a free port and a few agents, and everything
stops once the run ends. Either way the log streams to stdout and the exit code is the
run's (dev.py has the stack's parts; this module only puts them together).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

import click

from cryopg.cli.target import DEV_FILE, STATE_DIR, Target, find_dev_file, refuse_inside_run

# Agents of an embedded stack: one runs the workflow, another can take a child or an
# activity while it waits.
RUN_AGENTS = 2


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/health", timeout=3) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):
        return False


def _running_target() -> Target | None:
    """The stack this directory already has: CRYOPG_URL, or a live dev stack's file (a
    file a stopped stack left behind, whose server does not answer, does not count)."""
    from cryopg.cli.target import resolve

    if os.environ.get("CRYOPG_URL"):
        return resolve()
    found = find_dev_file()
    if found is None:
        return None
    try:
        url = json.loads(found.read_text())["url"]
    except (OSError, ValueError, KeyError):
        return None
    return resolve() if _answers(url) else None


def _submit(target: Target, body: dict[str, Any]) -> str:
    from cryopg.cli.client import Client

    run_id = str(Client(target).call("POST", "/runs", body)["run_id"])
    click.echo(f"cryopg run: run {run_id}", err=True)
    return run_id


def _follow(target: Target, run_id: str) -> int:
    from cryopg.cli.client import Client
    from cryopg.cli.follow import follow_run as follow

    return follow(Client(target), run_id)


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_json", metavar="JSON",
              help="Input, reaching the script as $CRYO_INPUT_FILE.")
@click.option("--interpreter", metavar="I",
              help="Run the script with I instead of choosing by extension.")
@click.option("--agents", default=RUN_AGENTS, show_default=True,
              help="Agents of an embedded stack (children and activities need free ones).")
@click.option("--timeout", metavar="DURATION",
              help="Fail the run (exit code 124) this long after it starts, e.g. 30s, 10m.")
def run_cmd(file: Path, input_json: str | None, interpreter: str | None, agents: int,
            timeout: str | None) -> None:
    """Run FILE once, here, and exit with its outcome.

    FILE runs in the directory it is in, so its relative paths, virtualenv and modules
    resolve as they would by hand. With no stack running here (`cryopg dev`, or
    CRYOPG_URL) an embedded one starts under ./.cryopg/ for this run and stops after it.
    The log streams to stdout; the exit code is the run's (0 succeeded, the script's own
    code when it failed, 124 timed out, 130 cancelled). Ctrl-C cancels the run."""
    from cryopg.cli import pipeline
    from cryopg.cli.follow import parse_json as _parse_json
    from cryopg.cli.follow import read_script as _read_script

    refuse_inside_run()
    if agents < 1:
        raise click.BadParameter("at least one agent runs the workflow", param_hint="--agents")
    value = _parse_json(input_json, "--input")
    source = _read_script(file)
    if pipeline.is_pipeline_file(file, source):
        pipeline.check(file, source)
    body = {"source": source, "filename": file.name, "input": value,
            "interpreter": interpreter, "workdir": str(file.resolve().parent),
            **({"timeout": timeout} if timeout else {})}
    target = _running_target()
    if target is not None:
        sys.exit(_follow(target, _submit(target, body)))
    sys.exit(_embedded(body, agents))


def _embedded(body: dict[str, Any], agents: int) -> int:
    """Start the dev cluster, server and agents, run, and stop what was started here."""
    from cryopg.cli.dev import _dev_master_key, start_dev_cluster
    from cryopg.cli.processes import _migrate
    from cryopg.devpg import Cluster
    from cryopg.server.config import ServerConfig

    state = Path.cwd() / STATE_DIR
    state.mkdir(exist_ok=True)
    probe = Cluster(state)
    was_running = probe.is_initialized() and probe.is_running()
    cluster = start_dev_cluster(state)
    try:
        database_url = cluster.dsn("cryopg")
        _migrate(database_url)
        config = ServerConfig(database_url, _dev_master_key(state))
        return asyncio.run(_run_on_stack(config, state, body, agents))
    finally:
        if not was_running:  # a cluster someone else started keeps running
            cluster.stop()


async def _run_on_stack(config: Any, state: Path, body: dict[str, Any], agents: int) -> int:
    from cryopg.cli.agent_cmd import _run_agents, _stop_agents
    from cryopg.cli.dev import DEV_CAPS, _dev_tokens
    from cryopg.cli.processes import _start_site, _stop_event
    from cryopg.errors import CryoError

    stop = _stop_event()
    dev_file = state / DEV_FILE
    try:
        user_token, agent_token = await _dev_tokens(config.database_url, dev_file)
    except CryoError as exc:
        raise click.ClickException(str(exc)) from None
    runner, url = await _start_site(config, "127.0.0.1", 0)
    tasks: list[asyncio.Task[None]] = []
    wrote = False
    try:
        tasks = await _run_agents(url, agent_token, agents, DEV_CAPS, f"run-{os.getpid()}",
                                  stop, local=True)
        click.echo(f"cryopg run: started a local stack ({url}, {agents} agent(s)); it stops "
                   "when the run ends", err=True)
        target = Target(url, user_token, "dev", "default", agent_token)
        _write_dev_file(dev_file, url, user_token, agent_token, config.database_url)
        wrote = True
        run_id = await asyncio.to_thread(_submit, target, body)
        follow = asyncio.ensure_future(asyncio.to_thread(_follow, target, run_id))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({follow, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not follow.done():  # Ctrl-C: cancel the run; following then ends with it
            click.echo(f"cryopg run: cancelling {run_id}", err=True)
            await asyncio.to_thread(_cancel, target, run_id)
        stopping.cancel()
        return await follow
    finally:
        stop.set()
        await _stop_agents(tasks)
        await runner.cleanup()
        if wrote:
            dev_file.unlink(missing_ok=True)


def _write_dev_file(dev_file: Path, url: str, user_token: str, agent_token: str,
                    database_url: str) -> None:
    """While the run lasts, this stack is the one running here: `cryopg runs`, `logs` or
    another `cryopg run` from a second terminal use it."""
    fields = {"url": url, "user_token": user_token, "agent_token": agent_token, "org": "dev",
              "project": "default", "database_url": database_url}
    tmp = dev_file.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(fields, fh, indent=2)
    os.replace(tmp, dev_file)  # readers never see a half-written file


def _cancel(target: Target, run_id: str) -> None:
    from cryopg.cli.client import ApiError, Client

    try:
        Client(target).call("POST", f"/runs/{run_id}/cancel")
    except ApiError as exc:  # it ended meanwhile: following reports how
        click.echo(f"cryopg run: {exc.message}", err=True)


COMMANDS = [run_cmd]
