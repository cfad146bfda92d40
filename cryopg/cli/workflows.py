"""`cryopg workflow put|get|list|delete`: the project's stored workflows, which
applications submit from SQL with cryo.submit_run and triggers start by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from cryopg.cli import pipeline
from cryopg.cli.client import Client, part
from cryopg.cli.follow import read_script
from cryopg.cli.target import resolve


@click.group()
def workflow() -> None:
    """Named scripts that applications submit from SQL with cryo.submit_run."""


@workflow.command("put")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--interpreter", metavar="I", help="Run it with I instead of choosing by extension.")
@click.option("--timeout", metavar="DURATION",
              help="The default timeout of its runs (e.g. 10m): each fails with exit code 124 "
                   "that long after it starts, unless its submit gives its own.")
@click.option("--priority", type=click.IntRange(-1000, 1000), metavar="N",
              help="The default claim priority of its runs (higher first).")
def workflow_put(name: str, file: Path, interpreter: str | None, timeout: str | None,
                 priority: int | None) -> None:
    """Store FILE (a script, graph or YAML pipeline) under NAME in the active project."""
    source = read_script(file)
    if pipeline.is_pipeline_file(file, source):
        pipeline.check(file, source)
    target = resolve()
    got = Client(target).call("PUT", f"/workflows/{part(name, 'workflow name')}",
                              {"source": source, "filename": file.name,
                               "interpreter": interpreter, "workdir": os.getcwd(),
                               **({"timeout": timeout} if timeout else {}),
                               **({"priority": priority} if priority is not None else {})})
    kind = {"pipeline": "pipeline", "graph": "graph"}.get(got.get("kind"), "script")
    click.echo(f"stored {kind} workflow {name} in {target.org}/{target.project}")


@workflow.command("get")
@click.argument("name")
@click.option("--source", "with_source", is_flag=True,
              help="Print what was stored (a pipeline's YAML as written) instead.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workflow_get(name: str, with_source: bool, as_json: bool) -> None:
    """Show stored workflow NAME: its kind (script, graph or pipeline), file and jobs."""
    target = resolve()
    got = Client(target).call("GET", f"/workflows/{part(name, 'workflow name')}"
                              + ("?source=1" if with_source else ""))
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    if with_source:
        click.echo(got["source"], nl=not got["source"].endswith("\n"))
        return
    kind = got["kind"] + (f" ({got['pipeline']})" if got.get("pipeline") else "")
    click.echo(f"name:      {got['name']}\nkind:      {kind}\nfilename:  {got['filename']}")
    if got.get("interpreter"):
        click.echo(f"interpreter: {got['interpreter']}")
    if got.get("workdir"):  # where runs started by name run, on a local agent
        click.echo(f"workdir:   {got['workdir']}")
    for key in ("on", "cancel_on"):
        if got.get(key):
            click.echo(f"{key + ':':<11}{json.dumps(got[key], separators=(',', ':'))}")
    word = "jobs" if got["kind"] == "pipeline" else "nodes"
    for n in got.get("nodes") or []:
        needs = f"  needs {', '.join(n['needs'])}" if n["needs"] else ""
        click.echo(f"  {word[:-1]} {n['id']} ({n['type']}){needs}")


@workflow.command("list")
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


@workflow.command("delete")
@click.argument("name")
def workflow_delete(name: str) -> None:
    """Delete stored workflow NAME with the schedules and handlers its `on:` made.

    Refused while a schedule, handler or webhook created on its own still starts it
    (delete those first). Runs already started keep their copy."""
    target = resolve()
    Client(target).call("DELETE", f"/workflows/{part(name, 'workflow name')}")
    click.echo(f"deleted workflow {name} from {target.org}/{target.project}")


COMMANDS = [workflow]
