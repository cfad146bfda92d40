"""The driver's dispatch over node types: starting an instance (each type's start, in
nodes/<type>.py, behind the registry) with its failures kept to that node, and
collecting what an instance came to once it has -- its child run ended (the type's
result), its wait answered or timed out, its approval given.
"""

from __future__ import annotations

from typing import Any

from cryopg import engine
from cryopg.db import translated
from cryopg.engine import NodeRow, PlanRow
from cryopg.engine import artifacts as index
from cryopg.errors import CryoError, DatabaseUnavailable
from cryopg.graphs import artifacts
from cryopg.graphs.flow import CACHE_CONFIG
from cryopg.graphs.nodes import TYPES, approval
from cryopg.graphs.turn import Turn
from cryopg.payloads import answer

__all__ = ["Turn", "collect", "start"]


async def start(turn: Turn, p: PlanRow) -> bool:
    """Starts one instance. Returns True when it also ended (a database node, or a
    node whose cache held a fresh output)."""
    assert p.node_id is not None and p.item is not None and p.type is not None
    config = dict(p.config or {})
    cache = config.pop(CACHE_CONFIG, None)  # the node's cache: not its type's config
    try:
        # A savepoint: a call the database refuses undoes only this start, and the turn's
        # transaction stays usable to record the failure (without it the whole turn
        # rolled back and the driver retried the same run forever).
        with translated():
            async with turn.conn.transaction():
                if cache is not None and await _cached(turn, p, cache):
                    return True
                return await TYPES[p.type].start(turn, p, config)
    except DatabaseUnavailable:
        raise  # an outage fails no node: the turn rolls back and runs again
    except (CryoError, ValueError, TypeError) as exc:
        # A node that cannot even start (a key it may not write, a number that is not
        # one, a stored workflow that is not there) fails, with the reason.
        await turn.record(p.node_id, p.item, False, None, str(exc).splitlines()[0])
        return True


async def _cached(turn: Turn, p: PlanRow, cache: dict[str, Any]) -> bool:
    """Whether the node's cache held a fresh output, which ended the instance. The
    rendered key is stored only as a keyed digest (the org's key), never in clear."""
    assert p.node_id is not None and p.item is not None
    key = cache.get("key")
    if not isinstance(key, str) or not key:
        raise ValueError(f"cache.key rendered to {key!r}, not a text")
    digest = turn.sealer.keyed_digest("cryopg-node-cache/v1", key)
    return await engine.graph_cache_take(turn.conn, turn.run_id, turn.token, p.node_id,
                                         p.item, digest, float(cache["ttl"]))


async def collect(turn: Turn, r: NodeRow) -> bool:
    """Records what an instance came to, when it has: its child run ended, its wait was
    answered or timed out, its approval given. Returns whether it recorded anything."""
    assert r.item is not None
    result = TYPES[r.type].result
    if r.item_status == "running" and r.job_run_id and r.job_finished and result is not None:
        ok, out, error = await result(turn, r)
        if ok and r.type in artifacts.ARTIFACT_NODES:
            error = await _name_artifacts(turn, r)
            ok = error is None
        await turn.record(r.node_id, r.item, ok, out, error, r.job_exit_code)
        return True
    if r.item_status != "waiting":
        return False
    if r.wait_kind == "approval" and r.output is not None:
        await turn.record(r.node_id, r.item, True, turn.sealer.open_json(r.output))
        return True
    if r.wait_kind == "signal" and r.signal_id is not None:
        got = await engine.graph_take_signal(turn.conn, turn.run_id, turn.token, r.signal_id,
                                             r.node_id, r.item)
        if got is not None:
            await turn.record(r.node_id, r.item, True, answer(turn.sealer, got[0], got[1]))
            return True
    if r.wait_kind == "event" and r.event_id is not None:
        got = await engine.read_event(turn.conn, r.event_id)
        if got is not None:
            await turn.record(r.node_id, r.item, True, answer(turn.sealer, got[0], got[1]))
            return True
    if r.due and r.wait_kind == "approval":  # its timeout: the on_timeout answer
        ok, out, error = approval.timed_out(turn.configs.get(r.node_id) or {})
        await turn.record(r.node_id, r.item, ok, out, error)
        return True
    if r.due:
        await turn.record(r.node_id, r.item, True,
                          {} if r.wait_kind == "sleep" else {"timed_out": True})
        return True
    return False


async def _name_artifacts(turn: Turn, r: NodeRow) -> str | None:
    """The declared artifacts the job put, named `{node}/{name}` in the graph run's scope:
    index rows pointing at the blobs already stored, so no byte moves here. Why the node
    fails instead, when one is not there."""
    assert r.job_run_id is not None
    c = turn.configs.get(r.node_id) or {}
    for name, _ in artifacts.declared(r.node_id, c.get("artifacts", [])):
        got = await index.find_artifact(turn.conn, turn.org, turn.project, r.job_run_id, name)
        if got is None:
            return f"artifact {name} was not uploaded by the job"
        await index.put_run_artifact(turn.conn, turn.run_id, turn.token, None,
                                     artifacts.graph_name(r.node_id, name), got.sha256,
                                     got.size, None)
    return None
