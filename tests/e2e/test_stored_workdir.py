"""A stored workflow started from SQL runs where it was stored from (issue 24 item 8).

docs/graphs.md's order graph runs `./process-order.sh`: stored with `cryopg workflow put`
in the directory that holds the script, then started by an application with
`cryo.submit_run`, its shell node finds the script on the dev stack's agent."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg

from tests.e2e.helpers import wait_for

ORDER_GRAPH = {
    "version": "cryosleep-graph/v1",
    "output": {"$expr": "nodes.process.output"},
    "nodes": [
        {"id": "claim", "type": "state",
         "config": {"op": "add", "key": {"$template": "seen-{{ input.order_id }}"},
                    "value": True, "entity": "ledger"}},
        {"id": "process", "type": "shell", "if": "nodes.claim.output.claimed",
         "config": {"run": {"$template": "./process-order.sh {{ input.order_id }}"}}},
    ],
    "edges": [{"from": "claim", "to": "process"}],
}


def _status(dsn: str, run_id: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as db:
        return str(db.execute("SELECT status FROM cryo.runs WHERE id = %s",
                              (run_id,)).fetchone()[0])


def test_a_graph_stored_here_and_started_from_sql_runs_here(stack: Any) -> None:
    shop = stack.dir / "shop"  # not the dev stack's own directory: the put's one counts
    shop.mkdir()
    (shop / "order.json").write_text(json.dumps(ORDER_GRAPH))
    helper = shop / "process-order.sh"
    helper.write_text('#!/bin/sh\necho "processed $1" >> orders.log\n')
    helper.chmod(0o755)
    put = subprocess.run([sys.executable, "-m", "cryopg.cli.entry", "workflow", "put", "order",
                          "order.json"], cwd=shop, env=stack.env, capture_output=True, text=True,
                         timeout=60)
    assert put.returncode == 0, put.stderr
    got = stack.cli("workflow", "get", "order")
    assert got.returncode == 0 and f"workdir:   {shop}" in got.stdout, got

    dsn = stack.info["database_url"]
    with psycopg.connect(dsn) as app:  # the application's own transaction
        run_id = app.execute("SELECT cryo.submit_run(%s, %s, 'order',"
                             " '{\"order_id\": 42}'::jsonb)",
                             (stack.org, stack.project)).fetchone()[0]
    wait_for("the order run to end",
             lambda: _status(dsn, run_id) in ("succeeded", "failed", "cancelled"), timeout=60)
    assert _status(dsn, run_id) == "succeeded", stack.cli("logs", run_id).stdout
    assert (shop / "orders.log").read_text() == "processed 42\n"
