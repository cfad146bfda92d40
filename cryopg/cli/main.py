"""The `cryopg` click group. It only assembles: every command lives in its own module
(see MODULES), and bad input is one line here."""

from __future__ import annotations

import sys
from typing import Any

import click

from cryopg.cli import (
    admin,
    agent_cmd,
    agents,
    bus,
    connections,
    dev,
    login,
    master_key,
    pipeline,
    processes,
    run_control,
    run_once,
    runs,
    state_cmds,
    submit,
    tokens,
    triggers,
    workflows,
)
from cryopg.cli.artifacts import artifact
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


# Each module's COMMANDS, one module a line: a new command group is one more line here.
MODULES = [
    submit,
    runs,
    run_control,
    bus,
    workflows,
    state_cmds,
    connections,
    triggers,
    pipeline,
    run_once,
    admin,
    agents,
    login,
    dev,
    processes,
    agent_cmd,
    tokens,
    master_key,
]
for module in MODULES:
    for command in module.COMMANDS:
        cli.add_command(command)
cli.add_command(artifact)
