"""`cryopg agents`: the org's agents (build, capabilities, last claim, state), and
`cryopg agents drain --build OLD` to retire a build: each of its agents finishes the run
it holds, takes no new one and exits."""

from __future__ import annotations

import json
from typing import Any

import click

from cryopg.cli.admin import _org_call


def _row(a: dict[str, Any]) -> str:
    claim = a["claimed_run"] or a["last_claim_at"] or "-"
    return "\t".join([a["id"], a["build"] or "-", a["state"], ",".join(a["capabilities"]),
                      claim, a.get("replica") or "-",
                      a.get("last_contact_at") or a["last_seen_at"] or "-"])


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.pass_context
def agents(ctx: click.Context, as_json: bool) -> None:
    """List the org's agents: id, build, state (idle, busy, draining, gone), capabilities,
    the run held (or when one was last received), the server replica it claims through,
    and its last contact."""
    if ctx.invoked_subcommand is not None:
        return
    got: Any = _org_call("GET", "/agents")
    if as_json:
        click.echo(json.dumps(got["agents"], indent=2))
        return
    click.echo("ID\tBUILD\tSTATE\tCAPABILITIES\tLAST CLAIM\tREPLICA\tLAST CONTACT")
    for a in got["agents"]:
        click.echo(_row(a))


@agents.command("drain")
@click.option("--build", help="Drain every agent reporting this build.")
@click.option("--id", "agent_id", help="Drain this agent (and ID-1..ID-N of `--count N`).")
def agents_drain(build: str | None, agent_id: str | None) -> None:
    """Ask agents to drain at their next claim: each finishes its current run (never cut
    mid-claim), takes no new one and exits."""
    if not build and not agent_id:
        raise click.UsageError("give --build or --id")
    body = {k: v for k, v in (("build", build), ("agent_id", agent_id)) if v}
    got: Any = _org_call("POST", "/agents/drain", body)
    click.echo(f"draining {got['draining']} agent(s)")


COMMANDS = [agents]
