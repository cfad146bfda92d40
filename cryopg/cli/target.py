"""Which server, token and project the CLI talks to.

`CRYOPG_URL` + `CRYOPG_TOKEN` point anywhere; otherwise the dev stack's
`.cryopg/dev.json` is found from the current directory or one of its parents; otherwise
the sign-in `cryopg login` stored (for `CRYOPG_URL` when only that is set, else the last
server signed in to).
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
            signed = _signed_in(env["CRYOPG_URL"])
            if signed is None:
                raise click.ClickException(
                    "CRYOPG_URL is set but CRYOPG_TOKEN is not (nor has `cryopg login --url "
                    f"{env['CRYOPG_URL']}` signed in there)")
            return _target_of(signed, org, project)
        return Target(env["CRYOPG_URL"].rstrip("/"), token, org or "dev", project or "default",
                      env.get("CRYOPG_AGENT_TOKEN"))
    found = find_dev_file()
    if found is None:
        signed = _signed_in(None)
        if signed is not None:
            return _target_of(signed, org, project)
        raise click.ClickException(
            "no cryopg dev stack found here or above (start `cryopg dev`, sign in with "
            "`cryopg login --url URL`, or set CRYOPG_URL and CRYOPG_TOKEN)")
    try:
        dev = json.loads(found.read_text())
        return Target(dev["url"], dev["user_token"], org or dev["org"], project or dev["project"],
                      dev.get("agent_token"))
    except (ValueError, KeyError) as exc:
        raise click.ClickException(f"{found} is not a valid dev stack file: {exc}") from exc


def _signed_in(url: str | None) -> dict[str, object] | None:
    """The stored sign-in for url (None: the last one), never inside a run."""
    refuse_inside_run()
    from cryopg.cli import credentials

    return credentials.entry_for(url)


def _target_of(signed: dict[str, object], org: str | None, project: str | None) -> Target:
    return Target(str(signed["url"]), str(signed["session"]), org or str(signed["org"]),
                  project or str(signed["project"]))
