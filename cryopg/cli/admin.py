"""Commands for an org's admins, over HTTP with the user token: secrets, members,
projects. A secret's value is read from stdin or a file, never from argv (argv shows
in `ps` and in shell history)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

import click

from cryopg.cli.client import Client
from cryopg.cli.target import resolve


@click.group()
def secret() -> None:
    """Project secrets: injected into a trusted run's environment at claim time."""


@secret.command("set")
@click.argument("name")
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the value from this file instead of stdin.")
def secret_set(name: str, file: Path | None) -> None:
    """Set secret NAME to the value on stdin (or in --file); one trailing newline is dropped."""
    if file is not None:
        value = file.read_text()
    elif sys.stdin.isatty():
        value = click.prompt(f"value of {name}", hide_input=True, err=True)
    else:
        value = sys.stdin.read()
    value = value[:-1] if value.endswith("\n") else value
    if not value:
        raise click.ClickException("the secret's value is empty")
    target = resolve()
    got = Client(target).call("PUT", f"/secrets/{quote(name, safe='')}", {"value": value})
    click.echo(f"{'created' if got.get('created') else 'updated'} secret {name} "
               f"in {target.org}/{target.project}")


@secret.command("list")
def secret_list() -> None:
    """Print the names of the project's secrets (never their values)."""
    for s in Client(resolve()).call("GET", "/secrets")["secrets"]:
        click.echo(s["name"])


@secret.command("delete")
@click.argument("name")
def secret_delete(name: str) -> None:
    """Delete secret NAME."""
    Client(resolve()).call("DELETE", f"/secrets/{quote(name, safe='')}")
    click.echo(f"deleted secret {name}")


def _org_call(method: str, path: str, body: object = None) -> object:
    target = resolve()
    client = Client(target)
    with client._request(method, f"/api/v1/orgs/{target.org}{path}", body) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else {}


@click.group()
def member() -> None:
    """Members of the org and their roles (owner, admin, member, viewer)."""


@member.command("list")
def member_list() -> None:
    """Print login and role of every member."""
    got = _org_call("GET", "/members")
    for m in got["members"]:  # type: ignore[index]
        click.echo(f"{m['login']}\t{m['role']}")


@member.command("add")
@click.argument("login")
@click.option("--role", type=click.Choice(["owner", "admin", "member", "viewer"]),
              default="member", show_default=True)
def member_add(login: str, role: str) -> None:
    """Add LOGIN with a role, or change its role (Admin; Owner to grant owner)."""
    _org_call("PUT", f"/members/{quote(login, safe='')}", {"role": role})
    click.echo(f"{login} is {role}")


@member.command("remove")
@click.argument("login")
def member_remove(login: str) -> None:
    """Remove LOGIN and every token it holds."""
    _org_call("DELETE", f"/members/{quote(login, safe='')}")
    click.echo(f"removed {login}")


@click.group()
def project() -> None:
    """Projects of the org: a slug is permanent, a name renames."""


@project.command("create")
@click.argument("slug")
@click.option("--name", help="Display name (default: the slug).")
def project_create(slug: str, name: str | None) -> None:
    """Create project SLUG (Admin)."""
    got = _org_call("POST", "/projects", {"slug": slug, "name": name or slug})
    click.echo(f"{'created' if got.get('created') else 'exists'}: {slug}")  # type: ignore[union-attr]


@project.command("rename")
@click.argument("slug")
@click.argument("name")
def project_rename(slug: str, name: str) -> None:
    """Give project SLUG a new display name (its slug stays)."""
    _org_call("PATCH", f"/projects/{quote(slug, safe='')}", {"name": name})
    click.echo(f"{slug} is now named {name!r}")


@project.command("delete")
@click.argument("slug")
@click.option("--yes", is_flag=True, help="Confirm: every run, cell, secret and event goes.")
def project_delete(slug: str, yes: bool) -> None:
    """Delete project SLUG and everything in it (Owner). There is no undo."""
    if not yes:
        raise click.UsageError(f"deleting {slug} removes all its runs, state, secrets and "
                               "events; pass --yes to confirm")
    got = _org_call("DELETE", f"/projects/{quote(slug, safe='')}")
    click.echo(f"deleted {slug} ({got.get('runs_deleted', 0)} runs)")  # type: ignore[union-attr]


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    from cryopg.cli.inscript_client import parse_duration

    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if seconds <= 0:
        raise click.BadParameter("a retention must be longer than zero")
    return seconds


def _days(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@project.command("retention")
@click.argument("slug")
@click.option("--runs", callback=_duration, help="Keep terminal runs this long (e.g. 90d).")
@click.option("--events", callback=_duration, help="Keep bus events this long (e.g. 30d).")
def project_retention(slug: str, runs: float | None, events: float | None) -> None:
    """Show, or with --runs/--events set (Admin), how long SLUG keeps finished runs (with
    their logs, journal and run-scoped state) and bus events."""
    path = f"/projects/{quote(slug, safe='')}/retention"
    if runs is None and events is None:
        got = _org_call("GET", path)
    else:
        got = _org_call("PUT", path, {"runs_seconds": runs, "events_seconds": events})
    click.echo(f"runs\t{_days(got['runs_seconds'])}")  # type: ignore[index]
    click.echo(f"events\t{_days(got['events_seconds'])}")  # type: ignore[index]


COMMANDS = [secret, member, project]
