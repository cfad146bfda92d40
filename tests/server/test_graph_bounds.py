"""A graph document over the documented bound, or with an unknown config key, is a 400
with a one-line message naming what is wrong; nothing is stored."""

from __future__ import annotations

import json

from cryopg.graphs.document import MAX_NODES
from tests.server.conftest import Server


async def test_bounds_and_unknown_keys_are_clear_400s(srv: Server) -> None:
    big = {"version": "cryosleep-graph/v1",
           "nodes": [{"id": f"n{i}", "type": "wait", "config": {"sleep": 0}}
                     for i in range(MAX_NODES + 1)]}
    typo = {"version": "cryosleep-graph/v1",
            "nodes": [{"id": "a", "type": "shell", "config": {"run": "true", "evn": {}}}]}
    for doc, words in ((big, f"at most {MAX_NODES}"), (typo, "unknown key 'evn'")):
        reply = await srv.user("POST", "/runs", {"source": json.dumps(doc), "filename": "g.json"})
        message = reply.refused(400, "invalid_argument")
        assert words in message and "\n" not in message, message
    assert (await srv.user("GET", "/runs")).ok()["runs"] == []
