"""Input never lands in clear in a name the engine stores in the clear (issue 20):
a concurrency group or a state cell's key or entity rendered from a graph's input keeps
its literal text and holds a digest where the input was, so equal inputs still meet in
one group or cell."""

from __future__ import annotations

from cryopg.graphs.document import digest_part
from tests.server.conftest import Server
from tests.server.test_graphs import graph, nodes_of, submit_graph, until

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
    return found


DOC = graph([
    {"id": "count", "type": "state", "concurrency": "node-{{ input.secret }}",
     "config": {"op": "incr", "key": {"$template": "seen-{{ input.secret }}"},
                "entity": {"$expr": "input.secret"}}},
    {"id": "hold", "type": "wait", "config": {"signal": "go"}},
], [("count", "hold")], concurrency="g-{{ input.secret }}")


async def test_a_group_and_a_cell_rendered_from_input_hold_no_input(srv: Server) -> None:
    first = await submit_graph(srv, DOC, input={"secret": SECRET})
    run = await until(srv, first, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    assert nodes_of(run)["count"]["output"]["value"] == 1
    assert run["concurrency_group"] == "g-" + digest_part(SECRET)  # literal text readable
    # The same input meets the same group: the second run queues behind the first.
    second = await submit_graph(srv, DOC, input={"secret": SECRET})
    assert (await srv.show(second))["status"] == "queued"
    other = await submit_graph(srv, DOC, input={"secret": "another"})
    await until(srv, other, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    async with await srv.connect() as conn:
        cells = await (await conn.execute(
            "SELECT entity, key FROM cryo.state_cells ORDER BY key")).fetchall()
    assert (digest_part(SECRET), "seen-" + digest_part(SECRET)) in cells
    assert len(cells) == 2  # one cell per input
    assert await _tables_holding(srv, SECRET) == []
    assert await _tables_holding(srv, "another") == []
    (await srv.user("POST", f"/runs/{first}/signal/go", {})).ok(201)
    # The second run, same input, counts in the same cell.
    run = await until(srv, second, lambda r: nodes_of(r)["hold"]["status"] == "waiting")
    assert nodes_of(run)["count"]["output"]["value"] == 2
    assert await _tables_holding(srv, SECRET) == []
