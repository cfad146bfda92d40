"""Reading what a run is given (its script, JSON input) and following it to its end:
shared by `submit --follow`, `logs --follow` and `cryopg run`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from cryopg.cli.client import Client, part, valid_text

# `submit --policy skip` found its group held and created nothing.
SKIPPED_EXIT = 3


def outcome_exit_code(run: dict[str, Any]) -> int:
    """This process's exit code for a finished run: the one the server reports
    (cryo._outcome_code decides it, for a parent collecting a child too)."""
    code = run.get("outcome_code")
    return code if isinstance(code, int) and 0 <= code < 256 else 1


def follow_run(client: Client, run_id: str) -> int:
    out = sys.stdout.buffer
    for chunk in client.stream(f"/runs/{part(run_id, 'run id')}/logs?follow=1"):
        out.write(chunk)
        out.flush()
    run = client.call("GET", f"/runs/{part(run_id, 'run id')}")
    if run["status"] != "succeeded":
        # A cancelled run's error is the word "cancelled": said once, not twice.
        error = run.get("error")
        detail = f" ({error})" if error and error != run["status"] else ""
        click.echo(f"cryopg: run {run_id} {run['status']}{detail}", err=True)
        # A failed graph: what its failing job printed last, below the message.
        for line in _failed_tails(run):
            click.echo(f"  {line}", err=True)
    return outcome_exit_code(run)


def _failed_tails(run: dict[str, Any]) -> list[str]:
    return [line for n in (run.get("graph") or {}).get("nodes") or []
            if n.get("status") == "failed" for line in (n.get("log_tail") or "").splitlines()]


def read_script(file: Path) -> str:
    try:
        return file.read_text()
    except FileNotFoundError:
        raise click.ClickException(f"no such script: {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {file}: {exc}") from None


def parse_json(text: str | None, what: str) -> Any:
    """JSON the server will take (cryopg/jsonlimits.py: depth, integers, text), or one
    line saying why not."""
    from cryopg.jsonlimits import JsonLimitError, loads

    if text is None:
        return None
    try:
        return loads(valid_text(text, what), what)
    except JsonLimitError as exc:
        raise click.BadParameter(str(exc) if str(exc).startswith(what)
                                 else f"{what}: {exc}") from None
