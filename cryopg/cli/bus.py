"""`cryopg emit NAME [PAYLOAD]` outside a run: publish on the project's event bus over
HTTP, as an application or an operator would. Inside a run `emit` is the in-script verb
(recorded once, whatever the replays) and never reaches this module."""

from __future__ import annotations

import click

from cryopg.cli.client import Client, part
from cryopg.cli.target import resolve


@click.command("emit")
@click.argument("name")
@click.argument("payload", required=False)
@click.option("--public", is_flag=True,
              help="Untrusted runs waiting on NAME hear it too (docs/security/trust.md).")
def emit(name: str, payload: str | None, public: bool) -> None:
    """Publish event NAME on the active project's bus (PAYLOAD is JSON, or else a string).

    Handlers of NAME start their runs and runs waiting on it wake, as for an event a run
    emits. Inside a run this is the in-script verb instead."""
    from cryopg.cli.inscript_client import UsageError, parse_value

    try:
        value = None if payload is None else parse_value(payload)
    except UsageError as e:
        raise click.BadParameter(str(e), param_hint="PAYLOAD") from None
    target = resolve()
    body: dict[str, object] = {"payload": value}
    if public:
        body["public"] = True
    got = Client(target).call("POST", f"/events/{part(name, 'event name')}", body)
    click.echo(f"published {name} in {target.org}/{target.project} (event {got['event_id']})")


COMMANDS = [emit]
