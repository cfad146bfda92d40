"""What an org's Admins and Owners do over HTTP (and through the CLI commands that call
it): members and roles, projects (create, rename, delete with all they hold), secrets
and retention."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.server.conftest import AGENT_CAPS, Server

SECRET = "s3cr3t-VALUE-0042"


async def test_members_are_listed_added_changed_and_removed(srv: Server) -> None:
    listed = (await srv.org("GET", "/members", role="viewer")).ok()["members"]
    assert [(m["login"], m["role"]) for m in listed] == [
        ("admin", "admin"), ("dev", "owner"), ("member", "member"), ("viewer", "viewer")]
    assert (await srv.org("PUT", "/members/ann", {"role": "member"}, role="admin")).ok() == {
        "login": "ann", "role": "member"}
    (await srv.org("PUT", "/members/ann", {"role": "viewer"}, role="admin")).ok()
    for body, role, status, code in (
            ({"role": "admin"}, "member", 403, "forbidden"),  # a Member grants nothing
            ({"role": "owner"}, "admin", 403, "forbidden"),  # only an Owner makes an Owner
            ({"role": "king"}, "admin", 400, "invalid_argument"),
            ({}, "admin", 400, "invalid_argument")):
        (await srv.org("PUT", "/members/ann", body, role=role)).refused(status, code)
    (await srv.org("PUT", "/members/bad%20login", {"role": "viewer"})).refused(
        400, "invalid_argument")
    (await srv.org("PUT", "/members/dev", {"role": "admin"}, role="admin")).refused(
        403, "forbidden")  # nor demotes one
    message = (await srv.org("PUT", "/members/dev", {"role": "admin"})).refused(
        400, "invalid_argument")
    assert "last owner" in message
    roles = {m["login"]: m["role"] for m in (await srv.org("GET", "/members")).ok()["members"]}
    assert (roles["ann"], roles["dev"]) == ("viewer", "owner")

    leaving = await srv.make_token("member", login="leaving")
    assert (await srv.user("GET", "/runs", token=leaving)).status == 200
    (await srv.org("DELETE", "/members/leaving", role="member")).refused(403, "forbidden")
    assert (await srv.org("DELETE", "/members/leaving", role="admin")).ok() == {}
    (await srv.user("GET", "/runs", token=leaving)).refused(401, "unauthorized")  # tokens go too
    (await srv.org("DELETE", "/members/leaving", role="admin")).refused(404, "not_found")
    (await srv.org("DELETE", "/members/dev")).refused(400, "invalid_argument")  # last owner


async def test_projects_are_created_and_renamed_but_keep_their_slug(srv: Server) -> None:
    made = (await srv.org("POST", "/projects", {"slug": "web", "name": "Web"}, role="admin"))
    assert made.ok(201) == {"slug": "web", "created": True}
    assert (await srv.org("POST", "/projects", {"slug": "web"})).ok(200) == {
        "slug": "web", "created": False}
    (await srv.org("POST", "/projects", {"slug": "api"}, role="member")).refused(403, "forbidden")
    for body in ({"slug": "Bad Slug"}, {"slug": ""}, {"name": "no slug"}):
        (await srv.org("POST", "/projects", body)).refused(400, "invalid_argument")
    # The new project is usable at once.
    run_id = (await srv.user("POST", "/api/v1/orgs/dev/projects/web/runs",
                             {"source": "x", "filename": "a.sh"})).ok(201)["run_id"]
    assert run_id.startswith("dev:web:run-")

    assert (await srv.org("PATCH", "/projects/web", {"name": "Website"}, role="admin")).ok() == {}
    message = (await srv.org("PATCH", "/projects/web", {"slug": "site", "name": "x"})).refused(
        400, "invalid_argument")
    assert "permanent" in message
    (await srv.org("PATCH", "/projects/web", {"name": ""})).refused(400, "invalid_argument")
    (await srv.org("PATCH", "/projects/web", {"name": "X"}, role="member")).refused(
        403, "forbidden")
    (await srv.org("PATCH", "/projects/nope", {"name": "X"})).refused(404, "not_found")
    async with await srv.connect() as conn:
        cur = await conn.execute("SELECT slug, name FROM cryo.list_projects('dev')")
        projects = dict(await cur.fetchall())
    assert projects == {"default": "Default", "web": "Website"}


async def test_deleting_a_project_takes_everything_in_it(srv: Server) -> None:
    created = await srv.cli("project", "create", "scratch")
    assert created.returncode == 0 and "created: scratch" in created.stdout, created.stderr
    scratch = "/api/v1/orgs/dev/projects/scratch"
    run_id = (await srv.user("POST", f"{scratch}/runs", {"source": "x",
                                                        "filename": "s.sh"})).ok(201)["run_id"]
    grant = await srv.claim_run(run_id)
    for fields in ({"key": "k", "value": "v"}, {"key": "n", "value": 1, "entity": "e"}):
        (await srv.in_run(grant, "state/set", **fields)).ok()
    await srv.finish(grant)
    kept = await srv.submit()
    keeper = await srv.claim_run(kept)
    (await srv.in_run(keeper, "state/set", key="n", value=2, entity="e")).ok()
    await srv.finish(keeper)
    live = (await srv.user("POST", f"{scratch}/runs", {"source": "x", "filename": "t.sh"})).ok(
        201)["run_id"]
    running = await srv.claim_run(live)  # live runs go too
    (await srv.user("PUT", f"{scratch}/secrets/API_KEY", {"value": SECRET})).ok(201)
    (await srv.user("POST", f"{scratch}/events/done", {"payload": 1})).ok(201)

    unconfirmed = await srv.cli("project", "delete", "scratch")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    (await srv.request("DELETE", scratch, token=srv.tokens["admin"])).refused(403, "forbidden")
    done = await srv.cli("project", "delete", "scratch", "--yes")
    assert done.stdout == "deleted scratch (2 runs)\n", done.stderr

    (await srv.user("GET", f"{scratch}/runs")).refused(404, "not_found")
    (await srv.in_run(running, "logs", data="")).refused(409, "stale_claim")  # its agent stops
    async with await srv.connect() as dba:
        for sql in ("SELECT count(*) FROM cryo.list_runs('dev', 'scratch')",
                    "SELECT count(*) FROM cryo.list_secrets('dev', 'scratch')",
                    "SELECT count(*) FROM cryo.list_events('dev', 'scratch', NULL, 10)",
                    "SELECT count(*) FROM cryo.state_list("
                    "cryo.state_scope('dev', 'scratch', NULL, 'e'))",
                    "SELECT count(*) FROM cryo.list_projects('dev') WHERE slug = 'scratch'"):
            cur = await dba.execute(sql)
            assert await cur.fetchone() == (0,), sql
        for gone in (run_id, live):
            with pytest.raises(psycopg.Error) as missing:
                await dba.execute("SELECT * FROM cryo.get_run(%s)", (gone,))
            assert missing.value.sqlstate == "CR003"
    again = await srv.cli("project", "delete", "scratch", "--yes")
    assert again.returncode == 2 and "scratch" in again.stderr  # an unknown name: refused
    # The other project is untouched.
    assert (await srv.user("GET", "/entities/e/state/n")).ok()["value"] == 2
    assert await srv.status(kept) == "succeeded"


async def test_secrets_are_set_listed_and_deleted_but_never_shown(srv: Server) -> None:
    assert (await srv.user("PUT", "/secrets/API_KEY", {"value": SECRET}, role="admin")).ok(
        201) == {"name": "API_KEY", "created": True}
    assert (await srv.user("PUT", "/secrets/API_KEY", {"value": SECRET + "2"})).ok(200) == {
        "name": "API_KEY", "created": False}
    (await srv.user("PUT", "/secrets/OTHER", {"value": "x-value"})).ok(201)
    listed = await srv.user("GET", "/secrets", role="admin")
    assert [s["name"] for s in listed.ok()["secrets"]] == ["API_KEY", "OTHER"]
    assert SECRET not in listed.text
    for role in ("member", "viewer"):
        (await srv.user("GET", "/secrets", role=role)).refused(403, "forbidden")
        (await srv.user("PUT", "/secrets/K", {"value": "x"}, role=role)).refused(403, "forbidden")
        (await srv.user("DELETE", "/secrets/OTHER", role=role)).refused(403, "forbidden")
    bad: list[tuple[str, Any]] = [
        ("PATH", {"value": "x"}), ("CRYO_TOKEN", {"value": "x"}), ("1ABC", {"value": "x"}),
        ("K", {"value": ""}), ("K", {"value": 5}), ("K", {}), ("K", {"value": "a\u0000b"}),
        ("K", {"value": "x" * (64 * 1024 + 1)})]
    for name, body in bad:
        (await srv.user("PUT", f"/secrets/{name}", body)).refused(400, "invalid_argument")
    assert (await srv.user("DELETE", "/secrets/OTHER", role="admin")).ok() == {}
    (await srv.user("DELETE", "/secrets/OTHER")).refused(404, "not_found")
    assert [s["name"] for s in (await srv.user("GET", "/secrets")).ok()["secrets"]] == [
        "API_KEY"]
    async with await srv.connect() as dba:  # sealed at rest
        cur = await dba.execute("SELECT value FROM cryo.secrets WHERE name = 'API_KEY'")
        row = await cur.fetchone()
    assert row is not None and SECRET.encode() not in bytes(row[0])


async def test_secrets_reach_a_trusted_grant_and_only_their_names_an_untrusted_one(
        srv: Server) -> None:
    (await srv.user("PUT", "/secrets/API_KEY", {"value": SECRET})).ok(201)
    trusted = await srv.claim_run(await srv.submit())
    assert (trusted["secrets"], trusted["withheld"]) == ({"API_KEY": SECRET}, [])
    assert trusted["untrusted"] is False
    # An untrusted run waits for an agent that confines its jobs; that one is told so.
    untrusted_id = await srv.submit(untrusted=True)
    assert await srv.claim() is None
    isolated = [*AGENT_CAPS, "isolated"]
    untrusted = await srv.claim_run(untrusted_id, caps=isolated)
    assert (untrusted["secrets"], untrusted["withheld"]) == ({}, ["API_KEY"])
    assert untrusted["untrusted"] is True
    # A child of an untrusted run is untrusted too.
    child = (await srv.in_run(untrusted, "spawn", path="spawn//0", ordinal=0, filename="c.sh",
                              source="echo\n")).ok()["run_id"]
    assert await srv.claim() is None
    assert (await srv.claim_run(child, caps=isolated))["secrets"] == {}


async def test_retention_is_read_by_viewers_and_set_by_admins(srv: Server) -> None:
    default = {"runs_seconds": 90 * 86400.0, "events_seconds": 30 * 86400.0}
    assert (await srv.user("GET", "/retention", role="viewer")).ok() == default
    set_runs = await srv.user("PUT", "/retention", {"runs_seconds": 43200}, role="admin")
    assert set_runs.ok() == {**default, "runs_seconds": 43200.0}
    (await srv.user("PUT", "/retention", {"runs_seconds": 60}, role="member")).refused(
        403, "forbidden")
    for body in ({}, {"runs_seconds": 0}, {"runs_seconds": -1}, {"events_seconds": "30d"},
                 {"runs_seconds": True}, {"events_seconds": 1e12}, {"runs_seconds": 1e-9}):
        (await srv.user("PUT", "/retention", body)).refused(400, "invalid_argument")
    both = {"runs_seconds": 3600, "events_seconds": 7200}
    assert (await srv.user("PUT", "/retention", both)).ok() == {"runs_seconds": 3600.0,
                                                                "events_seconds": 7200.0}
    (await srv.user("GET", "/api/v1/orgs/dev/projects/nope/retention")).refused(404, "not_found")


async def test_a_run_past_retention_is_collected_and_reads_say_so(srv: Server) -> None:
    run_id = await srv.submit()
    grant = await srv.claim_run(run_id)
    (await srv.in_run(grant, "state/set", key="k", value="v")).ok()
    (await srv.in_run(grant, "state/set", key="n", value=1, entity="keep")).ok()
    await srv.log(grant, b"bye\n")
    await srv.finish(grant)
    live = await srv.submit()
    got = await srv.cli("state", "get", "k", "--run", run_id)
    assert got.stdout == "v\n", got.stderr

    shown = await srv.cli("project", "retention", "default")
    assert shown.stdout == "runs\t90d\nevents\t30d\n", shown.stderr
    changed = await srv.cli("project", "retention", "default", "--runs", "12h")
    assert changed.stdout == "runs\t12h\nevents\t30d\n", changed.stderr
    for bad in ("0", "soon", "-1d"):
        refused = await srv.cli("project", "retention", "default", "--runs", bad,
                                "--events", "1d")
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, bad
    assert (await srv.cli("project", "retention", "default")).stdout == "runs\t12h\nevents\t30d\n"

    await srv.tick(later=11 * 3600)
    assert (await srv.user("GET", f"/runs/{run_id}/state/k")).ok()["value"] == "v"
    await srv.tick(later=13 * 3600)  # the collector in tick() takes it now
    (await srv.user("GET", f"/runs/{run_id}")).refused(404, "run_not_found")
    (await srv.user("GET", f"/runs/{run_id}/state/k")).refused(404, "run_not_found")
    (await srv.user("GET", f"/runs/{run_id}/logs")).refused(404, "run_not_found")
    gone = await srv.cli("state", "get", "k", "--run", run_id)
    assert gone.returncode == 2 and "no run" in gone.stderr
    assert (await srv.user("GET", "/entities/keep/state/n")).ok()["value"] == 1
    assert await srv.status(live) == "pending"  # live runs are never collected
