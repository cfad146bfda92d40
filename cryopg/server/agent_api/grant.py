"""What a claim grants the agent: the run's script, input, journal and secrets, opened.

cryo.claim_grants read the memos and secrets in the claim's own transaction; opening
them here needs the database again only for a clear input (sealed once, at its first
claim) and for a collected child's output."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from aiohttp import web
from psycopg import AsyncConnection

from cryopg import engine, tracing
from cryopg.db import connection
from cryopg.engine import ClaimGrant, Memo
from cryopg.errors import Unreadable
from cryopg.payloads import child_output, run_input
from cryopg.seal import Sealer
from cryopg.server.agent_api.in_run import finish_unreadable
from cryopg.server.app_state import CONFIG, KEYS, POOL
from cryopg.server.auth import bind_claim

GRAPH_CALLS = ("graph.call", "node.call")


async def grant_entry(conn: AsyncConnection | None, sealer: Sealer, m: Memo) -> dict[str, Any]:
    """One journal memo as the agent's grant carries it, opened."""
    result = sealer.open_json(m.result) if m.result is not None else {}
    entry: dict[str, Any] = {"seq": m.seq, "path": m.path, "family": m.family, "name": m.name,
                             "ordinal": m.ordinal, "status": m.status,
                             "stdout": result.get("stdout", ""), "exit_code": m.exit_code}
    if "answer" in result:
        entry["answer"] = result["answer"]
    elif m.answer_clear is not None:
        entry["answer"] = m.answer_clear
    if m.family in GRAPH_CALLS and m.status == "done":
        # The called graph's output (sealed in the memo) beside its run id, status, error.
        entry["answer"] = {**(m.answer_clear or {}), "output": result.get("answer")}
    if m.family == "activity.collect" and m.status == "done" and m.ref_run_id and conn:
        entry["stdout"] = await child_output(conn, sealer, m.ref_run_id)
    return entry


def held_token(got: ClaimGrant) -> uuid.UUID:
    """The claim token as the queue row holds it: bound to the agent token that took it;
    the server's own calls for this claim present it so."""
    claim = got.claim
    return claim.claim_token if got.agent_token is None else bind_claim(got.agent_token,
                                                                        claim.claim_token)


async def grant(request: web.Request, org: str, got: ClaimGrant) -> dict[str, Any] | None:
    """Opens what the claim carries. A payload that will not open (altered bytes, or an
    org key this server's master key cannot unwrap) ends the run as unreadable rather
    than letting it run without its recorded answers."""
    app = request.app
    claim = got.claim
    try:
        sealer = await app[KEYS].sealer(org)
        source = sealer.open_text(claim.source)
        if claim.input_clear is not None:
            input_value = run_input(sealer, claim.input, claim.input_clear)
            async with connection(app[POOL]) as conn:
                await engine.seal_run_input(conn, claim.run_id, held_token(got),
                                            sealer.seal_json(input_value))
        else:
            input_value = sealer.open_json(claim.input) if claim.input is not None else None
        log_context = b""
        if got.journal:  # a later pass: its log masker goes on from the last one's tail
            async with connection(app[POOL]) as conn:
                journal = [await grant_entry(conn, sealer, m) for m in got.journal]
                sealed_context = await engine.log_context(conn, claim.run_id)
            if sealed_context is not None:
                log_context = sealer.open(sealed_context)
        else:
            journal = []
        # Plaintext secrets exist only here, in the grant of a trusted run's live claim.
        secrets = {s.name: sealer.open_text(s.value) for s in got.secrets
                   if not s.withheld and s.value is not None}
        withheld = [s.name for s in got.secrets if s.withheld]
    except Unreadable as exc:
        await finish_unreadable(request, claim.run_id, held_token(got), exc)
        return None
    traceparent = None
    if tracing.enabled():  # the claim is a span of the run's trace; the agent's pass its child
        async with connection(app[POOL]) as conn:
            run_tp = await engine.run_traceparent(conn, claim.run_id)
        with tracing.span("cryopg claim", run_tp, run_id=claim.run_id,
                          attempt=claim.attempt) as s:
            traceparent = tracing.traceparent_of(s) if run_tp else None
    return {**({"traceparent": traceparent} if traceparent else {}),
            "run_id": claim.run_id, "claim_token": str(claim.claim_token),
            "attempt": claim.attempt, "filename": claim.filename,
            "interpreter": claim.interpreter, "source": source, "input": input_value,
            "claim_seconds": app[CONFIG].claim_seconds, "journal": journal,
            "secrets": secrets, "withheld": withheld, "workdir": claim.workdir,
            "untrusted": claim.untrusted,
            "log_context": base64.b64encode(log_context).decode() if secrets else ""}
