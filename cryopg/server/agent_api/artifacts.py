"""Artifacts of a running script: `…/agent/runs/{run}/artifacts/…`.

A put is prepare (is the blob there already, would it fit), an upload (to a URL the
store signed, or to this server's blob route when the store cannot sign,
CRYOPG_ARTIFACTS_PROXY is set, or the run is untrusted: its bytes are hashed here before
it may name them), then commit (the index row). A get is find, then a
download the same two ways. The blob routes carry the claim token in the X-Cryo-Claim
header (their body is the bytes); every route needs the run's live claim. What a run
may read, SQL decides from the run's trust (docs/security/trust.md).
"""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.artifacts.service import (
    ARTIFACTS,
    artifact_json,
    check_digest,
    commit,
    receive_blob,
    stream_blob,
)
from cryopg.db import connection
from cryopg.engine import artifacts as index
from cryopg.errors import InvalidArgument, NotFound
from cryopg.run_ids import in_project
from cryopg.server import limits
from cryopg.server.agent_api.in_run import RUN_ROUTE, add_run_route
from cryopg.server.app_state import POOL
from cryopg.server.auth import agent_claim, agent_run, bind_claim, require_agent
from cryopg.server.bodies import INT8, int_field, json_body, optional_str_field, str_field
from cryopg.server.trust_flags import PUBLIC, TAINTED, flag

CLAIM_HEADER = "X-Cryo-Claim"
SIZE = (0, INT8[1])


async def _header_claim(request: web.Request) -> uuid.UUID:
    info = await require_agent(request)
    try:
        token = uuid.UUID(request.headers.get(CLAIM_HEADER, ""))
    except ValueError:
        raise InvalidArgument(f"the {CLAIM_HEADER} header must hold the claim token") from None
    return bind_claim(info.token_id, token)


async def _checked(request: web.Request, token: uuid.UUID) -> None:
    async with connection(request.app[POOL]) as conn:
        await engine.check_claim(conn, request.match_info["run"], token)


def _download(a: index.Artifact, signed: dict[str, Any] | None) -> dict[str, Any]:
    return {**artifact_json(a), "download": signed or {"proxy": True}}


async def prepare(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    sha256 = check_digest(body.get("sha256"))
    size = int_field(body, "size", SIZE)
    arts = request.app[ARTIFACTS]
    async with connection(request.app[POOL]) as conn, conn.transaction():
        present, verify = await index.prepare_run_artifact(conn, run_id, token, sha256, size,
                                                           arts.settings.max_bytes)
    upload = None
    if not present or body.get("force"):
        # An untrusted run's bytes come through here, to be hashed (verify).
        signed = (await arts.store.sign("PUT", org, project, sha256, size)
                  if arts.signs and not verify else None)
        upload = signed or {"proxy": True}
    return web.json_response({"present": present, "upload": upload})


@limits.raw_body
async def put_blob(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    token = await _header_claim(request)
    await _checked(request, token)
    sha256 = check_digest(request.match_info["sha256"])
    digest, size = await receive_blob(request, org, project, expect=sha256)
    # The bytes hashed to the digest: an untrusted run may now name the blob.
    async with connection(request.app[POOL]) as conn, conn.transaction():
        await index.record_run_artifact_upload(conn, run_id, token, digest, size)
    return web.json_response({"sha256": digest, "size": size})


async def commit_put(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    name, key = str_field(body, "name"), optional_str_field(body, "key")
    sha256, size = check_digest(body.get("sha256")), int_field(body, "size", SIZE)
    max_bytes = request.app[ARTIFACTS].settings.max_bytes
    public, executable = flag(body, PUBLIC), flag(body, "executable")
    row = await commit(request.app, org, project, sha256, size, lambda conn:
                       index.put_run_artifact(conn, run_id, token, key, name, sha256, size,
                                              max_bytes, public, executable))
    return web.json_response(artifact_json(row))


def _where(body: dict[str, Any], org: str, project: str) -> tuple[str | None, str | None]:
    """(cache key, other run) a get or list names; neither: the run's own."""
    key, other = optional_str_field(body, "key"), optional_str_field(body, "run")
    if key is not None and other is not None:
        raise InvalidArgument("give a cache key or a run, not both")
    if other is not None and not in_project(other, org, project):
        raise NotFound(f"no run {other} in {org}/{project}")
    return key, other


async def find(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    name = str_field(body, "name")
    key, other = _where(body, org, project)
    arts = request.app[ARTIFACTS]
    async with connection(request.app[POOL]) as conn, conn.transaction():
        found = await index.find_run_artifact(conn, run_id, token, other, key, name,
                                              flag(body, TAINTED))
    if found is None:
        where = f"cache key {key}" if key else (other or run_id)
        raise NotFound(f"no artifact {name!r} in {where} that this run may read")
    signed = (await arts.store.sign("GET", org, project, found.sha256, found.size)
              if arts.signs else None)
    return web.json_response(_download(found, signed))


async def get_blob(request: web.Request) -> web.StreamResponse:
    run_id, org, project = await agent_run(request)
    token = await _header_claim(request)
    sha256 = check_digest(request.match_info["sha256"])
    async with connection(request.app[POOL]) as conn, conn.transaction():
        size = await index.find_run_artifact_blob(conn, run_id, token, sha256)
    if size is None:
        raise NotFound(f"no artifact blob {sha256} in {org}/{project}")
    return await stream_blob(request, org, project, sha256, size)


async def list_(request: web.Request) -> web.Response:
    run_id, org, project = await agent_run(request)
    body = await json_body(request)
    token = await agent_claim(request, body)
    cached = body.get("cached", False)
    if not isinstance(cached, bool):
        raise InvalidArgument("cached must be true or false")
    _, other = _where({**body, "key": None}, org, project)
    async with connection(request.app[POOL]) as conn, conn.transaction():
        rows = await index.list_run_artifacts(conn, run_id, token, other, cached,
                                              flag(body, TAINTED))
    return web.json_response({"artifacts": [
        {**artifact_json(a), "tainted": a.tainted, "published": a.published} for a in rows]})


def add_routes(app: web.Application) -> None:
    add_run_route(app, "artifacts/prepare", prepare)
    add_run_route(app, "artifacts/commit", commit_put)
    add_run_route(app, "artifacts/find", find)
    add_run_route(app, "artifacts/list", list_)
    app.router.add_put(f"{RUN_ROUTE}/artifacts/blobs/{{sha256}}", put_blob)
    app.router.add_get(f"{RUN_ROUTE}/artifacts/blobs/{{sha256}}", get_blob)
