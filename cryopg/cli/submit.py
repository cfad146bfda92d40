"""`cryopg submit FILE` (a script, graph or YAML pipeline) and `cryopg logs RUN`: start a
run and read or follow its log."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from cryopg.cli import pipeline
from cryopg.cli.client import Client, part
from cryopg.cli.follow import SKIPPED_EXIT, follow_run, parse_json, read_script
from cryopg.cli.target import resolve


@click.command()
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
@click.option("--timeout", metavar="DURATION",
              help="Fail the run (exit code 124) this long after submit, e.g. 30s, 10m, 2h; "
                   "its whole process tree is killed. Default: the graph's own timeout.")
@click.option("--priority", type=click.IntRange(-1000, 1000), metavar="N",
              help="Claim order among pending runs: higher first (default 0).")
def submit(file: Path, input_json: str | None, idempotency_key: str | None,
           interpreter: str | None, follow: bool, untrusted: bool, concurrency: str | None,
           policy: str | None, timeout: str | None, priority: int | None) -> None:
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
                                         **({"timeout": timeout} if timeout else {}),
                                         **({"priority": priority} if priority is not None
                                            else {}),
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


@click.command()
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


COMMANDS = [submit, logs]
