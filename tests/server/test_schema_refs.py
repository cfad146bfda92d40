"""JSON Schemas users write are inert (cryopg/graphs/schemas.py): an approval's fields or
a graph's input_schema whose `$ref` leaves the document is refused at submit with a 400
naming the field, and nothing is fetched or read; a looping or broken reference, or one
to something that is no schema, is a 400 too, never a 500."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cryopg.graphs import schemas
from tests.server.conftest import Server
from tests.server.test_graphs import until

SECRET = "s3cr3t-schema-body"


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        body = json.dumps({"type": "string", "description": SECRET}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.3 serving a schema, and the paths it was asked for."""
    hits: list[str] = []
    handler = type("Handler", (_Handler,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.3", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.3:{httpd.server_address[1]}", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def _approval(fields: Any) -> str:
    return json.dumps({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "ok", "type": "approval", "config": {"fields": fields}}]})


def _with_input(schema: Any) -> str:
    return json.dumps({"version": "cryosleep-graph/v1", "input_schema": schema, "nodes": [
        {"id": "w", "type": "wait", "config": {"sleep": 1}}]})


async def _refused(srv: Server, doc: str, filename: str = "g.json") -> str:
    got = await srv.user("POST", "/runs", {"source": doc, "filename": filename})
    return got.refused(400, "invalid_argument")


async def test_a_ref_leaving_the_document_is_refused_and_never_fetched(
        srv: Server, schema_host: tuple[str, list[str]], tmp_path: Path) -> None:
    base, hits = schema_host
    secret_file = tmp_path / "secret.json"
    secret_file.write_text(json.dumps({"type": "string", "description": SECRET}))
    for ref in (f"{base}/x.json", f"{base}/redirect", secret_file.as_uri(), "other.json"):
        said = await _refused(srv, _approval({"type": "object", "properties": {
            "why": {"$ref": ref}}}))
        assert "node ok: config.fields" in said and "does not resolve" in said, said
        assert SECRET not in said
        said = await _refused(srv, _with_input({"type": "object", "$ref": ref}))
        assert said.startswith("g.json: input_schema: $ref") and SECRET not in said, said
    # A relative reference under an $id of the attacker's choosing is no way out either.
    said = await _refused(srv, _with_input({"type": "object", "$id": f"{base}/",
                                            "properties": {"a": {"$ref": "x.json"}}}))
    assert "does not resolve" in said
    yaml_doc = ("version: cryosleep/pipeline/v1\n"
                f"input_schema: {{type: object, $ref: '{base}/y.json'}}\n"
                "jobs:\n  a:\n    steps:\n      - run: echo hi\n")
    assert "input_schema" in await _refused(srv, yaml_doc, "p.yaml")
    put = await srv.user("PUT", "/workflows/inert", {"source": _with_input(
        {"type": "object", "$ref": f"{base}/z.json"}), "filename": "g.json"})
    assert "input_schema" in put.refused(400, "invalid_argument")
    assert hits == []


@pytest.mark.parametrize(("schema", "said"), [
    ({"type": "object", "$ref": "#"}, "loop"),
    ({"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]},
                                  "b": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/a"}]}},
      "properties": {"x": {"$ref": "#/$defs/a"}}}, "loop"),
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
    ({"type": "object", "properties": {"x": {"$ref": "#/required"}}, "required": ["x"]},
     "not a schema"),
    ({"type": "object", "properties": {"x": {"$ref": "#nowhere"}}}, "does not resolve"),
])
async def test_a_looping_or_broken_ref_is_a_400(srv: Server, schema: Any, said: str) -> None:
    for doc in (_approval(schema), _with_input(schema)):
        assert said in await _refused(srv, doc)


async def test_local_and_recursive_refs_still_work(srv: Server) -> None:
    tree = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["name"]}}, "properties": {"root": {"$ref": "#/$defs/node"}},
        "required": ["root"]}
    run_id = await srv.submit(_approval(tree), filename="g.json")
    await until(srv, run_id, lambda r: r["substate"] == "awaiting-approval")
    path = f"/runs/{run_id}/approvals/ok"
    bad = await srv.user("POST", path, {"root": {"name": "a", "kids": [{"kids": []}]}})
    assert "name" in bad.refused(400, "invalid_argument")
    good = {"root": {"name": "a", "kids": [{"name": "b", "kids": []}]}}
    assert (await srv.user("POST", path, good)).ok()["approved"]


def test_a_stored_schema_with_a_remote_ref_is_never_fetched_when_checked(
        schema_host: tuple[str, list[str]]) -> None:
    """A graph stored before these checks may hold such a schema: checking an answer
    against it says so, and still fetches nothing."""
    base, hits = schema_host
    said = schemas.first_error({"$ref": f"{base}/old.json"}, {"a": 1})
    assert said is not None and "does not resolve" in said
    assert "loop" in str(schemas.first_error({"$ref": "#"}, {}))
    assert hits == []
