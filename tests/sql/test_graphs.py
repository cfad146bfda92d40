"""The interpreter's SQL: expressions, stored graphs submitted from SQL, one driver per run."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg.types.json import Jsonb

from cryopg.graphs.document import compile_graph
from cryopg.graphs.expr import parse, parse_template

IDS = frozenset({"a", "wait-pr", "later"})
SCOPE = {"input": {"env": "prod", "n": 3, "tags": ["x", "y"], "empty": ""},
         "nodes": {"a": {"output": {"ok": True, "v": 2}, "status": "succeeded"},
                   "wait-pr": {"output": None, "status": "skipped"}},
         "run": {"id": "r1"}}


def ev(db: psycopg.Connection, text: str) -> object:
    return db.execute("SELECT cryo.eval_expression(%s, %s)",
                      (Jsonb(parse(text, IDS)), Jsonb(SCOPE))).fetchone()[0]


def test_expressions_evaluate_in_sql(db: psycopg.Connection) -> None:
    cases = {
        "input.env": "prod",
        "input.tags[1]": "y",
        "input.env == 'prod'": True,
        "input.env != \"prod\"": False,
        "input.n >= 3 and nodes.a.output.ok": True,
        "not nodes.a.output.ok or input.n < 1": False,
        "input.missing": None,
        "input.empty or input.n": True,
        "nodes.wait-pr.status == 'skipped'": True,
        "(input.n > 2) and not (input.env == 'dev')": True,
        "input.n < 'x'": False,  # a number and a string do not order
        "nodes.a.output.v == 2.0": True,
        # A node the scope leaves out has not started (the driver sends only the nodes
        # that have): its status reads as pending, its output as nothing.
        "nodes.later.status": "pending",
        "nodes.later.output": None,
        "nodes.later.status == 'pending' and not nodes.later.output": True,
    }
    for text, want in cases.items():
        assert ev(db, text) == want, text
    tpl = parse_template("seen-{{ input.env }}-{{ input.n }}-{{ nodes.a.output }}", IDS)
    got = db.execute("SELECT cryo.eval_expression(%s, %s)", (Jsonb(tpl), Jsonb(SCOPE))).fetchone()
    assert got[0] == 'seen-prod-3-{"v": 2, "ok": true}'


def test_a_stored_graph_runs_from_an_applications_transaction(db: psycopg.Connection) -> None:
    compiled = compile_graph({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1}}],
        "concurrency": "deploy-{{ input.env }}"})
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'g', 'g.json', NULL, '\\x00', %s)",
               (Jsonb(compiled.structure),))
    with db.transaction():
        run_id = db.execute("SELECT cryo.submit_run('dev', 'default', 'g', '{\"env\": \"eu\"}')"
                            ).fetchone()[0]
    row = db.execute("SELECT r.kind, q.required_caps, r.concurrency_group FROM cryo.runs r "
                     "JOIN cryo.queue q ON q.run_id = r.id WHERE r.id = %s", (run_id,)).fetchone()
    # The group is the text a script names (issue 39 item 5).
    assert row == ("graph", ["graph"], "deploy-eu")
    listed = db.execute("SELECT node_id, status FROM cryo.graph_nodes").fetchall()
    assert listed == [("a", "pending")]
    # Agents never take a graph run, whatever they advertise.
    assert db.execute("SELECT * FROM cryo.claim_job('dev', 'a', '{shell,polyglot}', 30)"
                      ).fetchall() == []


def test_one_run_is_driven_by_one_driver(session: Callable[[], psycopg.Connection]) -> None:
    a, b = session(), session()
    compiled = compile_graph({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "n", "type": "wait", "config": {"sleep": "1s"}}]})
    a.execute("SELECT cryo.submit_script('dev', 'default', 'g.json', NULL, '\\x00', "
              "p_graph => %s)", (Jsonb(compiled.structure),))
    with a.transaction(force_rollback=True):  # a driver that dies mid-turn
        got = a.execute("SELECT run_id FROM cryo.drive_graphs('d1', 5)").fetchall()
        assert len(got) == 1
        with b.transaction():  # a second driver finds nothing while the first holds it
            assert b.execute("SELECT run_id FROM cryo.drive_graphs('d2', 5)").fetchall() == []
    # The first driver died (rolled back): the run is pending again for anyone.
    assert b.execute("SELECT count(*) FROM cryo.drive_graphs('d2', 5)").fetchone() == (1,)


def test_a_driver_may_take_a_run_without_its_document(db: psycopg.Connection) -> None:
    # A driver that kept the document from an earlier turn need not take it across
    # again (its cost grows with the graph); read_graph gives it to one that has not.
    compiled = compile_graph({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "n", "type": "wait", "config": {"sleep": "1s"}}]})
    run_id = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                        " '\\x0102', p_graph => %s)", (Jsonb(compiled.structure),)).fetchone()[0]
    with db.transaction(force_rollback=True):
        got = db.execute("SELECT run_id, source, graph FROM cryo.drive_graphs('d', 1, false)"
                         ).fetchall()
        assert got == [(run_id, None, None)]
    with db.transaction(force_rollback=True):
        got = db.execute("SELECT run_id, source, graph FROM cryo.drive_graphs('d', 1)").fetchall()
        assert got == [(run_id, b"\x01\x02", compiled.structure)]
    assert db.execute("SELECT graph, source FROM cryo.read_graph(%s)", (run_id,)).fetchall() == [
        (compiled.structure, b"\x01\x02")]


def test_a_released_graph_claim_wakes_the_graph_drivers(
        session: Callable[[], psycopg.Connection]) -> None:
    """A graph run put back to pending (a lapsed driver claim) says so on cryo_graph, the
    channel graph drivers listen on, not only on the agents' cryo_work."""
    db, listener = session(), session()
    compiled = compile_graph({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "n", "type": "wait", "config": {"sleep": "1s"}}]})
    run_id = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                        " '\\x00', p_graph => %s)", (Jsonb(compiled.structure),)).fetchone()[0]
    assert db.execute("SELECT run_id FROM cryo.drive_graphs('d', 1)").fetchone() == (run_id,)
    listener.execute("LISTEN cryo_graph")
    listener.execute("LISTEN cryo_work")
    db.execute("SELECT cryo._release(ARRAY[%s], 'claim_expired')", (run_id,))
    heard = [n.channel for n in listener.notifies(timeout=0.5, stop_after=2)]
    assert heard == ["cryo_graph"]


@pytest.mark.parametrize("shared", [True, False], ids=["a-cell-twice", "distinct-cells"])
def test_a_graph_run_whole_in_its_submit_leaves_what_the_driver_leaves(
        db: psycopg.Connection, shared: bool) -> None:
    """cryo.submit_graph runs a graph of checked set/delete nodes at once (one statement
    for each kind of row; all sets in one write when no two nodes touch one cell); the
    same graph driven node by node through graph_plan leaves the same nodes, instances,
    cell versions and history, in the same order (by waves of the longest path from a
    root, then document order)."""
    def node(nid: str, op: str = "set", key: str | None = None) -> dict[str, object]:
        return {"id": nid, "type": "state",
                "config": {"op": op, "key": key or nid, **({"value": 1} if op == "set" else {})}}

    doc = {"version": "cryosleep-graph/v1",
           "nodes": [node("d"), node("b", key="same" if shared else "b"), node("e"), node("a"),
                     node("c", key="same" if shared else "c"),
                     node("f", op="delete", key="a" if shared else "gone")],
           "edges": [{"from": "b", "to": "d"}, {"from": "c", "to": "d"},
                     {"from": "a", "to": "b"}, {"from": "a", "to": "c"},
                     {"from": "d", "to": "f"}]}
    compiled = compile_graph(doc)
    calls = {n["id"]: {"op": n["config"]["op"], "key": n["config"]["key"], "entity": None,
                       "read": False, **({"value": "00"} if n["config"]["op"] == "set" else {})}
             for n in doc["nodes"]}

    def left(run_id: str) -> tuple[object, ...]:
        q = db.execute
        return (
            q("SELECT node_id, status, open_deps, output_clear, started_at IS NOT NULL"
              " FROM cryo.node_states WHERE run_id = %s ORDER BY node_id", (run_id,)).fetchall(),
            q("SELECT node_id, item, status, output_clear FROM cryo.node_instances"
              " WHERE run_id = %s ORDER BY node_id", (run_id,)).fetchall(),
            q("SELECT kind, key_scope, key_family, key_name, key_ordinal, attempt"
              " FROM cryo.history WHERE run_id = %s AND kind LIKE 'node%%' ORDER BY id",
              (run_id,)).fetchall(),
            q("SELECT key, version, value IS NULL FROM cryo.state_cells WHERE scope = %s"
              " ORDER BY key", (run_id,)).fetchall(),
            q("SELECT status FROM cryo.runs WHERE id = %s", (run_id,)).fetchone())

    batch = db.execute("SELECT run_id, status FROM cryo.submit_graph('dev', 'default', 'g.json',"
                       " NULL, '\\x00', NULL, NULL, false, NULL, NULL, NULL, %s, %s)",
                       (Jsonb(compiled.structure), Jsonb(calls))).fetchone()
    assert batch[1] == "succeeded"
    slow = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                      " '\\x00', p_graph => %s)", (Jsonb(compiled.structure),)).fetchone()[0]
    run, token = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 1)"
                            ).fetchone()
    assert run == slow
    with db.transaction():
        acts = [r[0] for r in db.execute(
            "SELECT action FROM cryo.graph_plan(%s, %s, '{}', %s, %s)",
            (slow, token, Jsonb({"nodes": {}, "run": {"id": slow}}), Jsonb(calls)))]
    assert acts.count("done") == 6 and acts[-1] == "settled"
    # The batch itself, by hand: it runs every node, and the plan after it has none left.
    third = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                       " '\\x00', p_graph => %s)", (Jsonb(compiled.structure),)).fetchone()[0]
    with db.transaction():
        run, token = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 1)"
                                ).fetchone()
        assert run == third
        assert db.execute("SELECT cryo._graph_state_batch(cryo._claimed_row(%s, %s),"
                          " cryo._graph_checked_calls(%s, %s))",
                          (third, token, third, Jsonb(calls))).fetchone() == (True,)
        acts = [r[0] for r in db.execute(
            "SELECT action FROM cryo.graph_plan(%s, %s, '{}', %s)",
            (third, token, Jsonb({"nodes": {}, "run": {"id": third}})))]
    assert acts == ["settled"]
    got, want = left(batch[0]), left(slow)
    assert got == want == left(third)
    order = [h[3] for h in got[2]]
    assert order == ["e", "a", "b", "c", "d", "f"]
    if shared:
        assert ("same", 2, False) in got[3] and ("a", 2, True) in got[3]
    else:
        assert got[3] == [(k, 1, False) for k in "abcde"]
        assert [i[3] for i in got[1]] == [{"version": 1}] * 5 + [{"deleted": False}]


def test_a_graph_its_submit_drives_wakes_no_driver(
        session: Callable[[], psycopg.Connection]) -> None:
    """cryo.submit_graph drives a constant graph in its own transaction, so the enqueue
    inside it sends no cryo_graph notify (the drivers would wake to find it ended); a graph
    left for the drivers still wakes them. Notifies arrive in commit order, so the marker
    sent after each submit bounds what that submit sent."""
    db, listener = session(), session()
    listener.execute("LISTEN cryo_graph")

    def heard_before_marker() -> list[str]:
        db.execute("SELECT pg_notify('cryo_graph', 'marker')")
        out: list[str] = []
        for n in listener.notifies(timeout=30):
            if n.payload == "marker":
                return out
            out.append(n.payload)
        raise AssertionError("the marker never came")

    doc = {"version": "cryosleep-graph/v1",
           "nodes": [{"id": "a", "type": "state", "config": {"op": "set", "key": "k", "value": 1}}]}
    compiled = compile_graph(doc)
    calls = {"a": {"op": "set", "key": "k", "entity": None, "read": False, "value": "00"}}
    status = db.execute("SELECT status FROM cryo.submit_graph('dev', 'default', 'g.json', NULL,"
                        " '\\x00', NULL, NULL, false, NULL, NULL, NULL, %s, %s)",
                        (Jsonb(compiled.structure), Jsonb(calls))).fetchone()[0]
    assert status == "succeeded"
    assert heard_before_marker() == []
    status = db.execute("SELECT status FROM cryo.submit_graph('dev', 'default', 'g.json', NULL,"
                        " '\\x00', NULL, NULL, false, NULL, NULL, NULL, %s)",
                        (Jsonb(compiled.structure),)).fetchone()[0]
    assert status == "pending"
    assert heard_before_marker() == [""]


def test_plan_asks_for_a_config_it_was_not_sent(db: psycopg.Connection) -> None:
    """The driver sends only the configs of the nodes that may start (sending them all
    made each call cost the graph's size): a ready node whose config is missing is asked
    for, not started with an empty one, and starts in the next call that brings it."""
    compiled = compile_graph({"version": "cryosleep-graph/v1", "nodes": [
        {"id": "a", "type": "shell", "config": {"run": "echo a"}},
        {"id": "b", "type": "shell", "config": {"run": "echo b"}}],
        "edges": [{"from": "a", "to": "b"}]})
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'g', 'g.json', NULL, '\\x00', %s)",
               (Jsonb(compiled.structure),))
    run_id = db.execute("SELECT cryo.submit_run('dev', 'default', 'g', NULL)").fetchone()[0]
    run, token = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 1)").fetchone()
    assert run == run_id
    configs = compiled.document["configs"]
    scope = {"input": None, "nodes": {}, "run": {"id": run_id}}

    def plan(sent: dict[str, object]) -> list[tuple[object, ...]]:
        return db.execute("SELECT action, node_id, config FROM cryo.graph_plan(%s, %s, %s, %s)",
                          (run_id, token, Jsonb(sent), Jsonb(scope))).fetchall()

    assert plan({}) == [("config", "a", None)]
    assert plan({"a": configs["a"]}) == [("start", "a", {"run": "echo a"})]
    assert plan({"a": configs["a"]}) == []  # under way: nothing more to start or ask for


def _read(db: psycopg.Connection, table: str) -> tuple[int, int]:
    """(rows this transaction read from `table` by index and by scan, scans of it)."""
    row = db.execute("SELECT coalesce(idx_tup_fetch, 0) + seq_tup_read, seq_scan"
                     " FROM pg_stat_xact_user_tables WHERE relid = %s::regclass",
                     (table,)).fetchone()
    return int(row[0]), int(row[1])


def test_a_turn_reads_by_key_however_much_of_the_run_has_ended(db: psycopg.Connection) -> None:
    """A turn's reads are keyed on a brand-new database too (where the planner knows
    nothing of the tables): drive_graphs looks its run up by id, and graph_state reads
    the nodes asked for and the instance in flight, not the 300 the run has ended and
    their job runs (merged in as plain joins, they made a turn cost the graph's size)."""
    db.execute("ANALYZE cryo.node_states")  # while empty: what a young table looks like
    n = 300
    doc = {"version": "cryosleep-graph/v1",
           "nodes": [*({"id": f"s{i}", "type": "state",
                        "config": {"op": "set", "key": f"k{i}", "value": 1}} for i in range(n)),
                     {"id": "last", "type": "shell", "config": {"run": "true"}}],
           "edges": [{"from": f"s{i}", "to": "last"} for i in range(n)]}
    compiled = compile_graph(doc)
    calls = {f"s{i}": {"op": "set", "key": f"k{i}", "entity": None, "read": False,
                       "value": "00"} for i in range(n)}
    run_id = db.execute("SELECT run_id FROM cryo.submit_script('dev', 'default', 'g.json', NULL,"
                        " '\\x00', p_graph => %s)", (Jsonb(compiled.structure),)).fetchone()[0]
    with db.transaction():
        run, token = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 1)"
                                ).fetchone()
        acts = [r[:2] for r in db.execute(
            "SELECT action, node_id FROM cryo.graph_plan(%s, %s, %s, %s, %s)",
            (run, token, Jsonb({"last": {"run": "true"}}),
             Jsonb({"nodes": {}, "run": {"id": run}}), Jsonb(calls)))]
        assert acts.count(("done", "s0")) == 1 and acts[-1] == ("start", "last"), acts[-3:]
        db.execute("SELECT cryo.graph_start_job(%s, %s, 'last', 0, 'n.sh', NULL, '\\x00', NULL,"
                   " '{shell}', NULL, NULL)", (run, token))
        db.execute("SELECT cryo.graph_settle(%s, %s, false)", (run, token))
    # The job ends as an agent's would: its finish wakes the graph run for a driver.
    job, job_token = db.execute("SELECT run_id, claim_token FROM cryo.claim_job('dev', 'a',"
                                " '{shell}', 30)").fetchone()
    db.execute("SELECT cryo.finish_run(%s, %s, 'succeeded', 0, NULL)", (job, job_token))
    with db.transaction():
        runs_before = _read(db, "cryo.runs")
        run, token = db.execute("SELECT run_id, claim_token FROM cryo.drive_graphs('d', 1, false)"
                                ).fetchone()
        assert run == run_id
        runs_after = _read(db, "cryo.runs")
        inst_before = _read(db, "cryo.node_instances")
        rows = db.execute("SELECT node_id, item_status, job_status FROM cryo.graph_state(%s, %s,"
                          " '{}')", (run, token)).fetchall()
        inst_after = _read(db, "cryo.node_instances")
        runs_end = _read(db, "cryo.runs")
        nodes_before = _read(db, "cryo.node_states")
        asked = db.execute("SELECT node_id, item_status FROM cryo.graph_state(%s, %s, '{s7}')",
                           (run, token)).fetchall()
        nodes_after = _read(db, "cryo.node_states")
        # Every node asked for, each by its key: a read of each, not of the run's 301 each.
        every = [f"s{i}" for i in range(n)]
        db.execute("SELECT count(*) FROM cryo.graph_state(%s, %s, %s, true)", (run, token, every))
        nodes_end = _read(db, "cryo.node_states")
    assert rows == [("last", "running", "succeeded")]
    assert runs_after[1] == runs_before[1]  # no scan of runs
    assert inst_after[0] - inst_before[0] <= 5  # the live instance, not the run's 301
    assert runs_end[0] - runs_after[0] <= 5  # its job run, not the run's
    assert asked == [("last", "running"), ("s7", "succeeded")]
    assert nodes_after[0] - nodes_before[0] <= 5  # the node asked for and the live one
    assert nodes_end[0] - nodes_after[0] <= 2 * n + 5
