"""Commands that act on one run from outside it: approve a graph's approval node, rerun
a graph from a node, cancel, signal."""

from __future__ import annotations

import click

from cryopg.cli.client import Client, part
from cryopg.cli.follow import parse_json
from cryopg.cli.target import resolve


@click.command()
@click.argument("run")
@click.argument("node")
@click.option("--json", "answer", metavar="JSON", required=True,
              help="The answer, a JSON object checked against the node's fields.")
@click.option("--item", type=click.IntRange(0), metavar="K",
              help="Answer item K of a fanned-out approval node only (default: every "
                   "waiting item).")
def approve(run: str, node: str, answer: str, item: int | None) -> None:
    """Answer the waiting approval NODE of graph run RUN."""
    value = parse_json(answer, "--json")
    if not isinstance(value, dict):
        raise click.BadParameter("the answer must be a JSON object", param_hint="--json")
    target = resolve()
    query = "" if item is None else f"?item={item}"
    got = Client(target).call(
        "POST", f"/runs/{part(target.qualify(run), 'run id')}/approvals/{part(node, 'node')}"
        f"{query}", value)
    counted = (f" ({got['approvals']} of {got['needed']} approvals)"
               if got.get("needed", 1) > 1 else "")
    state = "approved" if got.get("approved", True) else "recorded approval of"
    which = node if item is None else f"{node} item {item}"
    click.echo(f"{state} {which} of {target.qualify(run)} as {got['approved_by']}{counted}")


@click.command()
@click.argument("run")
@click.option("--from", "from_node", metavar="NODE", required=True,
              help="Run NODE and what follows it again; seed what is upstream from RUN.")
def rerun(run: str, from_node: str) -> None:
    """Start a new run of graph run RUN's pinned definition from NODE."""
    target = resolve()
    got = Client(target).call("POST", f"/runs/{part(target.qualify(run), 'run id')}/rerun",
                              {"from": from_node})
    click.echo(got["id"])


@click.command()
@click.argument("run")
def cancel(run: str) -> None:
    """Cancel a run: a parked or pending one ends now, a running one is stopped."""
    target = resolve()
    got = Client(target).call("POST", f"/runs/{part(target.qualify(run), 'run id')}/cancel")
    click.echo(f"{got['id']} {got['cancel']}")


@click.command()
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


COMMANDS = [approve, rerun, cancel, signal]
