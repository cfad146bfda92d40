"""`cryopg workflow list` and `workflow delete`: the project's stored workflows. (`put`
and `get` are beside `submit` in main.py, which reads scripts the same way.)"""

from __future__ import annotations

import json

import click

from cryopg.cli.client import Client, part
from cryopg.cli.target import resolve


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workflow_list(as_json: bool) -> None:
    """List the stored workflows: name, kind, file, what starts them, when last put."""
    listed = Client(resolve()).call("GET", "/workflows")["workflows"]
    if as_json:
        click.echo(json.dumps(listed, indent=2))
        return
    if not listed:
        click.echo("no stored workflows in this project (cryopg workflow put NAME FILE)",
                   err=True)
        return
    rows = [("NAME", "KIND", "FILE", "TRIGGERS", "UPDATED")]
    for w in listed:
        starts = [f"{w[k]} {k[:-1] if w[k] == 1 else k}" for k in
                  ("schedules", "handlers", "webhooks") if w[k]]
        rows.append((w["name"], w["kind"], w["filename"], ", ".join(starts) or "-",
                     (w["updated_at"] or "")[:19].replace("T", " ")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@click.command("delete")
@click.argument("name")
def workflow_delete(name: str) -> None:
    """Delete stored workflow NAME with the schedules and handlers its `on:` made.

    Refused while a schedule, handler or webhook created on its own still starts it
    (delete those first). Runs already started keep their copy."""
    target = resolve()
    Client(target).call("DELETE", f"/workflows/{part(name, 'workflow name')}")
    click.echo(f"deleted workflow {name} from {target.org}/{target.project}")


COMMANDS = [workflow_list, workflow_delete]
