"""`cryopg connection`: a project's stored connections for connector nodes (a base URL,
an auth scheme, the project secret holding the credential, default headers). The
credential is a project secret (`cryopg secret set`), named here, never given here."""

from __future__ import annotations

import json
from urllib.parse import quote

import click

from cryopg.cli.client import Client
from cryopg.cli.target import resolve

AUTH = click.Choice(["none", "bearer", "basic", "header"])


@click.group()
def connection() -> None:
    """Stored connections that connector nodes call by name (like secrets, Admins write them)."""


def _header(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition(":")
    if not sep or not name.strip():
        raise click.BadParameter(f"{value!r} is not NAME: VALUE", param_hint="--default-header")
    return name.strip(), rest.strip()


@connection.command("create")
@click.argument("name")
@click.option("--base-url", required=True,
              help="http(s)://host[:port][/path] the node's path goes under.")
@click.option("--auth", type=AUTH, default="none", show_default=True,
              help="How the credential is sent: bearer (Authorization: Bearer), basic "
                   "(with --username), header (the --header header's value), or none.")
@click.option("--secret", help="The project secret holding the token or password.")
@click.option("--username", help="The user name of basic auth.")
@click.option("--header", help="The header that carries the secret (auth header), e.g. X-Api-Key.")
@click.option("--default-header", "default_headers", multiple=True, metavar="'NAME: VALUE'",
              help="A header every request of this connection sends (repeatable).")
@click.option("--replace", is_flag=True, help="Replace a connection of that name.")
def connection_create(name: str, base_url: str, auth: str, secret: str | None,
                      username: str | None, header: str | None,
                      default_headers: tuple[str, ...], replace: bool) -> None:
    """Store connection NAME of the project."""
    target = resolve()
    got = Client(target).call("POST", "/connections", {
        "name": name, "base_url": base_url, "auth": auth, "secret": secret,
        "username": username, "header": header, "replace": replace,
        "headers": dict(_header(h) for h in default_headers)})
    click.echo(f"{'created' if got.get('created') else 'replaced'} connection {name} "
               f"in {target.org}/{target.project}")


@connection.command("list")
def connection_list() -> None:
    """Print the project's connections: name, auth (secret), base URL."""
    for c in Client(resolve()).call("GET", "/connections")["connections"]:
        auth = c["auth"] + (f" ({c['secret']})" if c.get("secret") else "")
        click.echo(f"{c['name']}\t{auth}\t{c['base_url']}")


@connection.command("show")
@click.argument("name")
def connection_show(name: str) -> None:
    """Print connection NAME as JSON (its secret's name, never a value)."""
    got = Client(resolve()).call("GET", f"/connections/{quote(name, safe='')}")
    click.echo(json.dumps(got, indent=2))


@connection.command("delete")
@click.argument("name")
def connection_delete(name: str) -> None:
    """Delete connection NAME (its secret stays)."""
    Client(resolve()).call("DELETE", f"/connections/{quote(name, safe='')}")
    click.echo(f"deleted connection {name}")


COMMANDS = [connection]
