"""Durable state over HTTP: the in-run operations an agent calls
(`POST /api/v1/agent/runs/{run}/state/{op}`) and the read-only user routes
(`GET …/runs/{run}/state[/{key}]`, `GET …/entities/{entity}/state[/{key}]`)."""

from __future__ import annotations

from typing import Any

from tests.server.conftest import Server

MARKER = "SEALED-VALUE-5c1e"


def _call(op: str, key: str, ordinal: int = 0, **fields: Any) -> dict[str, Any]:
    """The fields of a durable state call (add, cas, incr) at its own path."""
    return {"key": key, "path": f"state.{op}/{key}/{ordinal}", "name": key,
            "ordinal": ordinal, **fields}


async def test_get_set_list_and_delete_in_a_run(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)

    async def op(verb: str, /, **fields: Any) -> Any:
        return (await srv.in_run(grant, f"state/{verb}", **fields)).ok()

    assert await op("get", key="greeting") == {"found": False, "value": None, "version": None}
    assert await op("set", key="greeting", value="hello world") == {"version": 1}
    assert await op("set", key="doc", value={"a": [1, 2]}) == {"version": 1}
    assert await op("set", key="doc", value=[]) == {"version": 2}
    assert await op("set", key="path/with/slash", value=MARKER) == {"version": 1}
    assert await op("set", key="n", value=41, entity="things") == {"version": 1}
    assert await op("get", key="doc") == {"found": True, "key": "doc", "value": [],
                                          "version": 2}
    listed = await op("list")
    assert [(c["key"], c["value"], c["version"]) for c in listed["cells"]] == [
        ("doc", [], 2), ("greeting", "hello world", 1), ("path/with/slash", MARKER, 1)]
    assert [c["key"] for c in (await op("list", entity="things"))["cells"]] == ["n"]
    assert await op("delete", key="doc") == {"deleted": True}
    assert await op("delete", key="doc") == {"deleted": False}
    assert (await op("get", key="doc"))["found"] is False
    # A cell created again continues its count, so no old version can match a cas.
    assert await op("set", key="doc", value=1) == {"version": 4}


async def test_add_cas_and_incr_are_memoized_per_call(srv: Server) -> None:
    first, second = await srv.submit(), await srv.submit()
    a, b = await srv.claim_run(first), await srv.claim_run(second)

    async def op(grant: dict[str, Any], verb: str, /, **fields: Any) -> Any:
        return (await srv.in_run(grant, f"state/{verb}", entity="ledger", **fields)).ok()

    won = await op(a, "add", **_call("add", "seen-o-17", value=first))
    assert won == {"claimed": True, "version": 1, "replayed": False}
    lost = await op(b, "add", **_call("add", "seen-o-17", value=second))
    assert lost == {"claimed": False, "version": 1, "replayed": False}
    # The same call asked again (its answer was lost) gets its first answer back.
    assert (await op(a, "add", **_call("add", "seen-o-17")))["claimed"] is True
    assert (await op(b, "add", **_call("add", "seen-o-17")))["claimed"] is False

    swapped = await op(a, "cas", **_call("cas", "seen-o-17", value="mine", expect=1))
    assert swapped == {"swapped": True, "version": 2, "replayed": False}
    stale = await op(b, "cas", **_call("cas", "seen-o-17", value="theirs", expect=1))
    assert stale["swapped"] is False
    assert (await op(a, "get", key="seen-o-17"))["value"] == "mine"

    assert await op(a, "incr", **_call("incr", "hits")) == {"value": 1, "version": 1,
                                                            "replayed": False}
    assert (await op(b, "incr", **_call("incr", "hits", by=-2.5)))["value"] == -1.5
    assert await op(a, "incr", **_call("incr", "hits")) == {"value": 1, "version": 1,
                                                            "replayed": True}
    assert (await op(a, "get", key="hits"))["value"] == -1.5  # the replay counted nothing


async def test_state_operations_refuse_bad_calls(srv: Server) -> None:
    grant = await srv.claim_run(await srv.submit())
    (await srv.in_run(grant, "state/set", key="greeting", value="hi")).ok()

    async def refused(verb: str, status: int, code: str, /, **fields: Any) -> str:
        return (await srv.in_run(grant, f"state/{verb}", **fields)).refused(status, code)

    message = await refused("incr", 409, "not_a_number", **_call("incr", "greeting"))
    assert "not a number" in message
    assert (await srv.in_run(grant, "state/get", key="greeting")).ok()["value"] == "hi"
    assert "reserved" in await refused("set", 400, "reserved_key", key="_cryo/x", value=1)
    await refused("set", 400, "invalid_argument", key="k" * 513, value=1)
    await refused("set", 400, "invalid_argument", key="a\tb", value=1)
    await refused("set", 400, "invalid_argument", key="k")  # no value
    await refused("set", 400, "invalid_argument", key="k", value=1, entity="no spaces")
    await refused("get", 400, "invalid_argument", key="")
    await refused("incr", 400, "invalid_argument", **_call("incr", "n", by="1"))
    await refused("cas", 400, "invalid_argument", **_call("cas", "greeting", value=1,
                                                          expect="1"))
    await refused("add", 400, "identity_mismatch", key="k", name="k", ordinal=0,
                  path="state.add/other/0")  # a path that is not this call's
    listed = (await srv.in_run(grant, "state/list")).ok()["cells"]
    assert [c["key"] for c in listed] == ["greeting"]


async def test_user_reads_of_run_and_entity_cells(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    for fields in ({"key": "greeting", "value": "hello world"},
                   {"key": "path/with/slash", "value": MARKER},
                   {"key": "n", "value": 39, "entity": "things"}):
        (await srv.in_run(grant, "state/set", **fields)).ok()
    await srv.finish(grant)

    one = (await srv.user("GET", f"/runs/{run_id}/state/greeting", role="viewer")).ok()
    assert {k: one[k] for k in ("key", "value", "version", "created_by_run")} == {
        "key": "greeting", "value": "hello world", "version": 1, "created_by_run": run_id}
    assert one["updated_at"]
    slash = (await srv.user("GET", f"/runs/{run_id}/state/path/with/slash")).ok()
    assert slash["value"] == MARKER
    cells = (await srv.user("GET", f"/runs/{run_id}/state", role="viewer")).ok()["cells"]
    assert [(c["key"], c["value"]) for c in cells] == [("greeting", "hello world"),
                                                      ("path/with/slash", MARKER)]
    entity = (await srv.user("GET", "/entities/things/state/n", role="member")).ok()
    assert (entity["value"], entity["version"], entity["created_by_run"]) == (39, 1, run_id)
    assert [c["value"] for c in (await srv.user("GET", "/entities/things/state")).ok()[
        "cells"]] == [39]

    # Entity cells are the project's, a Member's read; a Viewer sees only runs' cells.
    for path in ("/entities/things/state", "/entities/things/state/n"):
        (await srv.user("GET", path, role="viewer")).refused(403, "forbidden")
    assert "nope" in (await srv.user("GET", f"/runs/{run_id}/state/nope")).refused(
        404, "not_found")
    (await srv.user("GET", "/entities/things/state/nope")).refused(404, "not_found")
    (await srv.user("GET", "/runs/dev:default:run-0000000000000000/state")).refused(
        404, "run_not_found")
    (await srv.user("GET", f"/runs/{run_id.replace('dev:default', 'dev:other')}/state")).refused(
        404, "run_not_found")
    (await srv.user("GET", "/entities/bad%20name/state")).refused(400, "invalid_argument")


async def test_values_are_sealed_at_rest(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "state/set", key="secret", value=MARKER)).ok()
    async with await srv.connect() as dba:
        cur = await dba.execute(
            "SELECT value FROM cryo.state_get(cryo.state_scope('dev', 'default', %s, NULL), "
            "'secret')", (run_id,))
        row = await cur.fetchone()
        cur = await dba.execute("SELECT key, version, created_by_run FROM cryo.state_overview "
                                "WHERE scope_kind = 'run' AND NOT deleted")
        overview = await cur.fetchall()
    assert row is not None and MARKER.encode() not in bytes(row[0])
    assert overview == [("secret", 1, run_id)]  # identities and versions in the clear


async def test_a_cell_that_will_not_open_ends_the_run_unreadable(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "state/set", key="k", value="v")).ok()
    async with await srv.connect() as conn:  # the test plays an attacker on disk
        await conn.execute("UPDATE cryo.state_cells SET value = overlay(value placing "
                           "'\\xff'::bytea from length(value) - 3) WHERE run_id = %s", (run_id,))
    (await srv.in_run(grant, "state/get", key="k")).refused(500, "unreadable")
    run = await srv.show(run_id)
    assert run["status"] == "unreadable" and "unreadable" in run["error"]
    (await srv.in_run(grant, "state/set", key="k", value="w")).refused(409, "stale_claim")
