"""The click group: commands that talk to a server, and the process commands."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from cryopg.cli import (
    admin,
    agents,
    bus,
    login,
    pipeline,
    processes,
    run_once,
    triggers,
    workflows,
)
from cryopg.cli.artifacts import artifact
from cryopg.cli.client import Client, part, valid_text
from cryopg.cli.follow import (
    SKIPPED_EXIT,
    follow_run,
    parse_json,
    read_script,
)
from cryopg.cli.target import resolve
from cryopg.cli.verbs import help_epilog

IN_SCRIPT_HELP = help_epilog()


class _OneLineErrors(click.Group):
    """Bad input gets one line on stderr (not click's usage block) and click's exit code."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.format_message(), err=True)  # a bare group: its help is the answer
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "cryopg"
            click.echo(f"{where}: {e.format_message()} (see {where} --help)", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except (UnicodeError, RecursionError) as e:
            # The last guard against a traceback: text that is not UTF-8, or a value
            # nested beyond what Python reads, that no check above caught first.
            what = "text that is not valid UTF-8" if isinstance(e, UnicodeError) else (
                "a value nested too deep")
            click.echo(f"Error: cannot use {what}", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=IN_SCRIPT_HELP)
def cli() -> None:
    """cryopg: durable workflows whose engine is PostgreSQL."""


for command in [*processes.COMMANDS, *admin.COMMANDS, *pipeline.COMMANDS, *triggers.COMMANDS,
                *login.COMMANDS, *bus.COMMANDS, *run_once.COMMANDS, *agents.COMMANDS,
                artifact]:
    cli.add_command(command)
cli.add_command(__import__("cryopg.cli.connections", fromlist=["connection"]).connection)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_json", metavar="JSON",
              help="Input, reaching the script as $CRYO_INPUT_FILE.")
@click.option("--idempotency-key", metavar="K",
              help="A second submit with the same key returns the first run.")
@click.option("--interpreter", metavar="I",
              help="Run the script with I instead of choosing by extension.")
@click.option("--follow", is_flag=True, help="Stream the log and exit with the run's outcome.")
@click.option("--untrusted", is_flag=True,
              help="Run without secrets; a step that needs one fails instead of running.")
@click.option("--concurrency", metavar="GROUP",
              help="Admit through this concurrency group: one holder at a time.")
@click.option("--policy", type=click.Choice(["queue", "cancel-running", "cancel-queued", "skip"]),
              help="When GROUP is held: wait in its FIFO (queue, the default), cancel the "
                   "holder, cancel the waiters, or create nothing (skip; exit 3).")
def submit(file: Path, input_json: str | None, idempotency_key: str | None,
           interpreter: str | None, follow: bool, untrusted: bool, concurrency: str | None,
           policy: str | None) -> None:
    """Submit FILE as a new run and print its id.

    FILE is a script, a graph (JSON, version cryosleep-graph/v1) or a YAML pipeline
    (.yaml/.yml, version cryosleep/pipeline/v1; a pipeline that does not compile is one
    line naming the job and key, exit code 2, and nothing is submitted).
    """
    value = parse_json(input_json, "--input")
    source = read_script(file)
    if pipeline.is_pipeline_file(file, source):
        pipeline.check(file, source)
    client = Client(resolve())
    made = client.call("POST", "/runs", {"source": source, "filename": file.name, "input": value,
                                         "interpreter": interpreter,
                                         "idempotency_key": idempotency_key,
                                         **({"untrusted": True} if untrusted else {}),
                                         "concurrency": concurrency, "policy": policy,
                                         "workdir": os.getcwd()})
    run_id = made["run_id"]
    if made.get("skipped"):
        click.echo(f"cryopg: skipped: concurrency group {concurrency} is held; no run created",
                   err=True)
        sys.exit(SKIPPED_EXIT)
    if made.get("status") == "queued":
        click.echo(f"cryopg: queued at position {made['position']} in {concurrency}", err=True)
    if not follow:
        click.echo(run_id)
        return
    existing = "" if made["created"] else " (existing, same idempotency key)"
    click.echo(f"cryopg: run {run_id}{existing}", err=True)
    sys.exit(follow_run(client, run_id))


def _print_runs(runs: list[dict[str, Any]]) -> None:
    rows = [("ID", "STATUS", "SUBSTATE", "ATTEMPT", "CREATED", "FILE", "PARENT")]
    for r in runs:
        substate = r["substate"] or (f"position {r['queue_position']}"
                                     if r.get("queue_position") else "-")
        parent = "-"
        if r.get("parent_run_id"):  # a child: its parent's short id, and its activity name
            parent = r["parent_run_id"].rsplit(":", 1)[-1]
            parent += f" ({r['activity_name']})" if r.get("activity_name") else ""
        rows.append((r["id"], r["status"], substate, str(r["attempt"]),
                     (r["created_at"] or "")[:19].replace("T", " "), r["filename"], parent))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--limit", default=50, show_default=True, help="How many runs, newest first.")
@click.pass_context
def runs(ctx: click.Context, as_json: bool, limit: int) -> None:
    """List the project's runs with status and substate."""
    if ctx.invoked_subcommand:
        return
    listed = Client(resolve()).call("GET", f"/runs?limit={limit}")["runs"]
    if as_json:
        click.echo(json.dumps(listed, indent=2))
    else:
        _print_runs(listed)


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
    width = max(len(k) for k in fields) + 2  # the colon and at least one space
    for key in fields:
        click.echo(f"{key + ':':<{width}}{got[key]}")
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


@cli.command()
@click.argument("run")
@click.argument("node")
@click.option("--json", "answer", metavar="JSON", required=True,
              help="The answer, a JSON object checked against the node's fields.")
def approve(run: str, node: str, answer: str) -> None:
    """Answer the waiting approval NODE of graph run RUN."""
    value = parse_json(answer, "--json")
    if not isinstance(value, dict):
        raise click.BadParameter("the answer must be a JSON object", param_hint="--json")
    target = resolve()
    got = Client(target).call(
        "POST", f"/runs/{part(target.qualify(run), 'run id')}/approvals/{part(node, 'node')}",
        value)
    click.echo(f"approved {node} of {target.qualify(run)} as {got['approved_by']}")


@cli.command()
@click.argument("run")
@click.option("--from", "from_node", metavar="NODE", required=True,
              help="Run NODE and what follows it again; seed what is upstream from RUN.")
def rerun(run: str, from_node: str) -> None:
    """Start a new run of graph run RUN's pinned definition from NODE."""
    target = resolve()
    got = Client(target).call("POST", f"/runs/{part(target.qualify(run), 'run id')}/rerun",
                              {"from": from_node})
    click.echo(got["id"])


@cli.command()
@click.argument("run")
@click.option("--follow", is_flag=True, help="Stream until the run ends; exit with its outcome.")
def logs(run: str, follow: bool) -> None:
    """Print a run's log."""
    target = resolve()
    client = Client(target)
    run_id = target.qualify(run)
    if follow:
        sys.exit(follow_run(client, run_id))
    out = sys.stdout.buffer
    for chunk in client.stream(f"/runs/{part(run_id, 'run id')}/logs"):
        out.write(chunk)
    out.flush()


@cli.command()
@click.argument("run")
def cancel(run: str) -> None:
    """Cancel a run: a parked or pending one ends now, a running one is stopped."""
    target = resolve()
    got = Client(target).call("POST", f"/runs/{part(target.qualify(run), 'run id')}/cancel")
    click.echo(f"{got['id']} {got['cancel']}")


@cli.command()
@click.argument("run")
@click.argument("name")
@click.argument("payload", required=False)
def signal(run: str, name: str, payload: str | None) -> None:
    """Send signal NAME to RUN; PAYLOAD is JSON, or else taken as a string."""
    from cryopg.cli.inscript_client import UsageError, parse_value

    target = resolve()
    run_id = target.qualify(run)
    try:
        body = {"payload": None if payload is None else parse_value(payload)}
    except UsageError as e:
        raise click.BadParameter(str(e), param_hint="PAYLOAD") from None
    Client(target).call(
        "POST", f"/runs/{part(run_id, 'run id')}/signal/{part(name, 'signal name')}", body)
    click.echo(f"signalled {run_id} {name}")


@cli.command()
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


@cli.group()
def workflow() -> None:
    """Named scripts that applications submit from SQL with cryo.submit_run."""


for command in workflows.COMMANDS:
    workflow.add_command(command)


@workflow.command("put")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--interpreter", metavar="I", help="Run it with I instead of choosing by extension.")
def workflow_put(name: str, file: Path, interpreter: str | None) -> None:
    """Store FILE (a script, graph or YAML pipeline) under NAME in the active project."""
    source = read_script(file)
    if pipeline.is_pipeline_file(file, source):
        pipeline.check(file, source)
    target = resolve()
    got = Client(target).call("PUT", f"/workflows/{part(name, 'workflow name')}",
                              {"source": source, "filename": file.name,
                               "interpreter": interpreter, "workdir": os.getcwd()})
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


# -- durable state, read from outside a run ------------------------------------------------

WRITES_REFUSED = ("cannot write state from outside a run: a cell belongs to the workflow "
                  "that writes it; to tell a running workflow something, send it a signal")


class WriteRefused(click.ClickException):
    exit_code = 2  # a refusal, as every refused request exits


@cli.group()
def state() -> None:
    """Read durable state cells (writes happen only inside a run)."""


def _state_path(run: str | None, entity: str | None) -> tuple[Client, str]:
    if (run is None) == (entity is None):
        raise click.UsageError("outside a run, name the scope: --run RUN or --entity NAME")
    target = resolve()
    if run is not None:
        return Client(target), f"/runs/{part(target.qualify(run), 'run id')}/state"
    return Client(target), f"/entities/{part(str(entity), 'entity')}/state"


def _state_get(key: str, run: str | None, entity: str | None, version: bool,
               tainted: bool = False) -> None:
    from cryopg.cli.client import ApiError
    from cryopg.cli.inscript_client import format_value

    client, path = _state_path(run, entity)
    try:
        got = client.call("GET", f"{path}/{part(key, 'key')}" + ("?tainted=1" if tainted else ""))
    except ApiError as exc:
        if exc.status == 404 and exc.code == "not_found":
            return  # an unset cell prints nothing, as inside a run
        raise
    click.echo(format_value(got["version"] if version else got["value"]))


_RUN = click.option("--run", metavar="RUN",
                    help="A run's own cells (a bare run-… is of the active project).")
_ENTITY = click.option("--entity", metavar="NAME", help="The project's entity scope NAME.")
_TAINTED = click.option("--tainted", is_flag=True,
                        help="The entity's cells untrusted runs wrote, not the trusted ones.")


@state.command("get")
@click.argument("key")
@_RUN
@_ENTITY
@click.option("--version", "version", is_flag=True, help="Print the cell's version, not its value.")
@_TAINTED
def state_get(key: str, run: str | None, entity: str | None, version: bool,
              tainted: bool) -> None:
    """Print a cell's value (strings bare, else JSON); nothing when it is unset."""
    _state_get(key, run, entity, version, tainted)


@state.command("version")
@click.argument("key")
@_RUN
@_ENTITY
@_TAINTED
def state_version(key: str, run: str | None, entity: str | None, tainted: bool) -> None:
    """Print a cell's version (same as `state get KEY --version`)."""
    _state_get(key, run, entity, True, tainted)


@state.command("list")
@_RUN
@_ENTITY
@_TAINTED
def state_list(run: str | None, entity: str | None, tainted: bool) -> None:
    """Print key<TAB>value<TAB>version for every cell of the scope."""
    from cryopg.cli.inscript_client import format_value

    client, path = _state_path(run, entity)
    for cell in client.call("GET", path + ("?tainted=1" if tainted else ""))["cells"]:
        click.echo(f"{cell['key']}\t{format_value(cell['value'])}\t{cell['version']}")


def _refuse_write(name: str) -> click.Command:
    from cryopg.cli.inscript import STATE_HELP

    text = STATE_HELP[name].split("\n", 1)[1]  # the usage line is click's own
    @click.command(name, context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True},
                   help="\b\n" + text.replace("\n\n", "\n") + "\nOnly inside a run; refused here.",
                   short_help="Only inside a run (see --help).")
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def refused(args: tuple[str, ...]) -> None:
        raise WriteRefused(WRITES_REFUSED)

    return refused


for _name in ("set", "delete", "add", "cas", "incr"):
    state.add_command(_refuse_write(_name))
