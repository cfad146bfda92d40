"""`cryopg master-key rotate`: re-wrap every org's data key under a new deployment
master key, in one transaction (an operator command on the database directly)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from cryopg.cli.processes import DB_URL, _fail, _master_key_from_env, _with_pool
from cryopg.cli.target import STATE_DIR, find_dev_file
from cryopg.errors import CryoError


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


COMMANDS = [master_key_cmd]
