"""`/api/v1/agent/…`: the routes an agent calls, to claim runs and to report on them.

Every report carries the claim token; the SQL function refuses a stale one (CR002),
which reaches the agent as 409 stale_claim. Every in-run route is registered through
in_run.add_run_route, so a payload that will not open ends its run as unreadable.
"""

from __future__ import annotations

from aiohttp import web

from cryopg.server.agent_api import artifacts, claims, graph_calls, journal, state_ops, waits


def add_routes(app: web.Application) -> None:
    for module in (claims, journal, state_ops, waits, graph_calls, artifacts):
        module.add_routes(app)
