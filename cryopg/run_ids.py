"""The one reading of a run id: `{org}:{project}:run-{...}` (cryo._create_run makes
every id so, and slugs hold no colon). SQL's twin is cryo._run_in_project
(sql/functions/00_core.sql); tests/sql/test_run_ids.py keeps the two equal."""

from __future__ import annotations


def run_tenant(run_id: str) -> tuple[str, str] | None:
    """(org, project) of a well-formed run id, else None."""
    parts = run_id.split(":", 2)
    if len(parts) != 3 or not parts[2].startswith("run-"):
        return None
    return parts[0], parts[1]


def in_project(run_id: str, org: str, project: str) -> bool:
    return run_tenant(run_id) == (org, project)
