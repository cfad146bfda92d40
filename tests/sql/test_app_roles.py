"""Issue 20, the application's side of the trust boundary: a database role in cryo_app is
held to the tenant it is bound to, and the fake clock works only in a test database.

Each test is the attack: an application role bound to org `acme` logs in (a real login,
as an application would) and calls every function cryo_app may execute on org `bolt`,
reads every view, or sets cryo.fake_now; it must be refused with CR021 (or have the
setting ignored) and nothing of `bolt` may change or show."""

from __future__ import annotations

import datetime as dt
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from cryopg.errors import BY_SQLSTATE, TenantDenied

SOURCE = b"sealed-source"
BLOB = "ab" * 32  # an artifact's SHA-256 (the index never sees the bytes)


def _sqlstate(conn: psycopg.Connection, sql: str, params: tuple[Any, ...] = ()) -> str | None:
    try:
        conn.execute(sql, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


@pytest.fixture
def roles(db: psycopg.Connection) -> Iterator[Callable[..., str]]:
    """Creates bound application roles with fresh names (roles are cluster-wide and
    outlive the test's database), dropped afterwards."""
    made: list[str] = []

    def make(org: str | None = "acme", project: str | None = None) -> str:
        name = f"app_{secrets.token_hex(4)}"
        if org is None:  # in cryo_app, never bound
            db.execute(f"CREATE ROLE {name} LOGIN IN ROLE cryo_app")
        else:
            db.execute("SELECT cryo.bind_app_role(%s, %s, %s, true)", (name, org, project))
        made.append(name)
        return name

    yield make
    for name in made:
        db.execute(f"DROP ROLE IF EXISTS {name}")


@pytest.fixture
def login(dsn: str) -> Iterator[Callable[[str], psycopg.Connection]]:
    """A real login as a role: what an application's connection is."""
    opened: list[psycopg.Connection] = []

    def connect(role: str) -> psycopg.Connection:
        params = conninfo_to_dict(dsn)
        params["user"] = role
        conn = psycopg.connect(make_conninfo("", **params), autocommit=True)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()


def _tenant(db: psycopg.Connection, org: str, project: str) -> None:
    db.execute("SELECT cryo.ensure_org(%s, %s)", (org, org))
    db.execute("SELECT cryo.ensure_project(%s, %s, %s)", (org, project, project))
    db.execute("SELECT cryo.put_workflow(%s, %s, 'report', 'r.sh', NULL, %s)",
               (org, project, SOURCE))
    db.execute("SELECT cryo.create_handler(%s, %s, 'on-paid', 'paid', 'report')", (org, project))


def _submit(db: psycopg.Connection, org: str, project: str, group: str | None = None) -> str:
    return db.execute(
        "SELECT run_id FROM cryo.submit_script(%s, %s, 'w.sh', NULL, %s, p_concurrency => %s)",
        (org, project, SOURCE, group)).fetchone()[0]


@pytest.fixture
def world(db: psycopg.Connection) -> dict[str, Any]:
    """Two tenants, each with a workflow, a handler of event `paid`, and runs in every
    state a view shows: pending, claimed (with a state cell), parked, holding and queued
    on a concurrency group."""
    ids: dict[str, Any] = {}
    for org, project in (("acme", "web"), ("bolt", "web")):
        _tenant(db, org, project)
        claimed = _submit(db, org, project)
        run_id, token = db.execute(
            "SELECT run_id, claim_token FROM cryo.claim_job(%s, 'agent', '{shell}', 300)",
            (org,)).fetchone()
        assert run_id == claimed
        db.execute("SELECT cryo.state_set(%s, %s, 'ledger', 'k', 'v')", (run_id, token))
        sleeper = _submit(db, org, project)
        s_id, s_token = db.execute(
            "SELECT run_id, claim_token FROM cryo.claim_job(%s, 'agent', '{shell}', 300)",
            (org,)).fetchone()
        assert s_id == sleeper
        db.execute("SELECT cryo.park_sleep(%s, %s, 0, 0, 3600)", (s_id, s_token))
        holder = _submit(db, org, project, "nightly")
        queued = _submit(db, org, project, "nightly")
        pending = _submit(db, org, project)
        ids[org] = {"claimed": claimed, "sleeper": sleeper, "holder": holder,
                    "queued": queued, "pending": pending}
    return ids


def _counts(db: psycopg.Connection, org: str) -> tuple[int, ...]:
    """Everything an app call could leave behind in an org, as the owner sees it."""
    return tuple(db.execute(f"SELECT count(*) FROM cryo.{t} WHERE org = %s", (org,)).fetchone()[0]
                 for t in ("runs", "history", "events", "signals", "queue", "journal",
                           "artifacts", "artifact_blobs"))


def _statuses(db: psycopg.Connection, org: str) -> list[tuple[str, str, bool]]:
    return db.execute("SELECT id, status, cancel_requested FROM cryo.runs "
                      "WHERE org = %s ORDER BY id", (org,)).fetchall()


def _app_calls(org: str, project: str, run_id: str) -> list[tuple[str, tuple[Any, ...]]]:
    """Every function cryo_app may execute that names a tenant or a run (99_roles.sql)."""
    return [
        ("SELECT cryo.submit_run(%s, %s, 'report', '{\"a\": 1}')", (org, project)),
        ("SELECT cryo.submit_run(%s, %s, 'report', NULL, 'key-1', 'nightly', 'cancel-running')",
         (org, project)),
        ("SELECT * FROM cryo.list_runs(%s, %s)", (org, project)),
        ("SELECT cryo.publish_event(%s, %s, 'paid', '{\"n\": 1}')", (org, project)),
        ("SELECT * FROM cryo.get_run(%s)", (run_id,)),
        ("SELECT * FROM cryo.read_history(%s)", (run_id,)),
        ("SELECT cryo.queue_position(%s)", (run_id,)),
        ("SELECT cryo.send_signal(%s, 'approve', '{\"by\": \"mallory\"}')", (run_id,)),
        ("SELECT cryo.cancel_run(%s)", (run_id,)),
        ("SELECT cryo.prepare_artifact(%s, %s, %s, 3, NULL)", (org, project, BLOB)),
        ("SELECT * FROM cryo.put_artifact(%s, %s, 'lock-1', 'deps', %s, 3, NULL)",
         (org, project, BLOB)),
        ("SELECT * FROM cryo.find_artifact(%s, %s, %s, 'deps')",
         (org, project, f"{org}:{project}:key:lock-1")),
        ("SELECT * FROM cryo.list_artifacts(%s, %s, NULL)", (org, project)),
        ("SELECT cryo.artifact_usage(%s, %s)", (org, project)),
    ]


def test_every_app_function_cryo_app_may_call_is_in_the_attack_list(db: psycopg.Connection) -> None:
    granted = {r[0] for r in db.execute(
        "SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = 'cryo' AND has_function_privilege('cryo_app', p.oid, 'EXECUTE')")}
    attacked = {sql.split("cryo.")[1].split("(")[0] for sql, _ in _app_calls("o", "p", "r")}
    # No tenant in these: the clock, the error catalogue, and the two helpers the views
    # call (the test-database mark and the caller's own tenant).
    assert granted - attacked == {"now", "is_terminal", "error_codes", "_test_clock", "_app_tenant"}


def test_a_role_bound_to_one_org_is_refused_every_call_on_another(
        db: psycopg.Connection, world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    app = login(roles("acme"))
    before, statuses = _counts(db, "bolt"), _statuses(db, "bolt")
    victims = [world["bolt"]["pending"], world["bolt"]["queued"], world["bolt"]["claimed"],
               "bolt:web:run-doesnotexist"]  # an unknown run reads the same: no oracle
    for run_id in victims:
        for sql, params in _app_calls("bolt", "web", run_id):
            with pytest.raises(psycopg.Error) as got:
                app.execute(sql, params)
            assert got.value.sqlstate == "CR021", (sql, run_id, got.value)
            assert "bolt" in str(got.value) and "acme" not in str(got.value)
    # Nothing of bolt was created or changed: no run (of the workflow or of its event
    # handler), history row, event, signal, queue row or journal row; no run cancelled.
    assert _counts(db, "bolt") == before
    assert _statuses(db, "bolt") == statuses


def test_the_same_calls_work_on_its_own_org(
        db: psycopg.Connection, world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    """The control: the refusal above is the tenant check, not a missing privilege."""
    app = login(roles("acme"))
    own = world["acme"]
    run_id = app.execute("SELECT cryo.submit_run('acme', 'web', 'report')").fetchone()[0]
    assert run_id.startswith("acme:web:run-")
    assert {r[0] for r in app.execute("SELECT id FROM cryo.list_runs('acme', 'web', 500)")} >= {
        run_id, own["pending"]}
    pending = (own["pending"],)
    assert app.execute("SELECT status FROM cryo.get_run(%s)", pending).fetchone()[0] == "pending"
    assert app.execute("SELECT count(*) FROM cryo.read_history(%s)", pending).fetchone()[0] >= 1
    assert app.execute("SELECT cryo.queue_position(%s)", (own["queued"],)).fetchone()[0] == 1
    app.execute("SELECT cryo.send_signal(%s, 'approve')", (own["pending"],))
    handled = "SELECT count(*) FROM cryo.runs WHERE org = %s AND trigger_kind = 'event'"
    assert db.execute(handled, ("acme",)).fetchone()[0] == 0
    app.execute("SELECT cryo.publish_event('acme', 'web', 'paid', '{}')")
    assert db.execute(handled, ("acme",)).fetchone()[0] == 1  # acme's handler ran
    assert db.execute(handled, ("bolt",)).fetchone()[0] == 0  # bolt's did not
    assert app.execute("SELECT cryo.cancel_run(%s)", (own["pending"],)).fetchone()[0] == "cancelled"
    # Artifacts: an application that shares the store indexes what it uploaded, and reads.
    assert app.execute("SELECT cryo.prepare_artifact('acme', 'web', %s, 3, NULL)",
                       (BLOB,)).fetchone()[0] is False
    app.execute("SELECT * FROM cryo.put_artifact('acme', 'web', 'lock-1', 'deps', %s, 3, NULL)",
                (BLOB,))
    assert app.execute("SELECT sha256 FROM cryo.find_artifact('acme', 'web', "
                       "'acme:web:key:lock-1', 'deps')").fetchone()[0] == BLOB
    assert [r[0] for r in app.execute(
        "SELECT name FROM cryo.list_artifacts('acme', 'web', NULL)")] == ["deps"]
    assert app.execute("SELECT cryo.artifact_usage('acme', 'web')").fetchone()[0] == 3


def test_a_project_bound_role_is_held_to_that_project(
        db: psycopg.Connection, world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    _tenant(db, "acme", "ops")
    other = _submit(db, "acme", "ops")
    app = login(roles("acme", "web"))
    assert app.execute("SELECT cryo.submit_run('acme', 'web', 'report')").fetchone()[0]
    before = _counts(db, "acme")
    for sql, params in _app_calls("acme", "ops", other):
        assert _sqlstate(app, sql, params) == "CR021", sql
    assert _counts(db, "acme") == before
    assert {r[0] for r in app.execute("SELECT DISTINCT project FROM cryo.run_overview")} == {"web"}


def test_a_cryo_app_member_without_a_binding_gets_nothing(
        db: psycopg.Connection, world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    unbound = login(roles(None))
    before = (_counts(db, "acme"), _counts(db, "bolt"))
    for org in ("acme", "bolt"):
        for sql, params in _app_calls(org, "web", world[org]["pending"]):
            with pytest.raises(psycopg.Error) as got:
                unbound.execute(sql, params)
            assert got.value.sqlstate == "CR021"
            assert "not bound to a tenant" in str(got.value)
    for view in _views(db):
        assert unbound.execute(f"SELECT count(*) FROM {view}").fetchone()[0] == 0, view
    assert (_counts(db, "acme"), _counts(db, "bolt")) == before
    # cryo_app itself (what any member can SET ROLE to) is bound to nothing either.
    db.execute("SET ROLE cryo_app")
    try:
        assert _sqlstate(db, "SELECT cryo.submit_run('acme', 'web', 'report')") == "CR021"
        assert db.execute("SELECT count(*) FROM cryo.run_overview").fetchone()[0] == 0
    finally:
        db.execute("RESET ROLE")


def _views(db: psycopg.Connection) -> list[str]:
    return [r[0] for r in db.execute(
        "SELECT c.oid::regclass::text FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'cryo' AND c.relkind = 'v' ORDER BY 1")]


def test_every_view_shows_a_bound_role_only_its_tenant(
        db: psycopg.Connection, world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    app = login(roles("acme"))
    views = _views(db)
    assert {"cryo.run_overview", "cryo.pending_runs", "cryo.parked_runs", "cryo.live_claims",
            "cryo.lease_holders", "cryo.lease_queues", "cryo.state_overview"} <= set(views)
    shown_to_owner = 0
    for view in views:
        owner_orgs = {r[0] for r in db.execute(f"SELECT DISTINCT org FROM {view}")}
        app_orgs = {r[0] for r in app.execute(f"SELECT DISTINCT org FROM {view}")}
        assert app_orgs <= {"acme"}, view
        assert app_orgs == owner_orgs - {"bolt", "dev"}, view
        shown_to_owner += "bolt" in owner_orgs
    assert shown_to_owner >= 7  # the world put bolt rows in each of them
    bolt_ids = set(world["bolt"].values())
    assert not bolt_ids & {r[0] for r in app.execute("SELECT id FROM cryo.run_overview")}
    # A DBA (cryo_dba, outside cryo_app) still reads every tenant.
    db.execute("SET ROLE cryo_dba")
    try:
        orgs = {r[0] for r in db.execute("SELECT DISTINCT org FROM cryo.run_overview")}
        assert orgs >= {"acme", "bolt"}
    finally:
        db.execute("RESET ROLE")


def test_a_leaky_function_in_the_readers_where_sees_no_other_tenants_row(
        world: dict[str, Any], roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    """security_barrier: the view's filter runs before a cheap function of the reader's,
    which would otherwise be shown (and print) every row first."""
    app = login(roles("acme"))
    app.execute("CREATE FUNCTION pg_temp.leak(text) RETURNS boolean LANGUAGE plpgsql "
                "COST 0.0000001 AS $$ BEGIN RAISE NOTICE 'saw %', $1; RETURN true; END $$")
    seen: list[str] = []
    app.add_notice_handler(lambda d: seen.append(d.message_primary or ""))
    try:
        for view, col in (("run_overview", "id"), ("pending_runs", "run_id"),
                          ("parked_runs", "run_id"), ("state_overview", "org")):
            app.execute(f"SELECT * FROM cryo.{view} WHERE pg_temp.leak({col})").fetchall()
    finally:  # the role is dropped after the test; it must own nothing by then
        app.execute("DROP FUNCTION pg_temp.leak(text)")
    assert any("acme" in s for s in seen)
    assert not [s for s in seen if "bolt" in s]


def test_the_engines_own_roles_cannot_be_bound(db: psycopg.Connection) -> None:
    for role in ("cryopg", "cryo_app", "cryo_dba"):
        assert _sqlstate(db, "SELECT cryo.bind_app_role(%s, 'dev')", (role,)) == "CR004", role
    assert _sqlstate(db, "SELECT cryo.bind_app_role('nosuchrole_x', 'dev')") == "CR005"
    assert _sqlstate(db, "SELECT cryo.bind_app_role('x\"; DROP ROLE cryopg; --', 'dev', NULL, true)"
                     ) == "CR004"
    assert db.execute("SELECT count(*) FROM cryo.app_roles").fetchone()[0] == 0


def test_an_app_role_cannot_bind_itself_elsewhere_or_mark_the_database(
        db: psycopg.Connection, roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    for org in ("acme", "bolt"):
        db.execute("SELECT cryo.ensure_org(%s, %s)", (org, org))
    name = roles("acme")
    app = login(name)
    for sql in (f"SELECT cryo.bind_app_role('{name}', 'bolt')",
                f"SELECT cryo.unbind_app_role('{name}')",
                f"UPDATE cryo.app_roles SET org = 'bolt' WHERE role = '{name}'",
                "SELECT cryo.mark_test_database()", "INSERT INTO cryo.test_database DEFAULT VALUES",
                "SELECT * FROM cryo.list_app_roles()"):
        assert _sqlstate(app, sql) == "42501", sql  # insufficient_privilege
    bound = db.execute("SELECT org FROM cryo.app_roles WHERE role = %s", (name,)).fetchone()
    assert bound[0] == "acme"


# -- the fake clock ------------------------------------------------------------------------

FAKE = "2100-01-01 00:00:00+00"


def test_fake_now_set_by_an_app_is_ignored_outside_a_test_database(
        db: psycopg.Connection, roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    _tenant(db, "acme", "web")
    app = login(roles("acme"))
    # The test fixture marked this database (its template); a real one carries no mark.
    db.execute("DELETE FROM cryo.test_database")
    app.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAKE,))
    real = app.execute("SELECT now()").fetchone()[0]
    assert abs(app.execute("SELECT cryo.now()").fetchone()[0] - real) < dt.timedelta(minutes=1)
    run_id = app.execute("SELECT cryo.submit_run('acme', 'web', 'report')").fetchone()[0]
    created = db.execute("SELECT created_at FROM cryo.runs WHERE id = %s", (run_id,)).fetchone()[0]
    assert abs(created - real) < dt.timedelta(minutes=1)
    assert db.execute("SELECT max(created_at) FROM cryo.history WHERE run_id = %s",
                      (run_id,)).fetchone()[0] < dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
    # The owner's session (the server) is held to the same rule.
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAKE,))
    assert db.execute("SELECT cryo.now() < '2099-01-01'").fetchone()[0]


def test_an_app_role_cannot_forge_the_replica_of_its_history_rows(
        db: psycopg.Connection, roles: Callable[..., str],
        login: Callable[[str], psycopg.Connection]) -> None:
    """history.replica says which server wrote a row: an application that sets
    cryo.replica_id gets NULL there, as any writer outside a server does."""
    _tenant(db, "acme", "web")
    app = login(roles("acme"))
    app.execute("SELECT set_config('cryo.replica_id', 'forged-replica', false)")
    run_id = app.execute("SELECT cryo.submit_run('acme', 'web', 'report')").fetchone()[0]
    app.execute("SELECT cryo.cancel_run(%s)", (run_id,))
    written = "SELECT DISTINCT replica FROM cryo.history WHERE run_id = %s"
    assert [r[0] for r in db.execute(written, (run_id,))] == [None]
    # The control: the engine's own session (a server) names its replica.
    db.execute("SELECT set_config('cryo.replica_id', 'server-a', false)")
    own = db.execute("SELECT cryo.submit_run('acme', 'web', 'report')").fetchone()[0]
    assert [r[0] for r in db.execute(written, (own,))] == ["server-a"]


def test_fake_now_moves_the_clock_of_a_marked_test_database(db: psycopg.Connection) -> None:
    """The control: the fixture's mark is what makes the fake clock work in tests."""
    db.execute("SELECT set_config('cryo.fake_now', %s, false)", (FAKE,))
    assert db.execute("SELECT cryo.now() = %s::timestamptz", (FAKE,)).fetchone()[0]
    db.execute("DELETE FROM cryo.test_database")
    assert db.execute("SELECT cryo.now() < '2099-01-01'").fetchone()[0]
    db.execute("SELECT cryo.mark_test_database()")
    assert db.execute("SELECT cryo.now() = %s::timestamptz", (FAKE,)).fetchone()[0]


def test_tenant_denied_has_its_own_exception_class() -> None:
    assert BY_SQLSTATE["CR021"] is TenantDenied
    assert TenantDenied.http_status == 403


# -- the CLI -------------------------------------------------------------------------------


def _cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cryopg.cli.entry", "app-role", *args,
                           "--database-url", dsn], capture_output=True, text=True, timeout=60)


def test_cli_creates_binds_lists_and_drops_an_app_role(
        db: psycopg.Connection, dsn: str, login: Callable[[str], psycopg.Connection]) -> None:
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'report', 'r.sh', NULL, %s)", (SOURCE,))
    _tenant(db, "bolt", "web")
    name = f"billing_{secrets.token_hex(4)}"
    try:
        got = _cli(dsn, "create", name, "--org", "dev", "--project", "default")
        assert got.returncode == 0, got.stderr
        assert got.stdout.strip() == f"created role {name}: dev/default"
        app = login(name)  # created LOGIN, and trust auth here needs no password
        assert app.execute("SELECT cryo.submit_run('dev', 'default', 'report')").fetchone()[0]
        assert _sqlstate(app, "SELECT cryo.submit_run('bolt', 'web', 'report')") == "CR021"
        listed = _cli(dsn, "list")
        assert listed.returncode == 0, listed.stderr
        assert f"{name}\tdev\tdefault\tlogin\tcryo_app" in listed.stdout.splitlines()
        # A second create moves the role to the whole org; nothing is created twice.
        again = _cli(dsn, "create", name, "--org", "dev")
        assert again.stdout.strip() == f"bound role {name}: dev (every project)"
        dropped = _cli(dsn, "drop", name)
        assert dropped.returncode == 0 and dropped.stdout.strip() == f"unbound {name}"
        app2 = login(name)  # out of cryo_app: no function of the engine is callable now
        assert _sqlstate(app2, "SELECT cryo.submit_run('dev', 'default', 'report')") == "42501"
        assert _cli(dsn, "list").stdout.strip() == ""
    finally:
        db.execute(f"DROP ROLE IF EXISTS {name}")


def test_cli_bad_input_is_one_line_and_creates_nothing(db: psycopg.Connection, dsn: str) -> None:
    name = f"billing_{secrets.token_hex(4)}"
    for args, words in ((["create", name, "--org", "nosuch"], "no org nosuch"),
                        (["create", name, "--org", "dev", "--project", "nosuch"],
                         "no project dev/nosuch"),
                        (["create", "cryopg", "--org", "dev"], "engine"),
                        (["create", "bad name!", "--org", "dev"], "role name")):
        got = _cli(dsn, *args)
        assert got.returncode != 0, args
        assert "Traceback" not in got.stderr, got.stderr
        assert len(got.stderr.strip().splitlines()) == 1, got.stderr
        assert words in got.stderr, (args, got.stderr)
    # The failed creates rolled back with their binding: the role does not exist.
    exists = db.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
    assert exists[0] == 0
    missing = _cli(dsn, "create", name)
    assert missing.returncode != 0 and "--org" in missing.stderr
