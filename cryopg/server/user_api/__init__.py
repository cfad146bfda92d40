"""`/api/v1/orgs/{org}/…`: the routes users call, with a user token whose member holds
the role each route names (auth.require_user).

A run id that is not of the project in the path is a 404, never a 403: a route must
not confirm that a run exists elsewhere.
"""

from __future__ import annotations

from aiohttp import web

from cryopg.server.user_api import (
    admin,
    artifacts,
    connections,
    graphs,
    hooks,
    live,
    logs,
    operators,
    run_counts,
    runs,
    secrets,
    sign_in_admin,
    signals_events,
    state_reads,
    trigger_edits,
    triggers,
    workflow_versions,
)


def add_routes(app: web.Application) -> None:
    for module in (runs, graphs, logs, live, signals_events, state_reads, admin, secrets,
                   connections, triggers, trigger_edits, hooks, sign_in_admin, artifacts,
                   operators, run_counts, workflow_versions):
        module.add_routes(app)
