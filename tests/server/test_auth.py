"""Who may call what: tokens (missing, bogus, expired, revoked), the role every user route
needs, and tenants that cannot reach each other by any user route. Also what the app
answers outside its routes."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from tests.server.conftest import ROLES, Server

SUBMIT = {"source": "echo\n", "filename": "x.sh"}


def _user_routes(srv: Server) -> list[tuple[str, str]]:
    """Every user route the app has, from its own router (so new ones are covered)."""
    found = set()
    for route in srv.app.router.routes():
        path = route.resource.canonical if route.resource else ""
        if path.startswith("/api/v1/orgs/") and route.method != "HEAD":
            found.add((route.method, path))
    return sorted(found)


def _fill(path: str, org: str, project: str, run_id: str) -> str:
    path = path.replace("{org}", org).replace("{project}", project).replace("{run}", run_id)
    return re.sub(r"\{[^}]+\}", "x", path)


async def test_no_user_route_reaches_another_tenant(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)  # live, so a cancel or signal would show
    (await srv.in_run(grant, "state/set", key="x", value="v")).ok()
    (await srv.user("PUT", "/secrets/x", {"value": "v-value"})).ok(201)
    stranger = await srv.add_org("acme")
    async with await srv.connect() as conn:
        await conn.execute("SELECT cryo.ensure_project('dev', 'other', 'Other')")
    owner = srv.tokens["owner"]
    routes = _user_routes(srv)
    assert len(routes) >= 20, routes
    body = {**SUBMIT, "value": "v", "role": "viewer", "slug": "zz", "name": "n",
            "runs_seconds": 60}
    for method, path in routes:
        # acme's owner at dev's routes; dev's owner at acme's; dev's owner at a dev run
        # through another dev project. None succeeds, and none says more than 404.
        attempts = [(stranger, "dev", "default"), (owner, "acme", "web")]
        if "{project}" in path:
            attempts.append((owner, "dev", "nope"))
        if "{run}" in path:
            attempts.append((owner, "dev", "other"))
        for token, org, project in attempts:
            url = _fill(path, org, project, run_id)
            reply = await srv.request(method, url, None if method == "GET" else body,
                                      token=token)
            assert reply.status == 404, (method, url, reply.status, reply.text)
            assert reply.body["error"]["code"] in ("not_found", "run_not_found"), reply.text
    run = await srv.show(run_id)
    assert run["status"] == "running"  # nothing was cancelled
    assert [e["kind"] for e in run["history"]] == ["submitted"]  # nor signalled
    assert (await srv.user("GET", f"/runs/{run_id}/state/x")).ok()["version"] == 1
    assert [s["name"] for s in (await srv.user("GET", "/secrets")).ok()["secrets"]] == ["x"]
    assert (await srv.user("GET", "/retention")).ok()["runs_seconds"] == 90 * 86400
    assert len((await srv.org("GET", "/members")).ok()["members"]) == 4


async def test_each_user_route_needs_its_role(srv: Server) -> None:
    run_id, doomed = await srv.submit(), await srv.submit()
    (await srv.org("POST", "/projects", {"slug": "scratch"})).ok(201)
    org, scratch = "/api/v1/orgs/dev", "/api/v1/orgs/dev/projects/scratch"
    needs: list[tuple[str, str, Any, str]] = [
        ("GET", "/runs", None, "viewer"),
        ("GET", f"/runs/{run_id}", None, "viewer"),
        ("GET", f"/runs/{run_id}/logs", None, "viewer"),
        ("GET", f"/runs/{run_id}/state", None, "viewer"),
        ("GET", "/events", None, "viewer"),
        ("GET", "/retention", None, "viewer"),
        ("GET", f"{org}/members", None, "viewer"),
        ("POST", "/runs", SUBMIT, "member"),
        ("POST", f"/runs/{run_id}/signal/go", {}, "member"),
        ("POST", "/events/go", {}, "member"),
        ("PUT", "/workflows/w", SUBMIT, "member"),
        ("GET", "/entities/e/state", None, "member"),
        ("POST", f"/runs/{doomed}/cancel", {}, "member"),
        ("PUT", "/secrets/K", {"value": "x-value"}, "admin"),
        ("GET", "/secrets", None, "admin"),
        ("DELETE", "/secrets/K", None, "admin"),
        ("PUT", "/retention", {"runs_seconds": 86400}, "admin"),
        ("PUT", f"{org}/members/zed", {"role": "viewer"}, "admin"),
        ("DELETE", f"{org}/members/zed", None, "admin"),
        ("POST", f"{org}/projects", {"slug": "p2"}, "admin"),
        ("PATCH", f"{org}/projects/default", {"name": "D"}, "admin"),
        ("DELETE", scratch, None, "owner"),
    ]
    lowest_first = list(reversed(ROLES))  # viewer, member, admin, owner
    for method, path, body, need in needs:
        allowed = lowest_first.index(need)
        for role in lowest_first[:allowed]:
            reply = await srv.user(method, path, body, role=role)
            assert reply.status == 403, (method, path, role, reply.text)
            reply.refused(403, "forbidden")
        reply = await srv.user(method, path, body, role=need)
        assert 200 <= reply.status < 300, (method, path, need, reply.text)
    assert await srv.status(doomed) == "cancelled"


async def test_missing_bogus_and_wrong_kind_tokens_get_401(srv: Server) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "},
                    {"Authorization": "Bearer cryo_u_bogus"},
                    {"Authorization": f"Bearer {srv.tokens['agent']}"}):
        async with srv.client.get("/api/v1/orgs/dev/projects/default/runs",
                                  headers=headers) as resp:
            assert resp.status == 401, headers
            body = await resp.json()
        assert body["error"]["code"] == "unauthorized"


async def test_expired_and_revoked_tokens_get_401(srv: Server) -> None:
    now = dt.datetime.now(dt.UTC)
    lasting = await srv.make_token("member", expires_at=now + dt.timedelta(hours=1))
    assert (await srv.user("GET", "/runs", token=lasting)).status == 200
    # Made an hour ago to expire half an hour ago: the clock has passed it.
    lapsed = await srv.make_token("member", expires_at=now - dt.timedelta(minutes=30),
                                  fake_now=now - dt.timedelta(hours=1))
    message = (await srv.user("GET", "/runs", token=lapsed)).refused(401, "unauthorized")
    assert "expired" in message

    made = await srv.cli("token", "create", "--kind", "user", "--member", "kim",
                         "--role", "viewer")
    assert made.returncode == 0, made.stderr
    kept = made.stdout.strip()
    assert (await srv.user("GET", "/runs", token=kept)).status == 200
    (await srv.user("POST", "/runs", SUBMIT, token=kept)).refused(403, "forbidden")
    listed = (await srv.cli("token", "list")).stdout
    tok_id = next(ln.split("\t")[0] for ln in listed.splitlines() if "\tkim\t" in ln)
    revoked = await srv.cli("token", "revoke", tok_id)
    assert revoked.stdout == f"revoked {tok_id}\n", revoked.stderr
    (await srv.user("GET", "/runs", token=kept)).refused(401, "unauthorized")
    kim = next(ln for ln in (await srv.cli("token", "list")).stdout.splitlines()
               if ln.startswith(tok_id))
    assert kim.endswith("\trevoked")
    assert (await srv.cli("token", "revoke", tok_id)).stdout == f"{tok_id} was already revoked\n"

    agent = await srv.make_token(kind="agent")
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT id FROM cryo.list_tokens('dev') ORDER BY created_at "
                                 "DESC LIMIT 1")
        row = await cur.fetchone()
        assert row is not None
        await conn.execute("SELECT cryo.revoke_token('dev', %s)", (row[0],))
    (await srv.agent("/claim", {"agent_id": "a", "wait": 0}, token=agent)).refused(
        401, "unauthorized")


async def test_health_and_what_is_not_a_route(srv: Server) -> None:
    assert (await srv.request("GET", "/api/v1/health", token=None)).ok()["ok"] is True
    (await srv.request("GET", "/api/v1/nothing", token=None)).refused(404, "http")
    (await srv.user("DELETE", "/runs")).refused(405, "http")
