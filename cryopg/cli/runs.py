"""`cryopg runs` (the project's runs) and `cryopg runs show RUN` (one run: its fields,
outputs, graph nodes and history)."""

from __future__ import annotations

import json
from typing import Any

import click

from cryopg.cli.client import Client, part
from cryopg.cli.target import resolve


def _print_runs(runs: list[dict[str, Any]], folded: bool) -> None:
    """One row a run. Folded (the default list): top-level runs, each with how many child
    runs (graph node jobs, activities, spawns) it started; else every run, a child with
    its parent."""
    rows = [("ID", "STATUS", "SUBSTATE", "ATTEMPT", "CREATED", "FILE",
             "CHILDREN" if folded else "PARENT")]
    for r in runs:
        substate = r["substate"] or (f"position {r['queue_position']}"
                                     if r.get("queue_position") else "-")
        last = str(r.get("children") or "-")
        if not folded:
            last = "-"
            if r.get("parent_run_id"):  # a child: its parent's short id, and its activity name
                last = r["parent_run_id"].rsplit(":", 1)[-1]
                last += f" ({r['activity_name']})" if r.get("activity_name") else ""
        rows.append((r["id"], r["status"], substate, str(r["attempt"]),
                     (r["created_at"] or "")[:19].replace("T", " "), r["filename"], last))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


PAGE = 200  # the server's largest page of top-level runs


def _top_level(client: Client, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` top-level runs, a page at a time."""
    if limit < 0:
        raise click.BadParameter("must be 0 or more", param_hint="--limit")
    listed: list[dict[str, Any]] = []
    cursor = ""
    while len(listed) < limit:
        got = client.call("GET", f"/runs?top=1&limit={min(PAGE, limit - len(listed))}"
                          + (f"&before={part(cursor, 'run id')}" if cursor else ""))
        listed += got["runs"]
        if not got.get("next"):
            break
        cursor = got["next"]
    return listed


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--limit", default=50, show_default=True, help="How many runs, newest first.")
@click.option("--all", "show_all", is_flag=True,
              help="Every run, child runs (graph node jobs, activities, spawns) included, "
                   "each with its parent; by default only top-level runs, with how many "
                   "children each has.")
@click.pass_context
def runs(ctx: click.Context, as_json: bool, limit: int, show_all: bool) -> None:
    """List the project's runs with status and substate."""
    if ctx.invoked_subcommand:
        return
    client = Client(resolve())
    if show_all:
        listed = client.call("GET", f"/runs?limit={limit}")["runs"]
    else:
        listed = _top_level(client, limit)
    if as_json:
        click.echo(json.dumps(listed, indent=2))
    else:
        _print_runs(listed, folded=not show_all)


@runs.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs_show(run: str, as_json: bool) -> None:
    """Show one run (a bare run-… is of the active project)."""
    target = resolve()
    got = Client(target).call("GET", f"/runs/{part(target.qualify(run), 'run id')}")
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    fields = [k for k in ("id", "pipeline", "status", "substate", "attempt", "exit_code", "error",
                          "filename", "workflow", "parent_run_id", "activity_name",
                          "concurrency_group",
                          "queue_position", "idempotency_key", "created_at", "started_at",
                          "finished_at", "wake_at", "agent_id") if got.get(k) is not None]
    shown = [(k, str(got[k])) for k in fields]
    # What started it (docs/triggers.md), and a run without secrets says so.
    if got.get("trigger"):
        shown.append(("trigger", got["trigger"]))
    by = got.get("triggered_by")
    if by:
        shown.append(("triggered_by", f"{by['kind']} {by['name']}"
                      + (f" (depth {by['depth']})" if by.get("depth") else "")))
    if got.get("untrusted"):
        shown.append(("untrusted", "yes (no secrets; docs/security/trust.md)"))
    width = max(len(k) for k, _ in shown) + 2  # the colon and at least one space
    for key, value in shown:
        click.echo(f"{key + ':':<{width}}{value}")
    for key, value in (got.get("outputs") or {}).items():
        # A graph's output is the output "output": say it once.
        label = "output:" if key == "output" else f"output {key}:"
        click.echo(f"{label} {json.dumps(value, separators=(',', ':'))}")
    nodes = (got.get("graph") or {}).get("nodes") or []
    if nodes:
        _print_nodes(nodes)
    history = got.get("history", [])
    kinds = max((len(ev["kind"]) for ev in history), default=0) + 2
    for ev in history:
        what = "/".join(str(ev[k]) for k in ("family", "name", "ordinal") if ev.get(k) is not None)
        label = f"  [{ev['label']}]" if ev.get("label") else ""
        text = f"  {ev['text']}" if "text" in ev else ""
        click.echo(f"  {ev['at'][:23].replace('T', ' ')}  {ev['kind']:<{kinds}}{what}{label}{text}"
                   .rstrip())


def _print_nodes(nodes: list[dict[str, Any]]) -> None:
    rows = [("NODE", "TYPE", "STATUS", "ATTEMPT", "OUTPUT")]
    for n in nodes:
        out = "" if n.get("output") is None else json.dumps(n["output"], separators=(",", ":"))
        if n.get("error") and n["status"] in ("failed", "skipped"):
            out = n["error"]
        rows.append((n["id"], n["type"], n["status"], str(n.get("attempt") or "-"),
                     out if len(out) <= 60 else out[:57] + "..."))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    click.echo("nodes:")
    for row, n in zip(rows, [None, *nodes], strict=True):
        click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True))
                   + "  " + row[4])
        for line in ((n or {}).get("log_tail") or "").splitlines():  # a failed job's last lines
            click.echo(f"    | {line}")


COMMANDS = [runs]
