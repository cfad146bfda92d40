"""A stored workflow's versions (`…/workflows/{name}/versions[/{version}]`), and where in
its source a refused save's error is, so an editor can mark that line.

Every put of a changed definition is a version (cryo.put_workflow keeps it, with who
and when); listing them needs a Viewer, reading one's source a Member, as
`GET …/workflows/{name}?source=1` does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import InvalidArgument
from cryopg.payloads import open_document
from cryopg.seal import Sealer
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.auth import MEMBER, VIEWER, require_user
from cryopg.server.render import iso
from cryopg.server.user_api.scope import PROJECT_ROUTE, project_of

_LINE = re.compile(r"\bline (\d+)\b")
_NAMED = re.compile(r"^(?:[^:\s]+: )?(?:job|node) ([A-Za-z0-9_.-]+)\b")


def stored_text(sealer: Sealer, sealed: bytes, structure: Any) -> str:
    """What was written: a script as is, a pipeline's YAML, a graph's JSON document."""
    text = open_document(sealer, sealed)
    if structure is not None:
        doc = json.loads(text)
        text = doc.get("pipeline_source") or doc.get("graph_source") or text
    return str(text)


def error_line(source: str, message: str) -> int | None:
    """The 1-based line a compile error is about: the one it names (`line 4: …`), or the
    line that opens the job or node it names (`job deploy: needs: …`); None otherwise."""
    named = _LINE.search(message)
    if named:
        line = int(named.group(1))
        return line if 1 <= line <= source.count("\n") + 1 else None
    job = _NAMED.search(message)
    if job:
        key = re.escape(job.group(1))
        opener = re.compile(rf"^\s*(?:{key}\s*:|\"id\"\s*:\s*\"{key}\"|-\s+id\s*:\s*{key}\s*$)")
        for i, text in enumerate(source.splitlines(), 1):
            if opener.search(text):
                return i
    return None


def refused(exc: InvalidArgument, source: str) -> web.Response:
    """A 400 for a definition that does not compile, with the line it is about (if any)."""
    error: dict[str, Any] = {"code": exc.code, "message": str(exc)}
    line = error_line(source, str(exc))
    if line is not None:
        error["line"] = line
    return web.json_response({"error": error}, status=400)


def _version(request: web.Request) -> int:
    text = request.match_info["version"]
    if not text.isdigit() or len(text) > 9:
        raise InvalidArgument(f"version {text[:20]!r} must be a positive integer")
    return int(text)


async def list_versions(request: web.Request) -> web.Response:
    await require_user(request, VIEWER)
    org, project = project_of(request)
    async with connection(request.app[POOL]) as conn:
        rows = await engine.list_workflow_versions(conn, org, project, request.match_info["name"])
    return web.json_response({"versions": [
        {"version": v.version, "filename": v.filename, "kind": v.kind, "pipeline": v.pipeline,
         "created_by": v.created_by, "created_at": iso(v.created_at), "current": v.current}
        for v in rows]})


async def get_version(request: web.Request) -> web.Response:
    await require_user(request, MEMBER)  # a source, as ?source=1 of the workflow
    org, project = project_of(request)
    name, version = request.match_info["name"], _version(request)
    async with connection(request.app[POOL]) as conn:
        v = await engine.get_workflow_version(conn, org, project, name, version)
    sealer = await request.app[KEYS].sealer(org)
    return web.json_response({
        "name": name, "version": version, "filename": v.filename, "interpreter": v.interpreter,
        "workdir": v.workdir, "created_by": v.created_by, "created_at": iso(v.created_at),
        "source": stored_text(sealer, v.source, v.graph)})


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PROJECT_ROUTE}/workflows/{{name}}/versions", list_versions)
    app.router.add_get(f"{PROJECT_ROUTE}/workflows/{{name}}/versions/{{version}}", get_version)
