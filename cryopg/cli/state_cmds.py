"""`cryopg state get|version|list` outside a run: read a run's or an entity's durable
state cells over HTTP. The writes are in-script verbs only; here they are refused (exit 2)
with their help still shown."""

from __future__ import annotations

import click

from cryopg.cli.client import Client, part
from cryopg.cli.target import resolve

WRITES_REFUSED = ("cannot write state from outside a run: a cell belongs to the workflow "
                  "that writes it; to tell a running workflow something, send it a signal")


class WriteRefused(click.ClickException):
    exit_code = 2  # a refusal, as every refused request exits


@click.group()
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


COMMANDS = [state]
