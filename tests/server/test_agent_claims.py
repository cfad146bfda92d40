"""Agent routes that trust less (issue 20): every `/api/v1/agent/runs/{run}/…` route
needs that run's live claim, presented with the agent token that took it; agent ids are
bounded and each org's own.

Each test is the attack: the exact request, refused with a clear error, and nothing
disclosed or changed."""

from __future__ import annotations

import json
import uuid

import psycopg
from psycopg.types.json import Jsonb

from cryopg.graphs.document import digest_part
from cryopg.server.agent_api.in_run import RUN_ROUTE
from cryopg.server.auth import bind_claim
from tests.server.conftest import Server

SECRET = "s3cr3t-cell-value"


async def _claimed_with_a_cell(srv: Server) -> dict:
    """A running run whose script stored a run cell and an entity cell."""
    grant = await srv.claim_run(await srv.submit())
    (await srv.in_run(grant, "state/set", key="k", value=SECRET)).ok()
    (await srv.in_run(grant, "state/set", key="k", entity="cust-1", value=SECRET)).ok()
    return grant


async def test_another_runs_cells_are_not_read_without_its_claim(srv: Server) -> None:
    victim = await _claimed_with_a_cell(srv)
    mine = await srv.claim_run(await srv.submit())
    bogus = str(uuid.uuid4())
    for body in ({"key": "k"}, {"key": "k", "entity": "cust-1"}, {}):
        op = "get" if body else "list"
        for claim in (mine["claim_token"], bogus):  # my own claim, or a made-up one
            reply = await srv.agent(f"/runs/{victim['run_id']}/state/{op}",
                                    {"claim_token": claim, **body})
            reply.refused(409, "stale_claim")
            assert SECRET not in reply.text
        reply = await srv.agent(f"/runs/{victim['run_id']}/state/{op}", body)  # no claim
        reply.refused(400, "invalid_argument")
        assert SECRET not in reply.text
    # An entity cell is not read through a run that is not mine either, nor through mine
    # without its claim.
    reply = await srv.agent(f"/runs/{mine['run_id']}/state/get",
                            {"claim_token": bogus, "key": "k", "entity": "cust-1"})
    reply.refused(409, "stale_claim")
    # With the live claim it still works.
    got = (await srv.in_run(mine, "state/get", key="k", entity="cust-1")).ok()
    assert got["value"] == SECRET
    got = (await srv.in_run(victim, "state/list")).ok()
    assert [c["value"] for c in got["cells"]] == [SECRET]


async def test_every_per_run_agent_route_needs_the_live_claim(srv: Server) -> None:
    """Walks the router: no route under /api/v1/agent/runs/{run}/ answers 2xx to a
    valid agent token without the run's claim, and none discloses the run's cell."""
    victim = await _claimed_with_a_cell(srv)
    prefix = RUN_ROUTE + "/"
    routes = sorted({(r.method, r.resource.canonical) for r in srv.app.router.routes()
                     if r.resource is not None and r.resource.canonical.startswith(prefix)
                     and r.method != "HEAD"})
    assert len(routes) >= 15, routes
    fill = {"{op}": ["get", "list", "set", "delete", "add", "cas", "incr"],
            "{kind}": ["signal", "event"], "{sha256}": ["0" * 64]}
    body = {"claim_token": str(uuid.uuid4()), "key": "k", "name": "n", "ordinal": 0,
            "path": "x/n/0", "family": "x", "position": 0, "seconds": 1, "group": "g",
            "filename": "a.sh", "source": "echo", "argv": ["true"], "outcome": "succeeded",
            "exit_code": 0, "type": "state", "config": {"op": "get", "key": "k"},
            "value": 1, "expect": 0, "text": "t", "data": ""}
    paths = [(m, r.replace("{run}", victim["run_id"])) for m, r in routes]
    for hole, values in fill.items():
        paths = [(m, p.replace(hole, v)) for m, p in paths
                 for v in (values if hole in p else [""])]
    assert len(paths) >= len(routes) + 7
    for method, path in paths:
        assert "{" not in path, path  # a new path parameter needs a value in `fill`
        reply = await srv.request(method, path, body, token=srv.tokens["agent"])
        assert reply.status in (400, 409), (path, reply.status, reply.text)
        assert SECRET not in reply.text, path
    assert await srv.status(victim["run_id"]) == "running"


async def test_a_claim_token_works_only_with_the_agent_token_that_took_it(srv: Server) -> None:
    other = await srv.make_token(kind="agent")  # the same org, another agent token
    grant = await _claimed_with_a_cell(srv)
    tries = [("state/get", {"key": "k"}), ("state/list", {}),
             ("state/set", {"key": "k", "value": "overwritten"}),
             ("logs", {"data": ""}), ("annotate", {"text": "x"}),
             ("steps", {"path": "step/x/0", "family": "step", "name": "x", "ordinal": 0,
                        "stdout": "", "exit_code": 0}),
             ("release", {}), ("finish", {"outcome": "failed", "exit_code": 1})]
    for what, fields in tries:
        reply = await srv.in_run(grant, what, token=other, **fields)
        reply.refused(409, "stale_claim")
        assert SECRET not in reply.text
    assert await srv.status(grant["run_id"]) == "running"
    got = (await srv.in_run(grant, "state/get", key="k")).ok()
    assert got["value"] == SECRET  # nothing was overwritten
    async with await srv.connect() as conn:
        row = await (await conn.execute(
            "SELECT q.claim_agent_token, t.id FROM cryo.queue q, cryo.tokens t "
            "WHERE q.run_id = %s AND t.kind = 'agent' AND t.secret_hash = %s",
            (grant["run_id"], _hash(srv.tokens["agent"])))).fetchone()
    assert row is not None and row[0] == row[1]  # the claim names the token that took it
    await srv.finish(grant)  # its own token still ends it
    assert await srv.status(grant["run_id"]) == "succeeded"


def _hash(secret: str) -> bytes:
    from cryopg.server.auth import secret_hash
    return secret_hash(secret)


async def test_a_claim_token_handed_out_is_not_the_one_stored(srv: Server) -> None:
    """The grant's token alone does nothing through SQL either: the queue row holds it
    bound, so a token read from an agent's memory or logs is useless to another agent."""
    grant = await srv.claim_run(await srv.submit())
    async with await srv.connect() as conn:
        stored = (await (await conn.execute("SELECT claim_token FROM cryo.queue "
                                            "WHERE run_id = %s", (grant["run_id"],))
                         ).fetchone())[0]
    assert stored != uuid.UUID(grant["claim_token"])


async def test_long_or_odd_agent_ids_are_refused(srv: Server) -> None:
    for bad in ("a" * 100_000, "a" * 129, "", "has space", "tab\tid", "../x", "-lead", 7):
        reply = await srv.agent("/claim", {"agent_id": bad, "wait": 0})
        message = reply.refused(400, "invalid_argument")
        assert "agent_id" in message and len(message) < 300
    async with await srv.connect() as conn:
        n = (await (await conn.execute("SELECT count(*) FROM cryo.agents")).fetchone())[0]
    assert n == 0  # nothing registered
    assert await srv.claim(agent_id="a" * 128) is None  # the longest allowed works
    assert await srv.claim(agent_id="host-1.example:42@eu_west") is None


async def test_another_orgs_agent_cannot_take_over_an_agent_id(srv: Server) -> None:
    await srv.claim(agent_id="worker-1", caps=["shell"])
    async with await srv.connect() as conn:
        before = await (await conn.execute(
            "SELECT org, id, capabilities, registered_at, last_seen_at FROM cryo.agents "
            "WHERE id = 'worker-1'")).fetchall()
    assert [r[:3] for r in before] == [("dev", "worker-1", ["shell"])]
    await srv.add_org("acme")
    acme_agent = await srv.make_token(kind="agent", org="acme")
    assert await srv.claim(agent_id="worker-1", token=acme_agent) is None
    async with await srv.connect() as conn:
        rows = await (await conn.execute(
            "SELECT org, id, capabilities, registered_at, last_seen_at FROM cryo.agents "
            "WHERE id = 'worker-1' ORDER BY org")).fetchall()
    assert rows[0][0] == "acme" and rows[1:] == before  # dev's row is as it was


def test_the_claim_binding_and_the_digest_have_one_definition(dsn: str) -> None:
    """The server's twins of cryo._bind_claim and cryo._digest agree with them."""
    token = uuid.uuid4()
    with psycopg.connect(dsn) as db:
        bound = db.execute("SELECT cryo._bind_claim(%s, 'tok_123')", (token,)).fetchone()[0]
        same = db.execute("SELECT cryo._bind_claim(%s, NULL)", (token,)).fetchone()[0]
        assert bound == bind_claim("tok_123", token) and same == token
        for value in ("prod", "", "ünïcode €", 42, 1.5, True, [1, "a"]):
            got = db.execute("SELECT cryo._digest(%s)", (Jsonb(value),)).fetchone()[0]
            assert got == digest_part(value), value
            assert json.dumps(value) not in got or value == ""
        assert db.execute("SELECT cryo._digest('null'::jsonb)").fetchone()[0] == ""
