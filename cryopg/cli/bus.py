"""`cryopg emit NAME [PAYLOAD]` outside a run: publish on the project's event bus over
HTTP, as an application or an operator would; `cryopg events` lists what was published.
Inside a run `emit` is the in-script verb (recorded once, whatever the replays) and never
reaches this module."""

from __future__ import annotations

import json

import click

from cryopg.cli.client import Client, part, valid_text
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


@click.command()
@click.option("--name", help="Only events of this name.")
@click.option("--limit", default=50, show_default=True, help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def events(name: str | None, limit: int, as_json: bool) -> None:
    """List the project's bus events, newest first."""
    from urllib.parse import urlencode

    if name is not None:
        valid_text(name, "--name")
    query = urlencode({k: v for k, v in (("name", name), ("limit", limit)) if v is not None})
    listed = Client(resolve()).call("GET", f"/events?{query}")["events"]
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    if not listed:
        click.echo("no events" + (f" named {name}" if name else "") + " in this project yet",
                   err=True)
        return
    # REFUSED: why no handler run started for the event ('-' when nothing was refused).
    click.echo("ID\tCREATED\tNAME\tPAYLOAD\tEMITTED BY\tREFUSED")
    for ev in listed:
        payload = json.dumps(ev["payload"], separators=(",", ":"))
        click.echo(f"{ev['id']}\t{ev['created_at'][:19].replace('T', ' ')}\t{ev['name']}\t"
                   f"{payload}\t{ev['emitted_by_run'] or '-'}\t{ev.get('refused') or '-'}")


COMMANDS = [emit, events]
