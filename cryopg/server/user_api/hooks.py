"""`POST /api/v1/hooks/{org}/{project}/{name}`: a webhook delivery from a forge.

No token: the HMAC-SHA256 of the raw body under the webhook's secret is the
authentication. A missing or wrong signature is 401 and stores nothing. Then one SQL
call (cryo.deliver_webhook) dedups on the body's hash, decides the workflow's `if` and
starts the run, or publishes webhook.<event> on the bus, in one transaction.

Answers: 201 a run started; 202 accepted without a run (the `if` was false, the
workflow's on.webhook leaves the event out, or the delivery went to the bus); 200 a
redelivery of a body already accepted, with what its first delivery did; 422 the run's
input does not match the workflow's input_schema (recorded as the outcome `refused`).
"""

from __future__ import annotations

import hashlib

from aiohttp import web

from cryopg import engine
from cryopg.db import connection
from cryopg.errors import CryoError, InputRefused, InvalidArgument, Unauthorized
from cryopg.server import input_checks, metrics, traces
from cryopg.server.app_state import KEYS, POOL
from cryopg.server.limits import parse_json_off_loop, raw_body, read_body
from cryopg.server.user_api.triggers import HOOK_ROUTE
from cryopg.triggers import webhook

MAX_BODY = 25 << 20  # GitHub's own limit on a delivery


@raw_body  # the HMAC is over the raw bytes: checked here, after the signature
async def deliver(request: web.Request) -> web.Response:
    """A delivery, counted by result: its outcome, duplicate, or the error refusing it."""
    try:
        resp, result = await _deliver(request)
    except CryoError as exc:
        metrics.count(request.app, "webhook_deliveries", exc.code)
        raise
    metrics.count(request.app, "webhook_deliveries", result)
    return resp


async def _deliver(request: web.Request) -> tuple[web.Response, str]:
    org, project, name = (request.match_info[k] for k in ("org", "project", "name"))
    body = await read_body(request, MAX_BODY)
    async with connection(request.app[POOL]) as conn:
        hook = await engine.get_webhook(conn, org, project, name)
    sealer = await request.app[KEYS].sealer(org)
    if not webhook.signature_ok(sealer.open_text(hook.secret), body, request.headers):
        raise Unauthorized("missing or wrong signature (X-Hub-Signature-256 or "
                           "X-Cryo-Signature: sha256=<HMAC-SHA256 of the body>)")
    event = webhook.event_name(request.headers)
    if event is None:
        raise InvalidArgument("the event header is not a valid event name")
    payload = await parse_json_off_loop(body, "the delivery's body")
    trigger, untrusted = webhook.trigger_of(name, event, payload)
    async with connection(request.app[POOL]) as conn:
        # The run's input against the workflow's input_schema: a refusal is recorded as
        # the delivery's outcome and answered 422, with the schema's message.
        refused = (await input_checks.refusal(conn, org, project, hook.workflow,
                                              {"trigger": trigger})
                   if hook.workflow else None)
        got = await engine.deliver_webhook(
            conn, org, project, name, body_hash=hashlib.sha256(body).digest(), event=event,
            trigger=trigger, input=sealer.seal_json({"trigger": trigger}),
            payload=sealer.seal_json({"answer": trigger}), untrusted=untrusted, refused=refused)
        if got.outcome == "refused":
            raise InputRefused(refused or "the delivery's input does not match the workflow's "
                               "input_schema")
        if not got.duplicate:
            await traces.start_run_trace(conn, got.run_id, "cryopg webhook",
                                         traces.incoming(request), org=org, project=project,
                                         webhook=name, event=event)
    status = 200 if got.duplicate else 201 if got.outcome == "started" else 202
    return web.json_response({"outcome": got.outcome, "run_id": got.run_id,
                              "event_id": got.event_id, "duplicate": got.duplicate,
                              "untrusted": untrusted}, status=status), \
        "duplicate" if got.duplicate else got.outcome


def add_routes(app: web.Application) -> None:
    app.router.add_post(HOOK_ROUTE, deliver)
