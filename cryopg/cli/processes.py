"""The server and migrate commands, and what the process commands share: the database
options, starting the HTTP site, stop signals, settings read from the environment, and
`_with_pool` for the operator commands that work on the database directly."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
from collections.abc import Coroutine
from typing import Any

import click

from cryopg import logfmt
from cryopg.cli.target import find_dev_file
from cryopg.errors import CryoError
from cryopg.secret_env import scrub_secrets

DB_URL = click.option("--database-url", envvar="CRYOPG_DATABASE_URL", metavar="URL",
                      help="PostgreSQL URL or conninfo [env CRYOPG_DATABASE_URL].")
CLAIM = click.option("--claim-seconds", default=30.0, show_default=True,
                     help="How long a claim lives without a log flush or heartbeat.")
TICK = click.option("--tick-interval", default=1.0, show_default=True,
                    help="Seconds between sweeps (expired claims, due sleeps).")
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
    from cryopg.replica import replica_id_from_env

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

    run_server_loop(run())


def run_server_loop(main: Coroutine[Any, Any, None]) -> None:
    """Runs the server's loop: uvloop's when it is installed (the `fast` extra), as its
    loop in C spends less of each request's CPU, most of all on an agent's long poll
    answered the moment a run is submitted; CRYOPG_EVENT_LOOP=asyncio keeps Python's."""
    choice = os.environ.get("CRYOPG_EVENT_LOOP", "").strip().lower()
    if choice not in ("", "uvloop", "asyncio"):
        raise click.ClickException("CRYOPG_EVENT_LOOP must be uvloop or asyncio")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise click.ClickException(
                    "CRYOPG_EVENT_LOOP=uvloop, but uvloop is not installed "
                    "(pip install 'cryopg[fast]')") from None
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


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


COMMANDS = [server_cmd, migrate_cmd]
