"""sql/functions/ reads in file order: a function calls functions of its own file or of
earlier ones. The calls below go the other way, each set off by an ending or a trigger,
and no new one may join them."""

from __future__ import annotations

import re

from cryopg.migrate import function_files

LATER = {
    ("_finalize", "_graph_cancel_nodes"),  # a cancelled graph run's nodes end with it
    ("_finalize", "_wake_parent"),  # a parent waiting on the run wakes
    ("_admit", "cancel_run"),  # cancel-running: the displaced holder is cancelled
    ("put_workflow", "_register_workflow_triggers"),  # a workflow's `on:` triggers
    ("_publish_event", "_on_event"),  # an event starts its handlers
    ("finish_and_claim_grants", "finish_runs"),  # an agent's finish and next claim in one
    ("_delete_runs", "log_objects_to_delete"),  # a collected run's moved log goes too
    ("_delete_runs", "_count_history_of"),  # its history is counted before it goes
}
DEFINE = re.compile(r"CREATE OR REPLACE (?:FUNCTION|VIEW) cryo\.(\w+)")


def test_calls_go_to_earlier_files() -> None:
    home: dict[str, int] = {}
    bodies: list[tuple[int, str, str]] = []
    for i, f in enumerate(function_files()):
        text = f.read_text()
        starts = [(m.start(), m.group(1)) for m in DEFINE.finditer(text)]
        for k, (at, name) in enumerate(starts):
            home.setdefault(name, i)
            end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
            bodies.append((i, name, text[at:end]))
    later = {(name, callee) for i, name, body in bodies
             for callee in re.findall(r"cryo\.(\w+)\s*\(", body)
             if home.get(callee, -1) > i}
    assert later == LATER
