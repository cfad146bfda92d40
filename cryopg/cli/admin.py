"""Commands for an org's admins, over HTTP with the user token: secrets, members,
projects. A secret's value is read from stdin or a file, never from argv (argv shows
in `ps` and in shell history). And `app-role`, an operator command on the database
itself (like `token`): the database roles applications log in as, each bound to a tenant."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from cryopg.cli.client import Client
from cryopg.cli.processes import DB_URL
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


@project.command("list")
def project_list() -> None:
    """Print slug and name of every project of the org."""
    got = _org_call("GET", "/projects")
    for p in got["projects"]:  # type: ignore[index]
        click.echo(f"{p['slug']}\t{p['name']}")


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


@click.group("org")
def org() -> None:
    """Operator commands on the database: orgs (then `token create --org` for their
    members and agents)."""


@org.command("create")
@DB_URL
@click.argument("slug")
@click.option("--name", help="Display name (default: the slug).")
@click.option("--project", "projects", multiple=True, metavar="SLUG",
              help="Also create this project (repeatable; default: one named default).")
def org_create(database_url: str | None, slug: str, name: str | None,
               projects: tuple[str, ...]) -> None:
    """Create org SLUG and its first project; an existing one is left as it is."""
    from cryopg import engine
    from cryopg.cli.processes import _with_pool

    wanted = list(projects) or ["default"]

    async def work(conn: Any) -> tuple[bool, list[str]]:
        async with conn.transaction():  # the org and its projects, or none of them
            created = await engine.ensure_org(conn, slug, name or slug)
            made = [p for p in wanted if await engine.ensure_project(conn, slug, p, p)]
        return created, made

    created, made = _with_pool(database_url, work)
    click.echo(f"{'created' if created else 'exists'}: org {slug}"
               + (f", project {', '.join(made)}" if made else ""))


@click.group("app-role")
def app_role() -> None:
    """Database roles of applications (members of cryo_app), each held to one org and
    optionally one project. Needs a database role that may create roles (the schema
    owner or a superuser)."""


def _on_database(database_url: str | None, work: Any) -> Any:
    import psycopg

    from cryopg.cli.processes import _fail, _with_pool

    try:
        return _with_pool(database_url, work)
    except psycopg.Error as exc:  # e.g. permission denied: the caller may not create roles
        raise _fail(exc) from None


@app_role.command("create")
@DB_URL
@click.argument("role")
@click.option("--org", required=True, help="The org the role may act on.")
@click.option("--project", help="Only this project of the org (default: all of them).")
@click.option("--login/--nologin", default=True, show_default=True,
              help="Whether a role created here may log in (an existing role keeps its own).")
def app_role_create(database_url: str | None, role: str, org: str, project: str | None,
                    login: bool) -> None:
    """Create ROLE if missing (without a password), make it a member of cryo_app and bind
    it to --org [--project]; binding an existing role again moves it to that tenant."""
    from cryopg.engine.tenancy import bind_app_role

    async def work(conn: Any) -> bool:
        return await bind_app_role(conn, role, org, project, create=True, login=login)

    created = _on_database(database_url, work)
    where = f"{org}/{project}" if project else f"{org} (every project)"
    click.echo(f"{'created' if created else 'bound'} role {role}: {where}")


@app_role.command("list")
@DB_URL
def app_role_list(database_url: str | None) -> None:
    """Print every application role: role, org, project (* for all), login, membership."""
    from cryopg.engine.tenancy import list_app_roles

    async def work(conn: Any) -> Any:
        return await list_app_roles(conn)

    for r in _on_database(database_url, work):
        login = "missing" if r.can_login is None else "login" if r.can_login else "nologin"
        member = "cryo_app" if r.in_cryo_app else "not-in-cryo_app"
        click.echo(f"{r.role}\t{r.org}\t{r.project or '*'}\t{login}\t{member}")


@app_role.command("drop")
@DB_URL
@click.argument("role")
def app_role_drop(database_url: str | None, role: str) -> None:
    """Remove ROLE's binding and its membership of cryo_app; the role itself stays
    (DROP ROLE it in psql if it should go)."""
    from cryopg.engine.tenancy import unbind_app_role

    async def work(conn: Any) -> bool:
        return await unbind_app_role(conn, role)

    done = _on_database(database_url, work)
    click.echo(f"unbound {role}" if done else f"{role} was not an application role")


COMMANDS = [secret, member, project, org, app_role]
