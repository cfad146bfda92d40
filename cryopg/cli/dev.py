"""`cryopg dev`: the whole local stack in one process (PostgreSQL under .cryopg/, the
server and embedded agents), and the parts `cryopg run` reuses: the dev cluster, its
master key file and its tokens."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from cryopg import logfmt
from cryopg.cli.agent_cmd import _run_agents, _stop_agents
from cryopg.cli.processes import (
    CLAIM,
    DB_URL,
    TICK,
    _check_port,
    _fail,
    _master_key_from_env,
    _migrate,
    _oidc_from_env,
    _start_site,
    _stop_event,
)
from cryopg.cli.target import DEV_FILE, STATE_DIR, refuse_inside_run
from cryopg.errors import CryoError
from cryopg.secret_env import scrub_secrets

# What dev agents advertise and their token's ceiling. A deployed agent opts into
# connector (http nodes) by name; the local stack takes every kind of work.
DEV_CAPS = ["shell", "polyglot", "connector"]
DEV_OWNER = "dev"


async def _dev_tokens(dsn: str, dev_file: Path) -> tuple[str, str]:
    """Bootstrap the dev org, its default project and an owner member, then reuse the
    tokens of an earlier start when the database still knows them."""
    from cryopg import engine
    from cryopg.db import connection, open_pool
    from cryopg.server.auth import new_secret, secret_hash

    old: dict[str, Any] = {}
    if dev_file.is_file():
        try:
            old = json.loads(dev_file.read_text())
        except ValueError:
            old = {}
    pool = await open_pool(dsn, max_size=1)
    try:
        async with connection(pool) as conn:
            await engine.ensure_org(conn, "dev", "Development")
            await engine.ensure_project(conn, "dev", "default", "Default")
            await engine.ensure_member(conn, "dev", DEV_OWNER, "owner")
        tokens = []
        for kind in ("user", "agent"):
            secret = old.get(f"{kind}_token")
            async with connection(pool) as conn:
                if secret:
                    try:
                        await engine.authenticate_token(conn, secret_hash(secret))
                        tokens.append(secret)
                        continue
                    except CryoError:
                        pass
                secret = new_secret(kind)
                await engine.create_token(conn, kind, "dev", f"dev {kind}", secret_hash(secret),
                                          DEV_CAPS if kind == "agent" else [],
                                          member=DEV_OWNER if kind == "user" else None)
                tokens.append(secret)
        return tokens[0], tokens[1]
    finally:
        await pool.close()


def _dev_master_key(state: Path) -> Any:
    from cryopg.seal import MasterKey, generate_master_key, parse_master_key

    master = _master_key_from_env()
    if master is not None:
        return master
    key_file = state / "master.key"
    if not key_file.exists():
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(generate_master_key() + "\n")
    return MasterKey(parse_master_key(key_file.read_text()))


def start_dev_cluster(state: Path) -> Any:
    """The dev stack's PostgreSQL under `state`, started (and made) if it was not, with
    its `cryopg` database."""
    from cryopg.devpg import Cluster, ClusterError

    cluster = Cluster(state)
    try:
        cluster.ensure_initialized()
        cluster.start()
        cluster.create_database("cryopg")
    except ClusterError as exc:
        raise _fail(exc) from None
    return cluster


@click.command("dev")
@DB_URL
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=7777, show_default=True, help="HTTP port (0 picks a free one).")
@click.option("--agents", default=4, show_default=True, help="Embedded agents.")
@click.option("--sample", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Submit this script once the stack is up and follow it.")
@click.option("--no-sample", is_flag=True, hidden=True)
@CLAIM
@TICK
@logfmt.option("dev")
def dev_cmd(database_url: str | None, host: str, port: int, agents: int, sample: Path | None,
            no_sample: bool, claim_seconds: float, tick_interval: float) -> None:
    """Run a whole local stack: PostgreSQL under .cryopg/, the server, and agents."""
    from cryopg.server.config import ServerConfig

    refuse_inside_run()
    _check_port(host, port)
    state = Path.cwd() / STATE_DIR
    state.mkdir(exist_ok=True)
    cluster = None
    if not database_url:
        cluster = start_dev_cluster(state)
        database_url = cluster.dsn("cryopg")
    try:
        _migrate(database_url)
        master = _dev_master_key(state)
        config = ServerConfig(database_url, master, claim_seconds=claim_seconds,
                              tick_interval=tick_interval, oidc=_oidc_from_env())
        asyncio.run(_dev_main(config, state, host, port, agents,
                              None if no_sample else sample))
    finally:
        if cluster is not None:
            cluster.stop()


async def _dev_main(config: Any, state: Path, host: str, port: int, agents: int,
                    sample: Path | None) -> None:
    stop = _stop_event()
    dev_file = state / DEV_FILE
    try:
        user_token, agent_token = await _dev_tokens(config.database_url, dev_file)
    except CryoError as exc:
        raise _fail(exc) from None
    runner, url = await _start_site(config, host, port)
    # The embedded agents' jobs are this process's children: nothing secret stays in
    # its environment (or readable through /proc) once the server has read its settings.
    scrub_secrets()
    tmp = dev_file.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url, "user_token": user_token, "agent_token": agent_token, "org": "dev",
                   "project": "default", "database_url": config.database_url}, fh, indent=2)
    os.replace(tmp, dev_file)  # readers never see a half-written file
    tasks = await _run_agents(url, agent_token, agents, DEV_CAPS, f"dev-{os.getpid()}", stop,
                              local=True)
    # The dev login rides in the URL fragment, which a browser never sends to the server,
    # so it lands in no access log.
    ui = f"{url}/#login={user_token}&org=dev&project=default"
    click.echo(f"cryopg dev: server {url}, {agents} agent(s), database {config.database_url}\n"
               f"cryopg dev: web UI {ui}\n"
               f"cryopg dev: from this directory try `cryopg submit FILE --follow`; Ctrl-C stops.",
               err=True)
    if sample is not None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "cryopg.cli.entry", "submit", str(sample), "--follow")
        code = await proc.wait()
        click.echo(f"cryopg dev: sample {sample.name} finished with exit code {code}", err=True)
    try:
        await stop.wait()
    finally:
        click.echo("cryopg dev: stopping", err=True)
        await _stop_agents(tasks)
        await runner.cleanup()
        dev_file.unlink(missing_ok=True)


COMMANDS = [dev_cmd]
