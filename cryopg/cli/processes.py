"""Commands that run processes (dev, server, agent, migrate) and the operator commands
that work on the database directly (token, master-key)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import click

from cryopg import logfmt
from cryopg.cli.target import DEV_FILE, STATE_DIR, find_dev_file, refuse_inside_run
from cryopg.errors import CryoError
from cryopg.secret_env import scrub_secrets

DB_URL = click.option("--database-url", envvar="CRYOPG_DATABASE_URL", metavar="URL",
                      help="PostgreSQL URL or conninfo [env CRYOPG_DATABASE_URL].")
CLAIM = click.option("--claim-seconds", default=30.0, show_default=True,
                     help="How long a claim lives without a log flush or heartbeat.")
TICK = click.option("--tick-interval", default=1.0, show_default=True,
                    help="Seconds between sweeps (expired claims, due sleeps).")
# What dev agents advertise and their token's ceiling. A deployed agent opts into
# connector (http nodes) by name; the local stack takes every kind of work.
DEV_CAPS = ["shell", "polyglot", "connector"]
DEV_OWNER = "dev"
# How long stopping agents get to kill their scripts and hand their runs back.
AGENT_STOP_SECONDS = 5.0
# How long a stopping server lets requests in flight finish (long-polls are released at
# once). With PostgreSQL down a request can wait on the pool for 10 s; it is not worth
# holding the exit for: its client retries against the next server.
SHUTDOWN_SECONDS = 2.0


def _fail(exc: BaseException) -> click.ClickException:
    return click.ClickException(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))


def _migrate(dsn: str) -> bool:
    from cryopg.migrate import MigrationError, migrate

    try:
        return migrate(dsn)
    except MigrationError as exc:
        raise _fail(exc) from None
    except Exception as exc:  # psycopg errors: the database is down or refuses us
        raise click.ClickException(f"cannot migrate the database: {_fail(exc).message}") from None


@click.command("migrate")
@DB_URL
def migrate_cmd(database_url: str | None) -> None:
    """Create or upgrade the cryo schema (a second run changes nothing)."""
    if not database_url:
        raise click.ClickException("--database-url (or CRYOPG_DATABASE_URL) is required")
    click.echo("migrated" if _migrate(database_url) else "already up to date")


def _master_key_from_env() -> Any:
    from cryopg.seal import MasterKey, parse_master_key

    value = os.environ.get("CRYOPG_MASTER_KEY")
    if not value:
        return None
    try:
        return MasterKey(parse_master_key(value))
    except CryoError as exc:
        raise _fail(exc) from None


def _cannot_listen(host: str, port: int, exc: OSError) -> click.ClickException:
    hint = (f"; another process holds port {port}: pick another with --port"
            if exc.errno == errno.EADDRINUSE else "")
    return click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}")


def _check_port(host: str, port: int) -> None:
    """Refuses a port another process holds before anything is initialised or started, so
    a clash costs no new cluster (the server binds it for real later, as aiohttp does:
    with SO_REUSEADDR, which still fails on a port someone listens on)."""
    if port == 0:
        return
    try:
        addrs = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # the real bind says what is wrong with the host
    for family, kind, proto, _, addr in addrs:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(addr)
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise _cannot_listen(host, port, exc) from None


async def _start_site(config: Any, host: str, port: int) -> tuple[Any, str]:
    from aiohttp import web

    from cryopg.server.app import build_app

    runner = web.AppRunner(build_app(config), handle_signals=False,
                           shutdown_timeout=SHUTDOWN_SECONDS)
    try:
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise _cannot_listen(host, port, exc) from None
    except CryoError as exc:
        await runner.cleanup()
        raise _fail(exc) from None
    bound = runner.addresses[0][1]
    return runner, f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{bound}"


def _stop_event() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _oidc_from_env() -> Any:
    """Sign-in through an OIDC issuer, when CRYOPG_OIDC_ISSUER and _CLIENT_ID are set."""
    from cryopg.server.oidc import OidcSettings

    try:
        return OidcSettings.from_env()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _log_store_from_env() -> Any:
    """Finished runs' logs in an S3-compatible store, when CRYOPG_LOGS_S3_BUCKET is set."""
    from cryopg.logstore.settings import LogStoreSettings

    try:
        return LogStoreSettings.from_env()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _replica_from_env() -> str:
    from cryopg.server.replica import replica_id_from_env

    try:
        return replica_id_from_env()
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("server")
@DB_URL
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=7777, show_default=True)
@CLAIM
@TICK
@logfmt.option("server")
def server_cmd(database_url: str | None, host: str, port: int, claim_seconds: float,
               tick_interval: float) -> None:
    """Run the HTTP server (needs CRYOPG_MASTER_KEY and a migrated database)."""
    from cryopg.server.config import ServerConfig

    if not database_url:
        raise click.ClickException("--database-url (or CRYOPG_DATABASE_URL) is required")
    master = _master_key_from_env()
    if master is None:
        raise click.ClickException(
            "CRYOPG_MASTER_KEY is not set; the server will not start without its master key")
    config = ServerConfig(database_url, master, claim_seconds=claim_seconds,
                          tick_interval=tick_interval, oidc=_oidc_from_env(),
                          replica_id=_replica_from_env(), log_store=_log_store_from_env())

    async def run() -> None:
        stop = _stop_event()
        runner, url = await _start_site(config, host, port)
        scrub_secrets()  # read by now (the app's startup read its stores' settings)
        click.echo(f"cryopg server listening on {url}", err=True)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(run())


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


MAX_TOKEN_DAYS = 3650  # a token's --expires: at most ten years (rotate before then)


def _parse_expiry(text: str | None) -> Any:
    import datetime as dt

    from cryopg.cli.inscript_client import parse_duration

    if not text:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expires") from None
    if not 0 < seconds <= MAX_TOKEN_DAYS * 86400:
        raise click.BadParameter(f"{text!r} must be more than 0 and at most {MAX_TOKEN_DAYS}d "
                                 "(ten years); leave --expires out for a token that never "
                                 "expires", param_hint="--expires")
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)


def _dev_database_url() -> str | None:
    """The database of the dev stack running here (its dev.json names it), if any."""
    found = find_dev_file()
    if found is None:
        return None
    try:
        return str(json.loads(found.read_text())["database_url"])
    except (OSError, ValueError, KeyError):
        return None


def _with_pool(database_url: str | None, work: Any) -> Any:
    """Token and master-key commands: the given database, else the one of the dev stack
    running in this directory (or one above it)."""
    from cryopg.db import connection, open_pool

    database_url = database_url or _dev_database_url()
    if not database_url:
        raise click.ClickException("--database-url (or CRYOPG_DATABASE_URL) is required "
                                   "outside a running cryopg dev directory")

    async def run() -> Any:
        pool = await open_pool(database_url, max_size=1)
        try:
            async with connection(pool) as conn:
                return await work(conn)
        finally:
            await pool.close()

    try:
        return asyncio.run(run())
    except CryoError as exc:
        raise _fail(exc) from None


_TOKEN_CREATE_OPTIONS = [
    click.option("--kind", type=click.Choice(["user", "agent"]), required=False),
    click.option("--org", default="dev", show_default=True),
    click.option("--name", default="cli", show_default=True),
    click.option("--member", default="owner", show_default=True,
                 help="User tokens: the member it acts for (created if missing, with --role)."),
    click.option("--role", type=click.Choice(["owner", "admin", "member", "viewer"]),
                 default="owner", show_default=True, help="Role of a member created here."),
    click.option("--cap", "caps", multiple=True,
                 help="Agent capability ceiling (repeatable; default shell and polyglot)."),
    click.option("--expires", metavar="DURATION",
                 help="Expire after e.g. 30d, 12h, at most 3650d (default never)."),
]


def _token_create_options(fn: Any) -> Any:
    for option in reversed(_TOKEN_CREATE_OPTIONS):
        fn = option(fn)
    return fn


def _create_token(database_url: str | None, kind: str | None, org: str, name: str, member: str,
                  role: str, caps: tuple[str, ...], expires: str | None) -> None:
    from cryopg import engine
    from cryopg.server.auth import new_secret, secret_hash

    if kind is None:
        raise click.UsageError("--kind user|agent is required")
    expires_at = _parse_expiry(expires)
    secret = new_secret(kind)

    async def work(conn: Any) -> None:
        if kind == "user":
            await engine.ensure_member(conn, org, member, role)
        await engine.create_token(conn, kind, org, name, secret_hash(secret),
                                  [c for cap in caps for c in cap.replace(",", " ").split()],
                                  expires_at=expires_at, member=member if kind == "user" else None)

    _with_pool(database_url, work)
    click.echo(secret)


@click.group("token", invoke_without_command=True)
@DB_URL
@_token_create_options
@click.pass_context
def token_cmd(ctx: click.Context, database_url: str | None, kind: str | None, org: str, name: str,
              member: str, role: str, caps: tuple[str, ...], expires: str | None) -> None:
    """Operator commands on the database: create, list and revoke tokens.

    `cryopg token --kind …` (no subcommand) is `cryopg token create --kind …`."""
    if ctx.invoked_subcommand is None:
        _create_token(database_url, kind, org, name, member, role, caps, expires)


@token_cmd.command("create")
@DB_URL
@_token_create_options
def token_create(database_url: str | None, kind: str | None, org: str, name: str, member: str,
                 role: str, caps: tuple[str, ...], expires: str | None) -> None:
    """Create a token and print its secret once (only its hash is stored)."""
    _create_token(database_url, kind, org, name, member, role, caps, expires)


@token_cmd.command("list")
@DB_URL
@click.option("--org", default="dev", show_default=True)
def token_list(database_url: str | None, org: str) -> None:
    """List the org's tokens: id, kind, member, ceiling, expiry, revocation."""
    from cryopg import engine

    async def work(conn: Any) -> Any:
        return await engine.list_tokens(conn, org)

    for t in _with_pool(database_url, work):
        state = ("revoked" if t.revoked_at else
                 f"expires {t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at else "live")
        who = t.member or ",".join(t.capabilities)
        click.echo(f"{t.id}\t{t.kind}\t{t.name}\t{who}\t{state}")


@token_cmd.command("revoke")
@DB_URL
@click.option("--org", default="dev", show_default=True)
@click.argument("token_id")
def token_revoke(database_url: str | None, org: str, token_id: str) -> None:
    """Revoke a token by id; it stops working at once."""
    from cryopg import engine

    async def work(conn: Any) -> bool:
        return await engine.revoke_token(conn, org, token_id)

    done = _with_pool(database_url, work)
    click.echo(f"revoked {token_id}" if done else f"{token_id} was already revoked")


@click.group("master-key")
def master_key_cmd() -> None:
    """The deployment master key, which wraps every org's data key."""


def _dev_key_file(database_url: str | None) -> Path | None:
    """The key file of the dev stack running here (`.cryopg/master.key`), when the
    rotation is of that stack's database."""
    found = find_dev_file()
    if found is None:
        return None
    try:
        dev_url = str(json.loads(found.read_text())["database_url"])
    except (OSError, ValueError, KeyError):
        return None
    if database_url and database_url != dev_url:
        return None
    key_file = found.parent / "master.key"
    return key_file if key_file.is_file() else None


@master_key_cmd.command("rotate")
@DB_URL
@click.option("--generate", is_flag=True, help="Generate the new key and print it once.")
def master_key_rotate(database_url: str | None, generate: bool) -> None:
    """Re-wrap every org key under a new master key, all in one transaction.

    The old key comes from CRYOPG_MASTER_KEY (in a running dev stack's directory, from
    .cryopg/master.key when that is not set), the new one from stdin (or --generate).
    Payloads are untouched: the org data keys stay the same, only their wrapping
    changes. A dev stack's .cryopg/master.key is rewritten with the new key; restart
    the servers (or `cryopg dev`) with the new key afterwards."""
    from cryopg import engine
    from cryopg.seal import MasterKey, generate_master_key, parse_master_key

    key_file = _dev_key_file(database_url)
    old = _master_key_from_env()
    if old is None and key_file is not None:
        try:
            old = MasterKey(parse_master_key(key_file.read_text()))
        except CryoError as exc:
            raise click.ClickException(f"{key_file}: {_fail(exc).message}") from None
    if old is None and key_file is None and (Path.cwd() / STATE_DIR / "master.key").is_file():
        raise click.ClickException("the dev stack of this directory is not running: start "
                                   "`cryopg dev`, then rotate from here (that rewrites "
                                   ".cryopg/master.key too)")
    if old is None:
        raise click.ClickException("CRYOPG_MASTER_KEY (the current master key) is not set")
    text = generate_master_key() if generate else sys.stdin.readline()
    try:
        new = MasterKey(parse_master_key(text))
    except CryoError as exc:
        raise _fail(exc) from None
    # The dev stack's file follows only when it holds the key being replaced (a stack
    # started with CRYOPG_MASTER_KEY set reads that instead).
    if key_file is not None and old.key_id != _file_key_id(key_file):
        key_file = None
    staged = _stage_key(key_file, text) if key_file is not None else None

    async def work(conn: Any) -> int:
        rows = []
        for org, key_id, wrapped in await engine.list_org_keys(conn):
            data_key = old.unwrap(org, key_id, wrapped)
            rows.append((org, wrapped, new.wrap(org, key_id, data_key)))
        return await engine.rewrap_org_keys(conn, rows) if rows else 0

    try:
        count = _with_pool(database_url, work)
    except BaseException:
        if staged is not None:
            staged.unlink(missing_ok=True)
        raise
    if generate:
        click.echo(text)
    click.echo(f"re-wrapped {count} org key(s) under master key {new.key_id}", err=True)
    if key_file is not None and staged is not None:
        os.replace(staged, key_file)  # committed: from now on only the new key opens them
        click.echo(f"wrote the new key to {key_file}; restart `cryopg dev` to use it",
                   err=True)
    else:
        click.echo("restart every server with CRYOPG_MASTER_KEY set to the new key", err=True)


def _file_key_id(key_file: Path) -> str | None:
    from cryopg.seal import MasterKey, parse_master_key

    try:
        return MasterKey(parse_master_key(key_file.read_text())).key_id
    except (OSError, CryoError):
        return None


def _stage_key(key_file: Path, text: str) -> Path:
    """Writes the new key beside the old one before the rotation commits, so the rename
    after it cannot fail for want of space or permission."""
    staged = key_file.with_name(key_file.name + ".new")
    staged.unlink(missing_ok=True)
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text.strip() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return staged


COMMANDS = [dev_cmd, server_cmd, agent_cmd, migrate_cmd, token_cmd, master_key_cmd]
