"""An approval node: waits in the database until enough Members answer its form.

Its policy -- how many different approvers (`approvers`), restricted to a project role
(`role`) or an OIDC group (`group`), and a `timeout` with the answer taken when it
passes (`on_timeout`, reject by default) -- is copied into the node's clear definition
(`approval`), where cryo.approve_node / reject_node read it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cryopg.graphs import schemas
from cryopg.graphs.checks import GraphError, need, seconds
from cryopg.graphs.nodes.base import NodeType, config_schema
from cryopg.graphs.nodes.wait import DURATION

if TYPE_CHECKING:
    from cryopg.engine import PlanRow
    from cryopg.graphs.turn import Turn

ROLES = ("viewer", "member", "admin", "owner")
POLICY_KEYS = ("approvers", "role", "group", "timeout", "on_timeout")

SCHEMA = config_schema(
    "Waits in the database until `approvers` different Members (default 1) approve, or one "
    "rejects; `role` or `group` restricts who may answer; after `timeout` the `on_timeout` "
    "answer (approve or reject, default reject) is taken. fields is the JSON Schema the "
    "answer must match; output the last answer plus approved_by.",
    {"fields": {"type": "object"},
     "approvers": {"type": "integer", "minimum": 1, "maximum": 100},
     "role": {"enum": list(ROLES)},
     "group": {"type": "string", "minLength": 1, "maxLength": 256},
     "timeout": DURATION,
     "on_timeout": {"enum": ["approve", "reject"]}},
    ("fields",))


def check(nid: str, c: dict[str, Any]) -> None:
    fields = need(nid, c, "fields")
    if not isinstance(fields, dict):
        raise GraphError(f"node {nid}: config.fields must be a JSON Schema object")
    schemas.check(fields, f"node {nid}: config.fields")
    policy(nid, c)


def policy(nid: str, c: dict[str, Any]) -> dict[str, Any]:
    """The clear policy the database enforces, checked: {approvers, role, group, timeout
    (seconds), on_timeout}, only the keys given."""
    out: dict[str, Any] = {}
    if "approvers" in c:
        n = c["approvers"]
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 100:
            raise GraphError(f"node {nid}: config.approvers must be an integer from 1 to 100")
        out["approvers"] = n
    if "role" in c:
        if c["role"] not in ROLES:
            raise GraphError(f"node {nid}: config.role must be one of {', '.join(ROLES)}")
        out["role"] = c["role"]
    if "group" in c:
        if not isinstance(c["group"], str) or not 0 < len(c["group"]) <= 256:
            raise GraphError(f"node {nid}: config.group must be a group name")
        out["group"] = c["group"]
    if "timeout" in c:
        out["timeout"] = seconds(c["timeout"], f"node {nid}: config.timeout")
    if "on_timeout" in c:
        if c["on_timeout"] not in ("approve", "reject"):
            raise GraphError(f"node {nid}: config.on_timeout must be approve or reject")
        if "timeout" not in c:
            raise GraphError(f"node {nid}: config.on_timeout needs a timeout")
        out["on_timeout"] = c["on_timeout"]
    return out


async def start(turn: Turn, p: PlanRow, c: dict[str, Any]) -> bool:
    """The instance waits in the database for its answers (cryo.approve_node), at most
    its timeout: a database timer, so no process waits with it."""
    from cryopg import engine

    assert p.node_id is not None and p.item is not None
    timeout = seconds(c["timeout"], "timeout") if "timeout" in c else None
    if timeout is not None:
        turn.timed = True
    await engine.graph_wait_item(turn.conn, turn.run_id, turn.token, p.node_id, p.item,
                                 "approval", None, timeout)
    return False


def timed_out(c: dict[str, Any]) -> tuple[bool, dict[str, Any] | None, str | None]:
    """What a timed-out approval comes to: (ok, output, error) by its on_timeout."""
    if c.get("on_timeout") == "approve":
        return True, {"approved": True, "timed_out": True, "approved_by": None}, None
    return False, None, "approval timed out: no answer in time (on_timeout: reject)"


NODE = NodeType("approval", SCHEMA["description"], SCHEMA, check, start)
