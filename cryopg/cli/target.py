"""Which server, token and project the CLI talks to.

`CRYOPG_URL` + `CRYOPG_TOKEN` point anywhere; otherwise the dev stack's
`.cryopg/dev.json` is found from the current directory or one of its parents.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import click

STATE_DIR = ".cryopg"
DEV_FILE = "dev.json"


@dataclasses.dataclass(frozen=True)
class Target:
    url: str
    token: str
    org: str
    project: str
    agent_token: str | None = None

    def qualify(self, run: str) -> str:
        """A bare `run-…` is a run of the active project."""
        return f"{self.org}:{self.project}:{run}" if run.startswith("run-") else run

    @property
    def project_path(self) -> str:
        return f"/api/v1/orgs/{self.org}/projects/{self.project}"


def refuse_inside_run() -> None:
    """A script must not act with the dev stack's credentials: inside a run the CLI
    speaks only the job's socket (a server reached on purpose, with CRYOPG_URL and
    CRYOPG_TOKEN the script set itself, is its own business)."""
    from cryopg.cli.inscript_client import inside_run

    if inside_run():
        raise click.ClickException(
            "inside a run the CLI never uses the dev stack's credentials (.cryopg/); use "
            "the in-script verbs (`cryopg spawn` starts a child run)")


def find_dev_file(start: Path | None = None) -> Path | None:
    refuse_inside_run()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / STATE_DIR / DEV_FILE
        if candidate.is_file():
            return candidate
    return None


def resolve() -> Target:
    env = os.environ
    org, project = env.get("CRYOPG_ORG"), env.get("CRYOPG_PROJECT")
    if env.get("CRYOPG_URL"):
        token = env.get("CRYOPG_TOKEN")
        if not token:
            raise click.ClickException("CRYOPG_URL is set but CRYOPG_TOKEN is not")
        return Target(env["CRYOPG_URL"].rstrip("/"), token, org or "dev", project or "default",
                      env.get("CRYOPG_AGENT_TOKEN"))
    found = find_dev_file()
    if found is None:
        raise click.ClickException(
            "no cryopg dev stack found here or above (start `cryopg dev`, or set CRYOPG_URL and "
            "CRYOPG_TOKEN)")
    try:
        dev = json.loads(found.read_text())
        return Target(dev["url"], dev["user_token"], org or dev["org"], project or dev["project"],
                      dev.get("agent_token"))
    except (ValueError, KeyError) as exc:
        raise click.ClickException(f"{found} is not a valid dev stack file: {exc}") from exc
