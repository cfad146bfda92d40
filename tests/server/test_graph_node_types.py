"""The node registry (cryopg/graphs/nodes/): one module per type with its config's JSON
Schema, served at GET /api/v1/graphs/node-types for the canvas editor, used by the
compiler (a key the schema does not list is refused), and held against docs/graphs.md's
node table."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema

from cryopg.graphs.document import NODE_TYPES
from cryopg.graphs.nodes import TYPES, node_types
from tests.server.conftest import Server

DOCS = Path(__file__).resolve().parents[2] / "docs" / "graphs.md"


async def test_node_types_are_served_with_their_schemas(srv: Server) -> None:
    got = (await srv.request("GET", "/api/v1/graphs/node-types", token=None)).ok()["node_types"]
    assert got == node_types()
    assert {t["type"] for t in got} == set(NODE_TYPES)
    for t in got:
        assert t["description"] and t["schema"]["type"] == "object"
        jsonschema.Draft202012Validator.check_schema(t["schema"])


def test_the_schemas_accept_literals_and_expressions() -> None:
    shell = jsonschema.Draft202012Validator(TYPES["shell"].schema)
    assert shell.is_valid({"run": "echo hi"})
    assert shell.is_valid({"run": {"$template": "echo {{ input.x }}"}})
    assert not shell.is_valid({"run": "x", "evn": {}})  # unknown keys refused
    assert not shell.is_valid({})


def test_the_docs_node_table_matches_the_registry() -> None:
    rows = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"^\| `(\w+)` \| (.*?) \|", line)
        if m and m.group(1) in NODE_TYPES:
            rows[m.group(1)] = m.group(2)
    assert set(rows) == set(TYPES), "docs/graphs.md's node table and the registry differ"
    for name, node in TYPES.items():
        named = set(re.findall(r"`(\w+)`", rows[name]))
        missing = node.keys - named
        assert not missing, f"docs/graphs.md: the {name} row does not name {sorted(missing)}"
