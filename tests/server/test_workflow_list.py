"""Listing and deleting stored workflows, and listing an org's projects, over HTTP."""

from __future__ import annotations

import json

from tests.server.conftest import Server


def _graph(**top: object) -> str:
    return json.dumps({"version": "cryosleep-graph/v1",
                       "nodes": [{"id": "a", "type": "wait", "config": {"signal": "go"}}],
                       **top})


async def test_workflows_are_listed_with_what_starts_them(srv: Server) -> None:
    assert (await srv.user("GET", "/workflows", role="viewer")).ok() == {"workflows": []}
    (await srv.user("PUT", "/workflows/nightly", {"source": "echo hi\n",
                                                  "filename": "report.sh"})).ok()
    (await srv.user("PUT", "/workflows/orders", {
        "source": _graph(on={"schedule": ["0 2 * * *"], "event": ["order.created"]}),
        "filename": "orders.json"})).ok()
    (await srv.user("POST", "/schedules", {"name": "poll", "workflow": "nightly",
                                           "every": "10m"})).ok(201)
    got = (await srv.user("GET", "/workflows", role="viewer")).ok()["workflows"]
    assert [(w["name"], w["kind"], w["filename"], w["schedules"], w["handlers"], w["webhooks"])
            for w in got] == [("nightly", "script", "report.sh", 1, 0, 0),
                              ("orders", "graph", "orders.json", 1, 1, 0)]


async def test_deleting_a_workflow_takes_its_own_triggers_and_refuses_while_others_start_it(
        srv: Server) -> None:
    (await srv.user("PUT", "/workflows/orders", {
        "source": _graph(on={"schedule": ["0 2 * * *"], "event": ["order.created"]}),
        "filename": "orders.json"})).ok()
    (await srv.user("POST", "/handlers", {"name": "bill", "event": "x",
                                          "workflow": "orders"})).ok(201)
    (await srv.user("DELETE", "/workflows/orders", role="viewer")).refused(403, "forbidden")
    message = (await srv.user("DELETE", "/workflows/orders")).refused(409, "in_use")
    assert message == "workflow orders is started by handler bill; delete those first"
    (await srv.user("DELETE", "/handlers/bill")).ok()
    (await srv.user("DELETE", "/workflows/orders", role="member")).ok()
    assert (await srv.user("GET", "/workflows")).ok() == {"workflows": []}
    assert (await srv.user("GET", "/schedules")).ok()["schedules"] == []  # its on: schedule
    assert (await srv.user("GET", "/handlers")).ok()["handlers"] == []
    (await srv.user("GET", "/workflows/orders")).refused(404, "not_found")
    (await srv.user("DELETE", "/workflows/orders")).refused(404, "not_found")


async def test_an_orgs_projects_are_listed(srv: Server) -> None:
    (await srv.org("POST", "/projects", {"slug": "web", "name": "Web shop"}, role="admin")).ok(201)
    got = (await srv.org("GET", "/projects", role="viewer")).ok()["projects"]
    assert [(p["slug"], p["name"]) for p in got][-1] == ("web", "Web shop")
    assert "default" in [p["slug"] for p in got]
