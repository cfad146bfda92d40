"""One cell and one lock whatever the surface (issue 39 item 5): a concurrency group or a
state cell's key or entity a graph renders from its input is the text a script names, so
a graph's `seen-{{ input.id }}` is the cell a script writes as `seen-1042`, and a node's
`deploy-{{ input.env }}` the lock a script holds as `deploy-prod`. The input itself stays
sealed: only the names the user templated it into hold it (as a script's names do)."""

from __future__ import annotations

from tests.server.conftest import Server
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until

SECRET = "tok-9f8e7d6c5b4a"


async def _tables_holding(srv: Server, needle: str) -> list[str]:
    """Every cryo table with a row whose text shows `needle`."""
    found = []
    async with await srv.connect() as conn:
        tables = [r[0] for r in await (await conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'cryo' AND c.relkind = 'r'")).fetchall()]
        for t in tables:
            cur = await conn.execute(
                f"SELECT count(*) FROM cryo.{t} x WHERE x::text LIKE %s", (f"%{needle}%",))
            if (await cur.fetchone())[0]:
                found.append(t)
    return sorted(found)


async def test_a_graph_node_and_a_script_share_one_cell_and_one_lock(srv: Server) -> None:
    # A script holds the lock deploy-prod and writes the cell seen-1042 of entity ledger.
    script = await srv.submit(concurrency="deploy-prod")
    grant = await srv.claim_run(script)
    (await srv.in_run(grant, "state/set", key="seen-1042", entity="ledger",
                      value={"by": "script"})).ok()
    doc = graph([
        {"id": "read", "type": "state",
         "config": {"op": "get", "key": {"$template": "seen-{{ input.id }}"},
                    "entity": {"$expr": "input.entity"}}},
        {"id": "deploy", "type": "state", "concurrency": "deploy-{{ input.env }}",
         "config": {"op": "set", "key": {"$template": "seen-{{ input.id }}"},
                    "entity": "ledger", "value": {"by": "graph"}}},
    ], [("read", "deploy")])
    run_id = await submit_graph(srv, doc, input={"id": 1042, "env": "prod",
                                                 "entity": "ledger"})
    # The graph reads the script's cell, then waits for the script's lock.
    run = await until(srv, run_id, lambda r: r["substate"] == "awaiting-lease")
    assert nodes_of(run)["read"]["output"] == {"value": {"by": "script"}, "version": 1}
    assert nodes_of(run)["deploy"]["status"] == "waiting"
    await srv.finish(grant)
    run = await until(srv, run_id, ended)
    assert run["status"] == "succeeded" and nodes_of(run)["deploy"]["output"] == {"version": 2}
    async with await srv.connect() as conn:
        cells = await (await conn.execute(
            "SELECT entity, key, version FROM cryo.state_cells")).fetchall()
    assert cells == [("ledger", "seen-1042", 2)]  # one cell, written by both


async def test_a_graph_level_group_is_the_scripts_lock_and_input_stays_sealed(
        srv: Server) -> None:
    doc = graph([{"id": "hold", "type": "wait", "config": {"signal": "go"}}],
                concurrency="g-{{ input.secret }}")
    first = await submit_graph(srv, doc, input={"secret": SECRET, "other": "kept-sealed-77"})
    run = await until(srv, first, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    assert run["concurrency_group"] == "g-" + SECRET  # the name as written, as a script's
    script = await srv.submit(concurrency="g-" + SECRET)
    assert await srv.status(script) == "queued"  # behind the graph, in the same lock
    # The input is sealed; only the name templated from it holds its text.
    assert await _tables_holding(srv, "kept-sealed-77") == []
    assert await _tables_holding(srv, SECRET) == ["lease_waiters", "leases", "runs"]
    (await srv.user("POST", f"/runs/{first}/signal/go", {})).ok(201)
    await until(srv, first, ended)
    assert (await srv.claim_run(script))["run_id"] == script
