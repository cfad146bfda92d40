"""The graph document's run-level trigger keys: if, cancel_on and on, checked at submit."""

from __future__ import annotations

from typing import Any

import pytest

from cryopg.graphs.document import GraphError, compile_graph

BASE: dict[str, Any] = {
    "version": "cryosleep-graph/v1",
    "nodes": [{"id": "a", "type": "shell", "config": {"run": "echo"}}],
}


def test_trigger_keys_land_clear_in_the_structure() -> None:
    got = compile_graph({**BASE, "if": "trigger.ref == 'refs/heads/main'",
                         "cancel_on": {"event": "pr.closed"},
                         "on": {"schedule": "*/5 * * * *", "webhook": ["push"],
                                "event": "order.created"}}).structure
    assert got["if"] == {"op": "==", "a": {"path": ["trigger", "ref"]},
                         "b": {"lit": "refs/heads/main"}}
    assert got["cancel_on"] == {"event": "pr.closed"}
    assert got["on"] == {"schedule": ["*/5 * * * *"], "webhook": ["push"],
                         "event": ["order.created"]}


@pytest.mark.parametrize("bad, said", [
    ({"if": "nodes.a.output"}, "no node 'a'"),
    ({"if": "run.id == 1"}, "reads trigger and input only"),
    ({"cancel_on": {"evt": "x"}}, "cancel_on"),
    ({"on": {"cron": "* * * * *"}}, "on: must be"),
    ({"on": {"event": ["bad name"]}}, "on.event"),
    ({"on": {"webhook": []}}, "on.webhook"),
])
def test_bad_trigger_keys_are_one_line(bad: dict[str, Any], said: str) -> None:
    with pytest.raises(GraphError) as exc:
        compile_graph({**BASE, **bad})
    assert said in str(exc.value) and "\n" not in str(exc.value)
