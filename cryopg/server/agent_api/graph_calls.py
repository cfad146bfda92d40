"""A script's calls of graphs: `graph.call` (a stored graph by name) and `node.call` (one
node, a cryosleep-node/v1 document), each run as a child graph run that the caller waits
for. The decisions are cryo.call_graph's; here the child's document is compiled (a
node) or taken as stored (a graph) and its input sealed.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.engine import GraphCall
from cryopg.errors import InvalidArgument
from cryopg.graphs.document import GraphError
from cryopg.payloads import answer
from cryopg.seal import Sealer
from cryopg.server import input_checks, offload, work
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import agent_claim, agent_run
from cryopg.server.bodies import json_body, recorded_at, str_field, to_int


def _reply(sealer: Sealer, got: GraphCall) -> web.Response:
    return web.json_response({
        "parked": got.parked, "run_id": got.child_run_id, "status": got.status,
        "exit_code": got.exit_code, "error": got.error,
        "output": answer(sealer, got.output, None)})


def _sealed_input(sealer: Sealer, body: dict[str, Any]) -> bytes | None:
    value = body.get("input")
    return None if value is None else sealer.seal_json(value)


async def call_graph(request: web.Request) -> web.Response:
    """A stored graph, by name, with an input."""
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    name = str_field(body, "name")
    sealer = await request.app[KEYS].sealer(org)
    token = await agent_claim(request, body)
    async with connection(request.app[POOL]) as conn, conn.transaction():
        await engine.check_claim(conn, run_id, token)  # nothing of the project without it
        filename, _, source, kind, graph = await engine.get_workflow(conn, org, project, name)
        if kind != "graph" or graph is None:
            raise InvalidArgument(f"workflow {name!r} is a script, not a graph; call-graph "
                                  "runs stored graphs")
        await input_checks.check(graph, body.get("input"))  # CR227 names the field
        got = await engine.call_graph(
            conn, run_id, token, **recorded_at(body), family="graph.call",
            name=name, ordinal=to_int(body, "ordinal"), workflow=name, filename=filename,
            source=source, input=_sealed_input(sealer, body), graph=graph)
    return _reply(sealer, got)


async def call_node(request: web.Request) -> web.Response:
    """One node of a type with its config, run as a one-node graph."""
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    node_type = str_field(body, "type")
    config = body.get("config")
    if not isinstance(config, dict):
        raise InvalidArgument("config must be a JSON object")
    try:  # a node's config may hold a large schema: checked in a worker, off the loop
        compiled = await offload.run(work.compile_node, node_type, config,
                                     timeout=work.COMPILE_SECONDS, what="checking the node")
    except GraphError as exc:
        raise InvalidArgument(str(exc)) from None
    sealer = await request.app[KEYS].sealer(org)
    async with connection(request.app[POOL]) as conn:
        got = await engine.call_graph(
            conn, run_id, token, **recorded_at(body), family="node.call",
            name=node_type, ordinal=to_int(body, "ordinal"), workflow=None,
            filename="node.json", source=sealer.seal_text(compiled.source()),
            input=_sealed_input(sealer, body), graph=compiled.structure)
    return _reply(sealer, got)


def add_routes(app: web.Application) -> None:
    add_run_route(app, "graphs/call", call_graph)
    add_run_route(app, "nodes/call", call_node)
