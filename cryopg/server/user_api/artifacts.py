"""Artifacts from outside a run: a run's list and downloads (what the web UI links
to), and the project's cached artifacts (`--key`), which a member may also put.

A download answers with a redirect to a URL the store signed when it can sign and
CRYOPG_ARTIFACTS_PROXY is not set (`?redirect=0` asks for the bytes through this
server regardless), else streams the bytes itself.

A cached artifact is the trusted one of its (key, name); `?tainted=1` gets the one
untrusted runs put, and a member's put with `?public=1` publishes it to untrusted runs
(docs/security/trust.md). Lists show both, each row saying which.
"""

from __future__ import annotations

from aiohttp import web

from cryopg.artifacts.service import (
    ARTIFACTS,
    artifact_json,
    check_digest,
    commit,
    receive_blob,
    send_blob,
)
from cryopg.db import connection
from cryopg.engine import artifacts as index
from cryopg.errors import InvalidArgument, NotFound
from cryopg.server import limits
from cryopg.server.app_state import POOL
from cryopg.server.auth import MEMBER, VIEWER, require_user
from cryopg.server.limits import check_text
from cryopg.server.trust_flags import PUBLIC, TAINTED, query_flag
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of, run_in_project

HASH_HEADER = "X-Cryo-SHA256"


def _redirect(request: web.Request) -> bool:
    return request.query.get("redirect", "1") not in ("0", "false", "no")


def _key(request: web.Request, required: bool) -> str | None:
    key = request.query.get("key")
    if key is None or key == "":
        if required:
            raise InvalidArgument("a cached artifact needs ?key=K")
        return None
    return check_text(key, "key", 200)


def _json(a: index.Artifact) -> dict[str, object]:
    return {**artifact_json(a), "tainted": a.tainted, "published": a.published}


async def _find(request: web.Request, scope: str) -> index.Artifact:
    org, project = project_of(request)
    name = request.match_info["name"]
    async with connection(request.app[POOL]) as conn:
        found = await index.find_artifact(conn, org, project, scope, name,
                                          query_flag(request, TAINTED))
    if found is None:
        raise NotFound(f"no artifact {name!r} in {scope}")
    return found


async def run_artifacts(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    run_id = run_in_project(request)
    async with connection(request.app[POOL]) as conn:
        rows = await index.list_artifacts(conn, org, project, run_id)
    return web.json_response({"artifacts": [_json(a) for a in rows]})


async def run_artifact(request: web.Request) -> web.StreamResponse:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    found = await _find(request, run_in_project(request))
    return await send_blob(request, org, project, found, redirect=_redirect(request))


async def cached_artifacts(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    key = _key(request, required=False)
    async with connection(request.app[POOL]) as conn:
        scope = None if key is None else await index.artifact_scope(conn, org, project, None, key)
        rows = await index.list_artifacts(conn, org, project, scope)
    return web.json_response({"artifacts": [_json(a) for a in rows]})


async def cached_artifact(request: web.Request) -> web.StreamResponse:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    key = _key(request, required=True)
    async with connection(request.app[POOL]) as conn:
        scope = await index.artifact_scope(conn, org, project, None, key)
    found = await _find(request, scope)
    return await send_blob(request, org, project, found, redirect=_redirect(request))


@limits.raw_body
async def put_cached(request: web.Request) -> web.Response:
    """The body is the bytes, streamed into the store; X-Cryo-SHA256, when sent, is
    checked against them and lets a put that cannot fit fail before they move."""
    await require_user(request, MEMBER)
    org, project = project_of(request)
    key = _key(request, required=True)
    name = check_text(request.match_info["name"], "name", 200)
    public, executable = query_flag(request, PUBLIC), query_flag(request, "executable")
    arts = request.app[ARTIFACTS]
    expect = request.headers.get(HASH_HEADER)
    if expect is not None:
        expect = check_digest(expect)
        if request.content_length is not None:
            async with connection(request.app[POOL]) as conn:
                await index.prepare_artifact(conn, org, project, expect, request.content_length,
                                             arts.settings.max_bytes)
    sha256, size = await receive_blob(request, org, project, expect=expect)
    row = await commit(request.app, org, project, sha256, size, lambda conn:
                       index.put_artifact(conn, org, project, key, name, sha256, size,
                                          arts.settings.max_bytes, public, executable))
    return web.json_response(_json(row), status=201)


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/artifacts", run_artifacts)
    app.router.add_get(f"{PROJECT_ROUTE}/runs/{{run}}/artifacts/{{name:.+}}", run_artifact)
    app.router.add_get(f"{PROJECT_ROUTE}/artifacts", cached_artifacts)
    app.router.add_get(f"{PROJECT_ROUTE}/artifacts/{{name:.+}}", cached_artifact)
    app.router.add_put(f"{PROJECT_ROUTE}/artifacts/{{name:.+}}", put_cached)
