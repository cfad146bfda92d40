"""A state node: a durable cell operation, in the database, within the driver's turn."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs.checks import STATE_OPS, WRITE_OPS, GraphError, need, string_or_expr
from cryopg.graphs.nodes.base import NodeType, config_schema, dyn

if TYPE_CHECKING:
    from cryopg.engine import PlanRow
    from cryopg.graphs.turn import Turn

SCHEMA = config_schema(
    "A durable cell operation, in the database: get {value, version}, set {version}, "
    "delete {deleted}, add {claimed}, cas {swapped}, incr {value, version}.",
    {"op": {"enum": sorted(STATE_OPS)},
     "key": dyn({"type": "string", "minLength": 1}),
     "entity": dyn({"type": "string"}),
     "value": {},
     "expected": dyn({"type": "integer"}),
     "by": dyn({"type": "number"})},
    ("op", "key"))


def check(nid: str, c: dict[str, Any]) -> None:
    op = need(nid, c, "op")
    if op not in STATE_OPS:
        raise GraphError(f"node {nid}: config.op must be one of {', '.join(sorted(STATE_OPS))}")
    key = need(nid, c, "key")
    string_or_expr(nid, c, "key")
    string_or_expr(nid, c, "entity")
    if op in ("add", "cas") and "entity" not in c:
        raise GraphError(f"node {nid}: config.entity is required for {op} (a run-scoped "
                         "cell has nobody to race; give the shared entity)")
    if op in WRITE_OPS and isinstance(key, str) and key.startswith("_cryo/"):
        raise GraphError(f"node {nid}: config.key {key!r} is reserved for the engine")
    if op in ("set", "cas"):
        need(nid, c, "value")
    if op == "cas":
        need(nid, c, "expected")
    if op == "incr" and "by" in c and not isinstance(c["by"], (int, float, dict)):
        raise GraphError(f"node {nid}: config.by must be a number")


# Outputs that hold no user data, kept in the clear (the database writes and reads them).
CLEAR_OPS = frozenset({"set", "delete", "add", "cas"})


def _computed(value: Any) -> bool:
    """Whether a compiled config value holds an expression anywhere."""
    if isinstance(value, dict):
        return "$expr" in value or "$template" in value or any(map(_computed, value.values()))
    if isinstance(value, list):
        return any(map(_computed, value))
    return False


def constant_call(c: dict[str, Any], sealer: Any) -> dict[str, Any] | None:
    """The call SQL runs for a constant state node (no expression in its config), with
    the value it writes sealed (as hex): cryo.graph_plan runs it in the database. None for
    a node that stays on the driver's path: a get or incr (their outputs hold user data),
    or one with an expression to render."""
    op = c.get("op")
    if op not in CLEAR_OPS or _computed(c):
        return None
    key, entity = c.get("key"), c.get("entity")
    if not isinstance(key, str) or (entity is not None and not isinstance(entity, str)):
        return None
    call: dict[str, Any] = {"op": op, "key": key, "entity": entity}
    if op == "cas":
        expected = c.get("expected")
        if not isinstance(expected, int) or isinstance(expected, bool):
            return None  # the driver's path says why it cannot run
        call["expected"] = expected
    if op in ("set", "add", "cas"):
        call["value"] = sealer.seal_json(c.get("value", True) if op == "add"
                                         else c.get("value")).hex()
    return call


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """A state node the database did not run itself (a get, an incr, a computed config):
    the call here, in the turn's transaction, and its output recorded at once."""
    assert p.node_id is not None and p.item is not None
    out = await _call(turn, p, c)
    await turn.record(p.node_id, p.item, True, out, clear=c.get("op") in CLEAR_OPS)
    return True


async def _call(turn: Turn, p: PlanRow, c: dict[str, Any]) -> Any:
    from cryopg import engine
    from cryopg.state_incr import incr_in

    op, key = c["op"], str(c["key"])
    entity = None if c.get("entity") is None else str(c["entity"])
    conn, run, tok, seal = turn.conn, turn.run_id, turn.token, turn.sealer
    name = f"node:{p.node_id}#{p.item}#{p.attempt}"
    if op == "get":
        # The store, read in the turn's transaction, already holds every write this graph
        # made (and no cell it deleted): a node never runs again once recorded. What the
        # graph may read, SQL decides from its trust (docs/security/trust.md).
        cell = await engine.run_state_get(conn, run, tok, entity, key)
        return {"value": seal.open_json(cell.value), "version": cell.version} if cell else {
            "value": None, "version": None}
    if key.startswith("_cryo/"):
        raise ValueError(f"key {key!r} is reserved for the engine")
    if op == "set":
        value = seal.seal_json(c.get("value"))
        return {"version": await engine.state_set(conn, run, tok, entity, key, value)}
    if op == "delete":
        return {"deleted": await engine.state_delete(conn, run, tok, entity, key)}
    if op == "add":
        got = await engine.state_add(conn, run, tok, entity, key,
                                     seal.seal_json(c.get("value", True)), name=name, ordinal=0)
        return {"claimed": got.won}
    if op == "cas":
        expected = c.get("expected")
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise ValueError(f"cas needs an integer expected version, not {expected!r}")
        got = await engine.state_cas(conn, run, tok, entity, key, seal.seal_json(c.get("value")),
                                     expected, name=name, ordinal=0)
        return {"swapped": got.won}
    by = c.get("by", 1)
    if not isinstance(by, (int, float)) or isinstance(by, bool):
        raise ValueError(f"incr needs a number to add, not {by!r}")
    got = await incr_in(conn, seal, run, tok, entity, key, by, {"name": name, "ordinal": 0})
    return {"value": got.get("value"), "version": got.get("version")}


NODE = NodeType("state", SCHEMA["description"], SCHEMA, check, start)


def constant_calls(graph: dict[str, Any], configs: dict[str, Any], sealer: Any,
                   wanted: set[str] | None) -> dict[str, Any]:
    """The calls SQL runs for every constant state node of a graph (not under a fan-out),
    each with `read`: whether an expression reads the node (`wanted`, None for all)."""
    calls: dict[str, Any] = {}
    for n in graph.get("nodes", []):
        # (A loop or stop_if is decided in a turn's rounds: such a node runs there too.)
        if n.get("type") == "state" and "fan_out" not in n and not n.keys() & {"loop", "stop_if"}:
            call = constant_call(configs.get(n["id"], {}), sealer)
            if call is not None:
                calls[n["id"]] = {**call, "read": wanted is None or n["id"] in wanted}
    return calls
