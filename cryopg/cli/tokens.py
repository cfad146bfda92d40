"""`cryopg token`: operator commands on the database that create, list and revoke
tokens (only a token's hash is stored)."""

from __future__ import annotations

from typing import Any

import click

from cryopg.cli.processes import DB_URL, _with_pool

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

    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    for t in _with_pool(database_url, work):
        # A token works ("live") until it is revoked or expires; say when it will.
        state = ("revoked" if t.revoked_at else
                 f"expired {t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at and t.expires_at <= now
                 else f"live (expires {t.expires_at:%Y-%m-%d %H:%M})" if t.expires_at
                 else "live")
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


COMMANDS = [token_cmd]
