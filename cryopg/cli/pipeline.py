"""YAML pipelines in the CLI: `cryopg pipeline compile`, and the check that `submit` and
`workflow put` make before sending a pipeline (the server compiles it again; checking
here gives the one-line error and exit code 2 without a round trip)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

# A pipeline that does not compile: the CLI's usage-error code, as for any bad input.
PIPELINE_ERROR_EXIT = 2


class PipelineFileError(click.ClickException):
    exit_code = PIPELINE_ERROR_EXIT


def is_pipeline_file(file: Path, source: str) -> bool:
    from cryopg.pipelines import is_pipeline

    return is_pipeline(source, file.name)


def check(file: Path, source: str) -> Any:
    """The compiled pipeline, or a one-line error naming the file, job and key."""
    from cryopg.pipelines import PipelineError, compile_pipeline

    try:
        return compile_pipeline(source)
    except PipelineError as exc:
        raise PipelineFileError(f"{file.name}: {exc}") from None


@click.group()
def pipeline() -> None:
    """YAML pipelines (version: cryosleep/pipeline/v1), which run as graphs."""


@pipeline.command("compile")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--compiled", is_flag=True,
              help="Print what cryo.put_compiled_workflow stores instead: {filename, "
                   "structure, document}, the graph compiled for the interpreter.")
def compile_cmd(file: Path, compiled: bool) -> None:
    """Check FILE and print its graph IR.

    By default this prints the cryosleep-graph/v1 document the pipeline becomes: one
    node per job, an edge per need. It is the most readable form, and `cryopg submit`
    takes it as a graph. With --compiled it prints the compiled form instead (the
    structure SQL decides with and the node configs, expressions parsed). An
    application stores that from SQL with
    `SELECT cryo.put_compiled_workflow(org, project, name, '<that JSON>')` and starts it
    with `cryo.submit_run`.

    An error is one line naming the job and the key, with exit code 2.
    """
    from cryopg.pipelines import PipelineError, to_graph
    from cryopg.pipelines.compile import load

    try:
        source = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {file}: {exc}") from None
    got = check(file, source)
    if compiled:
        out: Any = {"filename": file.name, "structure": got.structure, "document": got.document}
    else:
        try:
            out = to_graph(load(source))
        except PipelineError as exc:  # compiled above, so this does not happen
            raise PipelineFileError(f"{file.name}: {exc}") from None
    click.echo(json.dumps(out, indent=2))


COMMANDS = [pipeline]
