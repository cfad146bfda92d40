"""What the web UI's operators do beyond submit, signal and cancel: search runs, run one
again (any kind), turn down an approval with a comment, start a stored workflow by name."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine, input_search
from cryopg.db import connection
from cryopg.errors import InvalidArgument, RunFinished
from cryopg.seal import Sealer
from cryopg.server import input_checks
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import MEMBER, require_user
from cryopg.server.bodies import (
    approval_item,
    json_body,
    optional_json_body,
    optional_str_field,
    query_int,
)
from cryopg.server.redact import masked
from cryopg.server.render import run_json
from cryopg.server.user_api.scope import PROJECT_ROUTE, own_run, project_of

# Any of these selects the search (cryo.search_runs) instead of the plain page.
SEARCH_FILTERS = ("q", "trigger", "since", "until", "match")
TRIGGERS = ("manual", "parent", "schedule", "webhook", "event")
# The runs list's sortable columns (`sort=started`, `sort=-started` for descending).
ORDERS = ("started", "ended", "duration", "status", "workflow")
TEXT_MAX = 200
COMMENT_MAX = 2000


def _when(request: web.Request, name: str) -> datetime | None:
    raw = request.query.get(name)
    if not raw:
        return None
    try:
        got = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{name} must be an ISO date or time, such as 2026-05-01") from None
    if got.tzinfo is None:
        got = got.replace(tzinfo=UTC)
    return got


def _text(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name, "").strip()
    if len(raw) > TEXT_MAX:
        raise InvalidArgument(f"{name} must be at most {TEXT_MAX} characters")
    return raw or None


async def index_input(conn: AsyncConnection, sealer: Sealer, project: str, run_id: str,
                      value: Any, untrusted: bool) -> None:
    """Makes a trusted run findable by its sealed input's values (keyed digests, never
    the values: cryopg/input_search.py). Its own call after the submit: a run whose
    digests were lost to a crash between the two is only not found by input."""
    if untrusted or value is None:
        return
    hashes = input_search.input_hashes(input_search.project_key(sealer, project), value)
    if hashes:
        await engine.index_run_input(conn, run_id, hashes)


async def term_digest(request: web.Request, org: str, project: str,
                      text: str | None) -> bytes | None:
    """The keyed digest of the search text, which a trusted run's sealed input value
    equal to it was stored under (cryopg/input_search.py)."""
    if text is None:
        return None
    sealer = await request.app[KEYS].sealer(org)
    return input_search.term_hash(input_search.project_key(sealer, project), text)


async def search(request: web.Request, limit: int) -> web.Response:
    """`GET …/runs?q=&match=&trigger=&since=&until=&status=&before=&sort=`: one page of
    runs, children included (with `top=1` top-level runs only), matching all the filters
    given, newest first or in the `sort` order."""
    org, project = project_of(request)
    trigger = _text(request, "trigger")
    if trigger is not None and trigger not in TRIGGERS:
        raise InvalidArgument(f"trigger must be one of {', '.join(TRIGGERS)}")
    order = _text(request, "sort")
    if order is not None and order.removeprefix("-") not in ORDERS:
        raise InvalidArgument(f"sort must be one of {', '.join(ORDERS)}, with a leading - "
                              "for descending")
    # A sorted plain list (top=1, an exact workflow) is a search too, of top-level runs.
    match = _text(request, "match") or _text(request, "workflow")
    text = _text(request, "q")
    digest = await term_digest(request, org, project, text)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.search_runs(
            conn, org, project, text=text, status=_text(request, "status"),
            workflow=match, trigger=trigger, since=_when(request, "since"),
            until=_when(request, "until"), before=_text(request, "before"), limit=limit,
            order=order, top=request.query.get("top") == "1", input_hash=digest)
        return web.json_response(await masked(request, conn, org, project, {
            "runs": [{**run_json(r), "parent_run_id": r.parent_run_id, "trigger": r.trig,
                      "children": r.children} for r in rows],
            "next": rows[-1].id if rows and len(rows) == limit else None}))


async def rerun(request: web.Request) -> web.Response:
    """A new run with the same source and input as this one, whatever its kind; with
    `{"input": …}` in the body, with that input instead, checked first against the
    `input_schema` of the run's stored workflow when it declares one (a 400 names the field)."""
    run = await own_run(request, MEMBER)
    body = await optional_json_body(request)
    async with connection(request.app[POOL]) as conn:
        if "input" not in body:
            new_id = await engine.rerun_run(conn, run.id)
        else:
            value: Any = body["input"]
            await input_checks.check(
                await input_checks.workflow_structure(conn, run.org, run.project, run.workflow),
                value, code="invalid_argument")
            sealer = await request.app[KEYS].sealer(run.org)
            sealed = sealer.seal_json(value) if value is not None else None
            new_id = await engine.rerun_run_with_input(conn, run.id, sealed)
            # An untrusted run's new run is untrusted too: cryo.index_run_input refuses it.
            await index_input(conn, sealer, run.project, new_id, value, False)
        new = await engine.get_run(conn, new_id)
    return web.json_response({**run_json(new), "rerun_of": run.id}, status=201)


async def reject(request: web.Request) -> web.Response:
    """An approver turns a waiting approval down, with an optional comment: the run fails."""
    user = await require_user(request, MEMBER)
    run = await own_run(request, MEMBER)
    node = request.match_info["node"]
    item = approval_item(request)
    body = await json_body(request)
    comment = optional_str_field(body, "comment", limit=COMMENT_MAX)
    sealer = await request.app[KEYS].sealer(run.org)
    if run.finished:
        raise RunFinished(f"run {run.id} already finished ({run.status})")
    async with connection(request.app[POOL]) as conn:
        taken = await engine.reject_node(
            conn, run.id, node, sealer.seal_json({"rejected_by": user.member, "comment": comment}),
            user.member, user.token_id, item)
    if not taken:
        said = "" if item is None else f" item {item}"
        raise RunFinished(f"node {node}{said} of run {run.id} is not waiting for an approval")
    return web.json_response({"rejected": True, "node": node, "item": item,
                              "rejected_by": user.member,
                              "comment": comment})


async def start(request: web.Request) -> web.Response:
    """Starts stored workflow NAME with a JSON input (`{"input": …}`), checked first
    against the `input_schema` the workflow declares, if any (a 400 names the field)."""
    await require_user(request, MEMBER)
    org, project = project_of(request)
    body = await json_body(request)
    value: Any = body.get("input")
    name = request.match_info["name"]
    async with connection(request.app[POOL]) as conn:
        structure = (await engine.get_workflow(conn, org, project, name))[4]
    await input_checks.check(structure, value, code="invalid_argument")
    async with connection(request.app[POOL]) as conn:
        run_id = await engine.submit_run(conn, org, project, name, value)
    return web.json_response({"run_id": run_id}, status=201)


async def deliveries(request: web.Request) -> web.Response:
    """`GET …/webhook-deliveries?limit=`: the latest signed deliveries, newest first, and
    what each did. A refused one (no or a wrong signature) is answered 401 and never
    stored, so that nobody without the secret can fill the table."""
    await require_user(request)
    org, project = project_of(request)
    limit = query_int(request, "limit", 20, (1, 200))
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_webhook_deliveries(conn, org, project, limit)
    return web.json_response({"deliveries": [
        {**r, "created_at": r["created_at"].isoformat()} for r in rows]})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/webhook-deliveries", deliveries)
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/run-again", rerun)
    app.router.add_post(f"{PROJECT_ROUTE}/runs/{{run}}/approvals/{{node}}/reject", reject)
    app.router.add_post(f"{PROJECT_ROUTE}/workflows/{{name}}/runs", start)
