"""The org, project and run a user route's path names, checked against each other."""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import Run
from cryopg.errors import RunNotFound
from cryopg.run_ids import in_project
from cryopg.server.app_state import POOL
from cryopg.server.auth import VIEWER, require_user

PROJECT_ROUTE = "/api/v1/orgs/{org}/projects/{project}"


def project_of(request: web.Request) -> tuple[str, str]:
    return request.match_info["org"], request.match_info["project"]


def run_in_project(request: web.Request) -> str:
    """The path's run id, which must be of the path's project (else a 404)."""
    org, project = project_of(request)
    run_id = request.match_info["run"]
    if not in_project(run_id, org, project):
        raise RunNotFound(f"no run {run_id} in {org}/{project}")
    return run_id


async def own_run(request: web.Request, need: str = VIEWER) -> Run:
    await require_user(request, need)
    run_id = run_in_project(request)
    async with connection(request.app[POOL]) as conn:
        return await engine.get_run(conn, run_id)
