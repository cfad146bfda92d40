"""Durable state, read only: `GET …/runs/{run}/state[/{key}]` and
`GET …/entities/{entity}/state[/{key}]`. Nothing outside a run writes a cell. An entity's
cells are the trusted ones; `?tainted=1` reads those untrusted runs wrote
(docs/security/trust.md)."""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import NotFound
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import MEMBER, VIEWER, require_user
from cryopg.server.redact import masked
from cryopg.server.render import cell_json
from cryopg.server.trust_flags import TAINTED, query_flag
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of, run_in_project


async def _scope_of(request: web.Request) -> tuple[str, str, str | None, str | None]:
    """(org, project, run_id, entity) of a user read; an absent run is a 404. A run's
    cells need Viewer, the project's entity cells Member."""
    await require_user(request, VIEWER if "run" in request.match_info else MEMBER)
    org, project = project_of(request)
    if "run" not in request.match_info:
        return org, project, None, request.match_info["entity"]
    run_id = run_in_project(request)
    async with connection(request.app[POOL]) as conn:
        await engine.get_run(conn, run_id)  # raises RunNotFound (404) for a missing run
    return org, project, run_id, None


async def user_state_list(request: web.Request) -> web.Response:
    org, project, run_id, entity = await _scope_of(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        cells = await engine.state_list(conn, org, project, run_id, entity,
                                        query_flag(request, TAINTED))
        return web.json_response(await masked(request, conn, org, project,
                                              {"cells": [cell_json(sealer, c) for c in cells]}))


async def user_state_get(request: web.Request) -> web.Response:
    org, project, run_id, entity = await _scope_of(request)
    key = request.match_info["key"]
    async with connection(request.app[POOL]) as conn:
        cell = await engine.state_get(conn, org, project, run_id, entity, key,
                                      query_flag(request, TAINTED))
        if cell is None:
            raise NotFound(f"no cell {key!r} in that scope")
        sealer = await request.app[KEYS].sealer(org)
        return web.json_response(await masked(request, conn, org, project, {
            **cell_json(sealer, cell), "created_by_run": cell.created_by_run,
            "updated_at": cell.updated_at.isoformat(), "tainted": cell.tainted,
            "published": cell.published}))


async def run_entity_state(request: web.Request) -> web.Response:
    """The entity cells a run created or wrote last (entity cells need Member)."""
    await require_user(request, MEMBER)
    org, project = project_of(request)
    run_id = run_in_project(request)
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        await engine.get_run(conn, run_id)  # raises RunNotFound (404) for a missing run
        cells = await engine.run_entity_cells(conn, run_id)
        return web.json_response(await masked(request, conn, org, project, {"cells": [
            {"entity": c.entity, "key": c.key,
             "value": None if c.value is None else sealer.open_json(c.value),
             "version": c.version, "created_by_run": c.created_by_run,
             "updated_by_run": c.updated_by_run, "updated_at": c.updated_at.isoformat()}
            for c in cells]}))


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/entity-state", run_entity_state)
    for scope in ("runs/{run}", "entities/{entity}"):
        app.router.add_get(f"{PROJECT_ROUTE}/{scope}/state", user_state_list)
        app.router.add_get(f"{PROJECT_ROUTE}/{scope}/state/{{key:.+}}", user_state_get)
