"""The OpenAPI 3 document of the HTTP API, served at `GET /api/v1/openapi.json`.

Written by hand from one table (ROUTES): a route is (method, path, who may call it,
summary, body, query). tests/server/test_openapi.py checks that this table and the
app's router name the same routes both ways, and fuzzes every operation with
schemathesis, asserting that no input earns a 5xx. A route added to the router without
a line here fails that test.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

OPENAPI_PATH = "/api/v1/openapi.json"

_S: dict[str, Any] = {"type": "string"}
_I: dict[str, Any] = {"type": "integer"}
_N: dict[str, Any] = {"type": "number"}
_B: dict[str, Any] = {"type": "boolean"}
_ANY: dict[str, Any] = {}  # any JSON value
_STRS: dict[str, Any] = {"type": "array", "items": _S}


def _obj(required: tuple[str, ...] = (), **props: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


# What every durable call of an agent carries: the claim token, the call's identity.
_CALL = {"claim_token": {"type": "string", "format": "uuid"}, "position": _I, "path": _S,
         "ordinal": _I}
_TOKEN = ("claim_token",)


def _agent(required: tuple[str, ...] = (), **props: dict[str, Any]) -> dict[str, Any]:
    return _obj(_TOKEN + required, **_CALL, **props)


_CLAIM = _obj(("agent_id",), agent_id=_S, capabilities=_STRS, wait=_N, build=_S, instance=_S)

P = "/api/v1/orgs/{org}/projects/{project}"
G = "/api/v1/orgs/{org}"
A = "/api/v1/agent/runs/{run}"

# (method, path, auth, summary, request body schema or None, query parameters)
# auth: "user" (a user token or session, the route names the role), "agent" (an agent
# token), "signature" (a webhook's HMAC), "cookie" (the web UI's session), "none".
ROUTES: list[tuple[str, str, str, str, dict[str, Any] | None, dict[str, dict[str, Any]]]] = [
    ("GET", "/api/v1/health", "none", "The server and its database answer", None, {}),
    ("GET", "/api/v1/graphs/node-types", "none",
     "Every graph node type with the JSON Schema of its config, and the node-level keys' "
     "schema", None, {}),
    ("GET", OPENAPI_PATH, "none", "This document", None, {}),
    ("POST", f"{P}/runs", "user", "Submit a script, graph or pipeline as a run",
     _obj(("source", "filename"), source=_S, filename=_S, interpreter=_S, input=_ANY,
          idempotency_key=_S, untrusted=_B, concurrency=_S, policy=_S, workdir=_S,
          timeout={"type": ["number", "string"]}, priority=_I), {}),
    ("GET", f"{G}/agents", "user", "The org's agents: build, capabilities, last claim, state "
     "(Viewer)", None, {}),
    ("POST", f"{G}/agents/drain", "user", "Ask agents of a build (or an id) to drain at their "
     "next claim (Admin)", _obj((), build=_S, agent_id=_S), {}),
    ("POST", "/api/v1/agent/drain", "agent", "Ask this org's agent(s) of one id to drain",
     _obj(("agent_id",), agent_id=_S), {}),
    ("POST", "/api/v1/agent/state", "agent", "An agent process says it is draining (SIGTERM) "
     "or gone (on its way out)", _obj(("agent_id", "state"), agent_id=_S, instance=_S,
                                      state=_S), {}),
    ("GET", f"{P}/runs", "user", "A project's runs, newest first, or in the order sort "
     "names (started, ended, duration, status, workflow; -name for descending)", None,
     {"limit": _I, "status": _S, "workflow": _S, "parent": _S, "before": _S, "top": _S,
      "q": _S, "match": _S, "trigger": _S, "since": _S, "until": _S, "sort": _S}),
    ("GET", f"{P}/run-count", "user", "How many runs the runs list's filters hold", None,
     {"status": _S, "workflow": _S, "parent": _S, "q": _S, "match": _S, "trigger": _S,
      "since": _S, "until": _S}),
    ("GET", f"{P}/runs/{{run}}", "user", "One run: status, input, outputs, history", None, {}),
    ("GET", f"{P}/runs/{{run}}/checkpoints", "user", "A run's durable calls", None, {}),
    ("POST", f"{P}/runs/{{run}}/cancel", "user", "Cancel a run", None, {}),
    ("PUT", f"{P}/workflows/{{name}}", "user", "Store a named workflow",
     _obj(("source", "filename"), source=_S, filename=_S, interpreter=_S, workdir=_S,
          base_version=_I, timeout={"type": ["number", "string"]}, priority=_I), {}),
    ("GET", f"{P}/workflows/{{name}}/versions", "user",
     "A stored workflow's versions, newest first (who stored each, and when)", None, {}),
    ("GET", f"{P}/workflows/{{name}}/versions/{{version}}", "user",
     "One version of a stored workflow, with its source (Members)", None, {}),
    ("GET", f"{P}/workflows/{{name}}", "user", "A stored workflow", None, {"source": _S}),
    ("GET", f"{P}/workflows", "user", "The project's stored workflows", None, {}),
    ("DELETE", f"{P}/workflows/{{name}}", "user",
     "Delete a stored workflow and the triggers its on: made", None, {}),
    ("POST", f"{P}/runs/{{run}}/approvals/{{node}}", "user",
     "Answer a waiting approval node (?item=K: one item of a fanned-out one)", _obj(),
     {"item": _I}),
    ("POST", f"{P}/runs/{{run}}/rerun", "user", "Rerun a graph run from a node",
     _obj(("from",), **{"from": _S}), {}),
    ("POST", f"{P}/runs/{{run}}/run-again", "user",
     "Start a new run with the same source and input (any kind)", None, {}),
    ("POST", f"{P}/runs/{{run}}/approvals/{{node}}/reject", "user",
     "Turn down a waiting approval node (the run fails; ?item=K: one item of a "
     "fanned-out one)", _obj(comment=_S), {"item": _I}),
    ("POST", f"{P}/workflows/{{name}}/runs", "user", "Start a stored workflow by name",
     _obj(), {}),
    ("GET", f"{P}/runs/{{run}}/logs", "user", "A run's log (text), optionally followed; "
     "a graph run's is its node jobs' logs, each line prefixed [node]. A script run's log "
     "also by ranges (after or before a chunk id, max_bytes: JSON chunks) or searched "
     "(find: JSON matches)",
     None, {"follow": _S, "after": _I, "times": _S, "before": _I, "max_bytes": _I,
            "find": _S, "limit": _I}),
    ("GET", f"{P}/stream", "user", "Live changes of a project (server-sent events)", None, {}),
    ("GET", f"{P}/runs/{{run}}/stream", "user", "Live log and changes of a run (SSE)", None,
     {"tail": _I}),
    ("POST", f"{P}/runs/{{run}}/signal/{{name}}", "user", "Send a signal to a run",
     _obj(payload=_ANY), {}),
    ("GET", f"{P}/events", "user", "A project's bus events", None, {"name": _S, "limit": _I}),
    ("POST", f"{P}/events/{{name}}", "user", "Publish a bus event (public: untrusted runs "
     "hear it too)", _obj(payload=_ANY, public=_B), {}),
    ("GET", f"{P}/runs/{{run}}/entity-state", "user", "Entity state a run touched", None, {}),
    ("GET", f"{P}/runs/{{run}}/state", "user", "A run's state cells", None, {}),
    ("GET", f"{P}/runs/{{run}}/state/{{key}}", "user", "One state cell of a run", None, {}),
    ("GET", f"{P}/entities/{{entity}}/state", "user", "An entity's state cells (tainted=1: "
     "those untrusted runs wrote)", None, {"tainted": _S}),
    ("GET", f"{P}/entities/{{entity}}/state/{{key}}", "user", "One state cell of an entity",
     None, {"tainted": _S}),
    ("GET", f"{P}/runs/{{run}}/artifacts", "user", "A run's artifacts", None, {}),
    ("GET", f"{P}/runs/{{run}}/artifacts/{{name}}", "user", "Download a run's artifact "
     "(a redirect to a signed URL, or the bytes)", None, {"redirect": _S}),
    ("GET", f"{P}/artifacts", "user", "The project's cached (--key) artifacts", None,
     {"key": _S}),
    ("GET", f"{P}/artifacts/{{name}}", "user", "Download a cached artifact (tainted=1: the "
     "one untrusted runs put)", None, {"key": _S, "redirect": _S, "tainted": _S}),
    ("PUT", f"{P}/artifacts/{{name}}", "user", "Upload a cached artifact (the body is the "
     "bytes; X-Cryo-SHA256 optional; public=1 publishes it to untrusted runs; "
     "executable=1: the file was executable)", None,
     {"key": _S, "public": _S, "executable": _S}),
    ("GET", f"{G}/me", "user", "Who the token is", None, {}),
    ("GET", f"{G}/members", "user", "The org's members", None, {}),
    ("PUT", f"{G}/members/{{login}}", "user", "Add a member or change its role",
     _obj(("role",), role=_S), {}),
    ("DELETE", f"{G}/members/{{login}}", "user", "Remove a member", None, {}),
    ("GET", f"{G}/role-maps", "user", "Which ID token claim values give which role", None, {}),
    ("PUT", f"{G}/role-maps/{{claim}}/{{value}}", "user",
     "Give a role to whoever's ID token claim holds a value", _obj(("role",), role=_S), {}),
    ("DELETE", f"{G}/role-maps/{{claim}}/{{value}}", "user", "Remove a claim's role", None, {}),
    ("GET", f"{G}/sessions", "user", "The org's live sign-in sessions", None, {}),
    ("DELETE", f"{G}/sessions/{{session}}", "user", "End a sign-in session", None, {}),
    ("GET", "/api/v1/auth/config", "none", "How to sign in: the OIDC issuer and client id",
     None, {}),
    ("GET", "/api/v1/auth/oidc/login", "none",
     "Start a browser sign-in at the issuer (redirects)", None, {"org": _S}),
    ("GET", "/api/v1/auth/oidc/callback", "none",
     "Where the issuer sends the browser back (sets the session cookie)", None,
     {"code": _S, "state": _S, "error": _S, "error_description": _S}),
    ("POST", "/api/v1/auth/oidc/cli/nonce", "none",
     "A single-use nonce for a CLI sign-in's ID token", _obj(("org",), org=_S), {}),
    ("POST", "/api/v1/auth/oidc/cli", "none",
     "Trade an ID token (carrying a CLI nonce, or renewing with the bearer's session) "
     "for a CLI session",
     _obj(("id_token", "org"), id_token=_S, org=_S, nonce=_S, access_token=_S), {}),
    ("GET", "/api/v1/auth/session", "cookie", "Who the session cookie signs in", None, {}),
    ("POST", "/api/v1/auth/logout", "user", "End the caller's session", None, {}),
    ("GET", f"{G}/projects", "user", "The org's projects", None, {}),
    ("POST", f"{G}/projects", "user", "Create a project", _obj(("slug",), slug=_S, name=_S), {}),
    ("PATCH", P, "user", "Rename a project", _obj(("name",), name=_S), {}),
    ("DELETE", P, "user", "Delete a project and its runs", None, {}),
    ("GET", f"{P}/retention", "user", "How long finished runs and events are kept", None, {}),
    ("PUT", f"{P}/retention", "user", "Set the retention",
     _obj(runs_seconds=_N, events_seconds=_N), {}),
    ("GET", f"{P}/secrets", "user", "The project's secret names", None, {}),
    ("PUT", f"{P}/secrets/{{name}}", "user", "Store a secret", _obj(("value",), value=_S), {}),
    ("DELETE", f"{P}/secrets/{{name}}", "user", "Delete a secret", None, {}),
    ("GET", f"{P}/connections", "user", "The project's connections (secret names only)",
     None, {}),
    ("POST", f"{P}/connections", "user", "Create (or with replace, replace) a connection",
     _obj(("name", "base_url"), name=_S, base_url=_S, auth=_S, secret=_S, username=_S,
          header=_S, headers={"type": "object", "additionalProperties": _S}, replace=_B), {}),
    ("GET", f"{P}/connections/{{name}}", "user", "One connection", None, {}),
    ("DELETE", f"{P}/connections/{{name}}", "user", "Delete a connection", None, {}),
    ("GET", f"{P}/schedules", "user", "The project's schedules", None, {}),
    ("POST", f"{P}/schedules", "user", "Create a schedule",
     _obj(("name", "workflow"), name=_S, workflow=_S, cron=_S, every=_ANY, timezone=_S,
          input=_ANY), {}),
    ("POST", f"{P}/schedules/{{name}}/pause", "user", "Pause a schedule", None, {}),
    ("POST", f"{P}/schedules/{{name}}/resume", "user", "Resume a schedule", None, {}),
    ("DELETE", f"{P}/schedules/{{name}}", "user", "Delete a schedule", None, {}),
    ("PUT", f"{P}/schedules/{{name}}", "user", "Change a schedule (input kept unless given)",
     _obj(("workflow",), workflow=_S, cron=_S, every=_ANY, timezone=_S, input=_ANY), {}),
    ("POST", f"{P}/schedules/{{name}}/run", "user",
     "Start one run of a schedule's workflow now", None, {}),
    ("GET", f"{P}/webhooks", "user", "The project's webhooks", None, {}),
    ("POST", f"{P}/webhooks", "user", "Create a webhook (its secret is shown once)",
     _obj(("name",), name=_S, workflow=_S, status_url=_S), {}),
    ("DELETE", f"{P}/webhooks/{{name}}", "user", "Delete a webhook", None, {}),
    ("PUT", f"{P}/webhooks/{{name}}", "user", "Change a webhook's workflow and status URL",
     _obj(workflow=_S, status_url=_S), {}),
    ("POST", f"{P}/webhooks/{{name}}/pause", "user", "Pause a webhook", None, {}),
    ("POST", f"{P}/webhooks/{{name}}/resume", "user", "Resume a webhook", None, {}),
    ("POST", f"{P}/webhook-deliveries/{{id}}/redeliver", "user",
     "Deliver a stored webhook delivery again", None, {}),
    ("GET", f"{P}/webhook-deliveries", "user",
     "The project's latest accepted webhook deliveries and their outcomes (?limit=, at most 200)",
     None, {}),
    ("GET", f"{P}/handlers", "user", "The project's event handlers", None, {}),
    ("POST", f"{P}/handlers", "user", "Create an event handler",
     _obj(("name", "event", "workflow"), name=_S, event=_S, workflow=_S), {}),
    ("DELETE", f"{P}/handlers/{{name}}", "user", "Delete an event handler", None, {}),
    ("PUT", f"{P}/handlers/{{name}}", "user", "Change an event handler",
     _obj(("event", "workflow"), event=_S, workflow=_S), {}),
    ("POST", f"{P}/handlers/{{name}}/pause", "user", "Pause an event handler", None, {}),
    ("POST", f"{P}/handlers/{{name}}/resume", "user", "Resume an event handler", None, {}),
    ("POST", "/api/v1/hooks/{org}/{project}/{name}", "signature",
     "A webhook delivery, signed with X-Hub-Signature-256 or X-Cryo-Signature", _obj(), {}),
    ("POST", "/api/v1/agent/claim", "agent", "Long-poll for a run to execute", _CLAIM, {}),
    ("POST", f"{A}/logs", "agent", "Append log bytes (base64); renews the lease",
     _agent(data=_S), {}),
    ("POST", f"{A}/finish", "agent", "End the run, optionally claiming the next",
     _agent(("outcome",), outcome=_S, exit_code=_I, error=_S, data=_S, claim=_CLAIM), {}),
    ("POST", f"{A}/release", "agent", "Give the claim back", _agent(), {}),
    ("POST", f"{A}/steps", "agent", "Record a finished step",
     _agent(("ordinal",), family=_S, name=_S, label=_S, stdout=_S, exit_code=_I,
            started_at=_N), {}),
    ("POST", f"{A}/marks", "agent", "Mark a step about to run",
     _agent(("ordinal",), family=_S, name=_S), {}),
    ("POST", f"{A}/park", "agent", "Sleep: park the run until a time",
     _agent(("ordinal", "seconds"), seconds=_N), {}),
    ("POST", f"{A}/annotate", "agent", "Add a note to the run's history", _agent(text=_S), {}),
    ("POST", f"{A}/state/{{op}}", "agent", "Durable state: get, list, set, delete, add, cas, "
     "incr", _agent(key=_S, entity=_S, name=_S, value=_ANY, expect=_I, by=_N, public=_B,
                    tainted=_B), {}),
    ("POST", f"{A}/artifacts/prepare", "agent", "Before an artifact upload: present? where to",
     _agent(("sha256", "size"), sha256=_S, size=_I, force=_B), {}),
    ("POST", f"{A}/artifacts/commit", "agent", "Name an uploaded artifact",
     _agent(("name", "sha256", "size"), name=_S, key=_S, sha256=_S, size=_I, public=_B), {}),
    ("POST", f"{A}/artifacts/find", "agent", "Where to download an artifact",
     _agent(("name",), name=_S, key=_S, run=_S, tainted=_B), {}),
    ("POST", f"{A}/artifacts/list", "agent", "A run's (or the cached) artifacts",
     _agent(run=_S, key=_S, cached=_B, tainted=_B), {}),
    ("PUT", f"{A}/artifacts/blobs/{{sha256}}", "agent", "Upload artifact bytes through the "
     "server (X-Cryo-Claim header)", None, {}),
    ("GET", f"{A}/artifacts/blobs/{{sha256}}", "agent", "Download artifact bytes through the "
     "server (X-Cryo-Claim header)", None, {}),
    ("POST", f"{A}/waits/{{kind}}", "agent", "Wait for a signal or an event",
     _agent(("name", "ordinal"), name=_S, timeout=_N, tainted=_B), {}),
    ("POST", f"{A}/emit", "agent", "Publish an event from the run",
     _agent(("name", "ordinal"), name=_S, payload=_ANY, public=_B), {}),
    ("POST", f"{A}/spawn", "agent", "Start a child run",
     _agent(("filename", "source", "ordinal"), filename=_S, source=_S, interpreter=_S,
            input=_ANY), {}),
    ("POST", f"{A}/activities", "agent", "Submit a fan-out activity",
     _agent(("name", "argv"), name=_S, argv=_STRS, retries=_I, retry_backoff=_N,
            retry_on={"type": "array", "items": _I}), {}),
    ("POST", f"{A}/activities/collect", "agent", "Collect an activity's result",
     _agent(("name", "ordinal"), name=_S), {}),
    ("POST", f"{A}/activities/wait-all", "agent", "Wait for every activity",
     _agent(("ordinal",)), {}),
    ("POST", f"{A}/outputs", "agent", "Set a named output of the run",
     _agent(("key",), key=_S, value=_ANY), {}),
    ("POST", f"{A}/locks/acquire", "agent", "Acquire a project lease",
     _agent(("group", "ordinal"), group=_S, scoped=_B), {}),
    ("POST", f"{A}/locks/release", "agent", "Release a project lease",
     _agent(("group",), group=_S), {}),
    ("POST", f"{A}/graphs/call", "agent", "Call a stored graph as a child run",
     _agent(("name", "ordinal"), name=_S, input=_ANY), {}),
    ("POST", f"{A}/nodes/call", "agent", "Call one node as a child graph run",
     _agent(("type", "config", "ordinal"), type=_S, config=_obj(), input=_ANY), {}),
]

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["code", "message"],
    "properties": {"code": _S, "message": _S}}}}


def _operation(method: str, path: str, auth: str, summary: str, body: dict[str, Any] | None,
               query: dict[str, dict[str, Any]]) -> dict[str, Any]:
    params = [{"name": n, "in": "path", "required": True, "schema": _S}
              for n in re.findall(r"\{(\w+)\}", path)]
    params += [{"name": n, "in": "query", "required": False, "schema": s}
               for n, s in query.items()]
    op: dict[str, Any] = {
        "operationId": f"{method.lower()}{re.sub(r'[^A-Za-z0-9]+', '_', path)}",
        "summary": summary, "parameters": params,
        "responses": {"200": {"description": "Done (201 created, 202 accepted, 204 nothing)"},
                      "4XX": {"description": "Refused: bad input, auth, conflict",
                              "content": {"application/json": {
                                  "schema": {"$ref": "#/components/schemas/Error"}}}}}}
    if auth in ("user", "agent"):
        op["security"] = [{"bearer": []}]
    else:
        op["security"] = []
    if body is not None:
        op["requestBody"] = {"required": False, "content": {"application/json": {
            "schema": body}}}
    return op


def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for method, path, auth, summary, body, query in ROUTES:
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, auth, summary,
                                                                body, query)
    return {
        "openapi": "3.0.3",
        "info": {"title": "cryopg", "version": "1",
                 "description": "Durable execution whose engine is PostgreSQL. Every refusal "
                                "is a 4xx with {\"error\": {\"code\", \"message\"}}."},
        "paths": paths,
        "components": {"schemas": {"Error": _ERROR},
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document())


def add_routes(app: web.Application) -> None:
    app.router.add_get(OPENAPI_PATH, openapi)
