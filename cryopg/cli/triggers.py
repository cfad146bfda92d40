"""Schedules, webhooks and event handlers of the active project, over HTTP with the
user token (docs/triggers.md)."""

from __future__ import annotations

import json
from urllib.parse import quote

import click

from cryopg.cli.client import Client
from cryopg.cli.target import resolve


def _json_arg(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from None


def _when(value: str | None) -> str:
    return value[:19].replace("T", " ") if value else "-"


@click.group()
def schedule() -> None:
    """Start a stored workflow on a cron expression or an interval."""


@schedule.command("create")
@click.argument("name")
@click.option("--workflow", required=True, help="The stored workflow to start.")
@click.option("--cron", "cron_expr", metavar="EXPR", help="A cron expression, e.g. '*/5 * * * *'.")
@click.option("--timezone", metavar="TZ", help="The cron's time zone (IANA name; default UTC).")
@click.option("--every", metavar="DURATION",
              help="An interval instead of a cron, e.g. 30s, 10m, 1h.")
@click.option("--input", "input_value", callback=_json_arg, metavar="JSON",
              help="The run's input (a JSON object; trigger is added to it).")
def schedule_create(name: str, workflow: str, cron_expr: str | None, timezone: str | None,
                    every: str | None, input_value: object) -> None:
    """Create schedule NAME: start --workflow on --cron EXPR or --every DURATION."""
    if (cron_expr is None) == (every is None):
        raise click.UsageError("give either --cron EXPR or --every DURATION")
    if timezone is not None and cron_expr is None:
        raise click.UsageError("--timezone goes with --cron")
    body: dict[str, object] = {"name": name, "workflow": workflow}
    if cron_expr is not None:
        body.update(cron=cron_expr, timezone=timezone)
    else:
        body["every"] = every
    if input_value is not None:
        body["input"] = input_value
    got = Client(resolve()).call("POST", "/schedules", body)
    click.echo(f"created schedule {name}: next fire {_when(got['next_fire_at'])} UTC")


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def schedule_list(as_json: bool) -> None:
    """List the project's schedules with their last and next fire times (UTC)."""
    rows = Client(resolve()).call("GET", "/schedules")["schedules"]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo("NAME\tWORKFLOW\tWHEN\tSTATE\tLAST FIRE\tNEXT FIRE\tLAST RUN")
    for s in rows:
        when = (f"cron {s['cron']} ({s['timezone']})" if s["cron"]
                else f"every {s['every_seconds']:g}s")
        click.echo(f"{s['name']}\t{s['workflow']}\t{when}\t"
                   f"{'paused' if s['paused'] else 'active'}\t{_when(s['last_fire_at'])}\t"
                   f"{_when(s['next_fire_at'])}\t{s['last_run_id'] or '-'}")


@schedule.command("pause")
@click.argument("name")
def schedule_pause(name: str) -> None:
    """Pause schedule NAME (ticks while paused are skipped, not caught up)."""
    Client(resolve()).call("POST", f"/schedules/{quote(name, safe='')}/pause")
    click.echo(f"paused schedule {name}")


@schedule.command("resume")
@click.argument("name")
def schedule_resume(name: str) -> None:
    """Resume schedule NAME from its next tick after now."""
    got = Client(resolve()).call("POST", f"/schedules/{quote(name, safe='')}/resume")
    click.echo(f"resumed schedule {name}: next fire {_when(got['next_fire_at'])} UTC")


@schedule.command("delete")
@click.argument("name")
def schedule_delete(name: str) -> None:
    """Delete schedule NAME (the runs it started stay)."""
    Client(resolve()).call("DELETE", f"/schedules/{quote(name, safe='')}")
    click.echo(f"deleted schedule {name}")


@click.group()
def webhook() -> None:
    """Signed HTTP deliveries (e.g. from GitHub) that start a workflow or reach handlers."""


@webhook.command("create")
@click.argument("name")
@click.option("--workflow", help="Start this workflow per delivery (without it, deliveries "
                                 "are published as event webhook.<event>).")
@click.option("--status-url", metavar="URL",
              help="POST the run's outcome here when it ends ({sha} is replaced).")
def webhook_create(name: str, workflow: str | None, status_url: str | None) -> None:
    """Create webhook NAME; prints its URL and signing secret (shown this once only)."""
    target = resolve()
    got = Client(target).call("POST", "/webhooks", {"name": name, "workflow": workflow,
                                                     "status_url": status_url})
    click.echo(f"url: {target.url}{got['path']}")
    click.echo(f"secret: {got['secret']}")
    click.echo("the secret is shown only now: give it to the sender (e.g. GitHub's webhook "
               "secret), which signs each body with it", err=True)


@webhook.command("list")
def webhook_list() -> None:
    """List the project's webhooks (never their secrets)."""
    target = resolve()
    rows = Client(target).call("GET", "/webhooks")["webhooks"]
    click.echo("NAME\tWORKFLOW\tDELIVERIES\tLAST DELIVERY\tURL")
    for w in rows:
        click.echo(f"{w['name']}\t{w['workflow'] or '(bus: webhook.<event>)'}\t{w['deliveries']}\t"
                   f"{_when(w['last_delivery_at'])}\t{target.url}{w['path']}")


@webhook.command("delete")
@click.argument("name")
def webhook_delete(name: str) -> None:
    """Delete webhook NAME; its URL stops accepting deliveries."""
    Client(resolve()).call("DELETE", f"/webhooks/{quote(name, safe='')}")
    click.echo(f"deleted webhook {name}")


@click.group()
def handler() -> None:
    """Start a workflow for each event of a name published on the project bus."""


@handler.command("create")
@click.argument("name")
@click.option("--event", required=True, help="The event name.")
@click.option("--workflow", required=True, help="The stored workflow to start.")
def handler_create(name: str, event: str, workflow: str) -> None:
    """Create handler NAME: each EVENT published starts one run of WORKFLOW."""
    Client(resolve()).call("POST", "/handlers", {"name": name, "event": event,
                                                 "workflow": workflow})
    click.echo(f"created handler {name}: {event} -> {workflow}")


@handler.command("list")
def handler_list() -> None:
    """List the project's event handlers."""
    rows = Client(resolve()).call("GET", "/handlers")["handlers"]
    click.echo("NAME\tEVENT\tWORKFLOW")
    for h in rows:
        click.echo(f"{h['name']}\t{h['event']}\t{h['workflow']}")


@handler.command("delete")
@click.argument("name")
def handler_delete(name: str) -> None:
    """Delete handler NAME."""
    Client(resolve()).call("DELETE", f"/handlers/{quote(name, safe='')}")
    click.echo(f"deleted handler {name}")


COMMANDS = [schedule, webhook, handler]
