"""The agent's journal reports: a step about to run, a finished step, a sleep that parks
the run, a note."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.server.agent_api.batching import STEPS
from cryopg.server.agent_api.in_run import add_run_route
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import agent_claim, agent_run
from cryopg.server.bodies import (
    duration,
    json_body,
    optional_text,
    recorded_at,
    to_int,
)
from cryopg.server.redact import MASKS


async def _names(request: web.Request, org: str, project: str, *texts: str) -> list[str]:
    """Names about to be stored in clear, with the project's secrets masked (the agent
    masked them already; this is the second line)."""
    masker = await request.app[MASKS].recent(request.app, org, project)
    return [masker.text(t) for t in texts]


async def steps(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    try:
        ordinal = int(body["ordinal"])
        exit_code = None if body.get("exit_code") is None else int(body["exit_code"])
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument("ordinal and exit_code must be integers") from exc
    at = recorded_at(body)
    if any(v is not None and not -2**31 <= v < 2**31
           for v in (ordinal, exit_code, at["position"])):
        raise InvalidArgument("ordinal, exit_code and position must fit 32 bits")
    sealer = await request.app[KEYS].sealer(org)
    result = sealer.seal_json({"stdout": str(body.get("stdout") or "")})
    label = optional_text(body, "label")
    name, path, label_text = await _names(request, org, project, str(body.get("name") or ""),
                                          at["path"] or "", label or "")
    # Steps several agents report at once commit together (see batching.py).
    seq = await request.app[STEPS].record(
        (run_id, token, at["position"], str(body.get("family") or ""),
         name, ordinal, None if label is None else label_text, result,
         exit_code, at["path"] and path, _started_at(body)))
    return web.json_response({"seq": seq})


def _started_at(body: dict[str, Any]) -> datetime | None:
    """`started_at`: when the agent began the step, in Unix seconds (optional)."""
    got = body.get("started_at")
    if got is None:
        return None
    if isinstance(got, bool) or not isinstance(got, int | float) or not 0 < got < 2**33:
        raise InvalidArgument("started_at must be a Unix time in seconds")
    return datetime.fromtimestamp(got, UTC)


async def marks(request: web.Request) -> web.Response:
    """A step about to run pins its pending marker (see cryo.mark_step)."""
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    ordinal = to_int(body, "ordinal")
    at = recorded_at(body)
    name, path = await _names(request, org, project, str(body.get("name") or ""),
                              at["path"] or "")
    at["path"] = at["path"] and path
    async with connection(request.app[POOL]) as conn:
        await engine.mark_step(conn, run_id, token, **at,
                               family=str(body.get("family") or ""),
                               name=name, ordinal=ordinal)
    return web.json_response({})


async def park(request: web.Request) -> web.Response:
    run_id, _, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    seconds = duration(body, "seconds")
    if seconds is None:
        raise InvalidArgument("seconds must be a number")
    ordinal = to_int(body, "ordinal")
    async with connection(request.app[POOL]) as conn:
        wake_at = await engine.park_sleep(conn, run_id, token,
                                          **recorded_at(body),
                                          ordinal=ordinal, seconds=seconds)
    return web.json_response({"wake_at": wake_at.isoformat()})


async def annotate(request: web.Request) -> web.Response:
    run_id, org, _ = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sealed = (await request.app[KEYS].sealer(org)).seal_text(str(body.get("text") or ""))
    async with connection(request.app[POOL]) as conn:
        await engine.annotate_run(conn, run_id, token, sealed)
    return web.json_response({})


def add_routes(app: web.Application) -> None:
    add_run_route(app, "steps", steps)
    add_run_route(app, "marks", marks)
    add_run_route(app, "park", park)
    add_run_route(app, "annotate", annotate)
