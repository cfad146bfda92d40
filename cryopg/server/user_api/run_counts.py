"""`GET …/run-count?<the runs list's filters>`: how many runs the web UI's runs list
holds under them, for the total it shows beside its pages."""

from __future__ import annotations

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.app_state import POOL
from cryopg.server.auth import require_user
from cryopg.server.user_api import operators
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of


async def run_count(request: web.Request) -> web.Response:
    await require_user(request)
    org, project = project_of(request)
    q = request.query
    searching = any(name in q for name in operators.SEARCH_FILTERS)
    trigger = operators._text(request, "trigger")
    if trigger is not None and trigger not in operators.TRIGGERS:
        raise InvalidArgument(f"trigger must be one of {', '.join(operators.TRIGGERS)}")
    text = operators._text
    digest = await operators.term_digest(request, org, project, text(request, "q"))
    async with connection(request.app[POOL]) as conn:
        total = await engine.count_runs(
            conn, org, project, search=searching, text=text(request, "q"),
            status=text(request, "status"),
            workflow=None if searching else text(request, "workflow"),
            match=text(request, "match"), trigger=trigger, since=operators._when(request, "since"),
            until=operators._when(request, "until"),
            parent=None if searching else text(request, "parent"), input_hash=digest)
    return web.json_response({"total": total})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/run-count", run_count)
