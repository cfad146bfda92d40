"""A stored workflow keeps the directory it was put from, and runs started by name get it
(issue 24 item 8): cryo.submit_run from SQL and a schedule's tick alike."""

from __future__ import annotations

from tests.server.conftest import Server
from tests.server.test_triggers import fire


async def _put(srv: Server, **fields: str) -> None:
    (await srv.user("PUT", "/workflows/order", {"source": "./process-order.sh\n",
                                                "filename": "order.sh", **fields})).ok()


async def test_submit_run_from_sql_runs_where_the_workflow_was_put(srv: Server) -> None:
    await _put(srv, workdir="/srv/shop")
    assert (await srv.user("GET", "/workflows/order")).ok()["workdir"] == "/srv/shop"
    async with await srv.connect() as conn:
        run_id = (await (await conn.execute(
            "SELECT cryo.submit_run('dev', 'default', 'order')")).fetchone())[0]
    grant = await srv.claim_run(run_id)
    assert grant["workdir"] == "/srv/shop"
    # Stored again without one (over HTTP, or from elsewhere): the new put decides.
    await _put(srv)
    assert (await srv.user("GET", "/workflows/order")).ok()["workdir"] is None


async def test_a_scheduled_run_gets_the_directory_too(srv: Server) -> None:
    await _put(srv, workdir="/srv/shop")
    (await srv.user("POST", "/schedules", {"name": "s", "workflow": "order",
                                           "every": "1m"})).ok(201)
    [run_id] = await fire(srv, later=61)
    assert (await srv.claim_run(run_id))["workdir"] == "/srv/shop"


async def test_a_relative_directory_is_refused(srv: Server) -> None:
    msg = (await srv.user("PUT", "/workflows/order", {
        "source": "true\n", "filename": "o.sh", "workdir": "shop"})).refused(400,
                                                                           "invalid_argument")
    assert "absolute path" in msg
    (await srv.user("GET", "/workflows/order")).refused(404, "not_found")
