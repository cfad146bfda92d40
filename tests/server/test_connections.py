"""Connections over the API and the CLI, and what a connector node's job is handed: the
connection's URL, headers and scheme in its input, its secret's value only in the claim
grant of the connector agent (and only that secret), never to an untrusted run, whose
node fails at start with the reason."""

from __future__ import annotations

import json
from typing import Any

from tests.server.conftest import Server
from tests.server.test_graph_connectors import _claim_connector
from tests.server.test_graphs import ended, graph, nodes_of, submit_graph, until

TOKEN = "ghp-connector-token-very-secret"
GH = {"name": "gh", "base_url": "https://api.example.test/v3", "auth": "bearer",
      "secret": "GH_TOKEN", "headers": {"Accept": "application/vnd.github+json"}}


def _doc(**config: Any) -> str:
    return graph([{"id": "call", "type": "connector", "config": {
        "connection": "gh", "method": "POST", "path": "/repos/acme/app/issues",
        "query": {"per_page": 5, "state": "open"}, "body": {"title": "hi"}, **config}}])


async def _setup(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/GH_TOKEN", {"value": TOKEN})).ok(201)
    (await srv.user("PUT", "/secrets/OTHER", {"value": "other-value-123"})).ok(201)
    (await srv.user("POST", "/connections", GH, role="admin")).ok(201)


async def test_connections_over_the_api_and_their_roles(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/GH_TOKEN", {"value": TOKEN})).ok(201)
    (await srv.user("POST", "/connections", GH, role="member")).refused(403, "forbidden")
    made = (await srv.user("POST", "/connections", GH, role="admin")).ok(201)
    assert made["created"] is True and made["secret"] == "GH_TOKEN"
    (await srv.user("POST", "/connections", GH)).refused(409, "connection_exists")
    again = (await srv.user("POST", "/connections", {**GH, "replace": True})).ok(200)
    assert again["created"] is False
    listed = (await srv.user("GET", "/connections", role="viewer")).ok()["connections"]
    assert [c["name"] for c in listed] == ["gh"] and TOKEN not in json.dumps(listed)
    shown = (await srv.user("GET", "/connections/gh", role="viewer")).ok()
    assert shown["base_url"] == GH["base_url"] and shown["headers"] == GH["headers"]
    (await srv.user("GET", "/connections/nope")).refused(404, "connection_not_found")
    (await srv.user("POST", "/connections", {**GH, "name": "x", "secret": "NOPE"})
     ).refused(409, "connection_secret_missing")
    for bad in ({**GH, "base_url": "file:///etc/passwd"}, {**GH, "auth": "magic"},
                {**GH, "headers": ["x"]}, {**GH, "replace": "yes"}, {"name": "x"}):
        (await srv.user("POST", "/connections", {**bad, "name": "y"} if "base_url" in bad
                        else bad)).refused(400, "invalid_argument")
    (await srv.user("DELETE", "/connections/gh", role="member")).refused(403, "forbidden")
    (await srv.user("DELETE", "/connections/gh", role="admin")).ok()
    (await srv.user("DELETE", "/connections/gh")).refused(404, "connection_not_found")


async def test_the_connector_job_gets_the_connections_secret_and_nothing_else(
        srv: Server) -> None:
    await _setup(srv)
    job = await _claim_connector(srv, await submit_graph(srv, _doc()))
    assert job["secrets"] == {"GH_TOKEN": TOKEN}  # not OTHER
    assert TOKEN not in json.dumps(job["input"]) and TOKEN not in job["source"]
    assert job["input"]["url"] == ("https://api.example.test/v3/repos/acme/app/issues"
                                   "?per_page=5&state=open")
    assert job["input"]["method"] == "POST" and job["input"]["body"] == {"title": "hi"}
    assert job["input"]["headers"] == GH["headers"]
    assert job["input"]["auth"] == {"connection": "gh", "scheme": "bearer",
                                    "secret": "GH_TOKEN", "username": None, "header": None}


async def test_an_untrusted_runs_connector_node_fails_at_start(srv: Server) -> None:
    await _setup(srv)
    run_id = await submit_graph(srv, _doc(), untrusted=True)
    run = await until(srv, run_id, ended)
    node = nodes_of(run)["call"]
    assert run["status"] == "failed" and node["status"] == "failed"
    assert "withheld from an untrusted run" in json.dumps(node), node
    assert not node.get("runs")  # no job was made: nothing could carry the credential


async def test_a_missing_connection_or_a_path_out_of_it_fails_the_node(srv: Server) -> None:
    await _setup(srv)
    for doc, why in ((_doc(connection="nosuch"), "no connection nosuch"),
                     (_doc(path={"$expr": "'/../admin'"}), "path below the connection")):
        run = await until(srv, await submit_graph(srv, doc), ended)
        assert why in json.dumps(nodes_of(run)["call"]), nodes_of(run)["call"]


async def test_the_cli_manages_connections(srv: Server) -> None:
    (await srv.user("PUT", "/secrets/GH_TOKEN", {"value": TOKEN})).ok(201)
    made = await srv.cli("connection", "create", "gh", "--base-url", "https://api.example.test",
                         "--auth", "bearer", "--secret", "GH_TOKEN",
                         "--default-header", "Accept: application/json")
    assert made.returncode == 0 and "created connection gh" in made.stdout, made.stderr
    listed = await srv.cli("connection", "list")
    assert listed.stdout.split() == ["gh", "bearer", "(GH_TOKEN)", "https://api.example.test"]
    shown = json.loads((await srv.cli("connection", "show", "gh")).stdout)
    assert shown["headers"] == {"Accept": "application/json"}
    dup = await srv.cli("connection", "create", "gh", "--base-url", "https://x.example")
    assert dup.returncode != 0 and len(dup.stderr.strip().splitlines()) == 1
    assert "already exists" in dup.stderr
    bad = await srv.cli("connection", "create", "x", "--base-url", "https://x.example",
                        "--default-header", "nocolon")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    gone = await srv.cli("connection", "delete", "gh")
    assert gone.returncode == 0 and "deleted connection gh" in gone.stdout


PIPELINE = """version: cryosleep/pipeline/v1
jobs:
  call:
    connector: {connection: %s, method: POST, path: /repos/acme/app/issues,
                query: {per_page: 5, state: open}, body: {title: hi}}
"""


async def test_a_pipelines_connector_job_gets_only_its_connections_secret(
        srv: Server) -> None:
    await _setup(srv)
    run_id = await srv.submit(PIPELINE % "gh", filename="ci.yaml")
    job = await _claim_connector(srv, run_id)
    assert job["secrets"] == {"GH_TOKEN": TOKEN}  # not OTHER
    assert TOKEN not in json.dumps(job["input"]) and TOKEN not in job["source"]
    assert job["input"]["url"] == ("https://api.example.test/v3/repos/acme/app/issues"
                                   "?per_page=5&state=open")
    assert job["input"]["auth"]["secret"] == "GH_TOKEN"


async def test_a_pipelines_bad_connection_name_is_a_one_line_400(srv: Server) -> None:
    for method, path in (("POST", "/runs"), ("PUT", "/workflows/ci")):
        reply = await srv.user(method, path, {"source": PIPELINE % "'GH token'",
                                              "filename": "ci.yaml"})
        got = reply.refused(400, "invalid_argument")
        assert got.startswith("ci.yaml: job call: connector.connection must be"), got
        assert "\n" not in got
    # A well-formed name of no connection fails the job at its start, as the node does.
    run = await until(srv, await srv.submit(PIPELINE % "nosuch", filename="ci.yaml"), ended)
    assert "no connection nosuch" in json.dumps(nodes_of(run)["call"])
