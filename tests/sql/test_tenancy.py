"""Tenancy in SQL: roles and route authorization, tokens, secrets at claim time, the
application and DBA database roles, master-key rewrapping, and injection attempts."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from tests.sql.conftest import claim, submit


def _h(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _user(db: psycopg.Connection, login: str, role: str, *, org: str = "dev",
          expires: str | None = None) -> bytes:
    db.execute("SELECT cryo.put_member(%s, %s, %s)", (org, login, role))
    db.execute("SELECT cryo.create_token('user', %s, 't', %s, '{}', %s::timestamptz, %s)",
               (org, _h(f"{org}/{login}"), expires, login))
    return _h(f"{org}/{login}")


def _authorize(db: psycopg.Connection, token: bytes, need: str, org: str = "dev",
               project: str | None = "default") -> str:
    return db.execute("SELECT role FROM cryo.authorize_user(%s, %s, %s, %s)",
                      (token, org, project, need)).fetchone()[0]


def _sqlstate(db: psycopg.Connection, sql: str, params: tuple[object, ...] = ()) -> str | None:
    try:
        db.execute(sql, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_roles_rank_and_other_tenants_read_as_absent(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_org('acme', 'Acme'), cryo.ensure_project('acme', 'web', 'Web')")
    viewer = _user(db, "vera", "viewer")
    member = _user(db, "mo", "member")
    admin = _user(db, "ada", "admin")
    assert _authorize(db, viewer, "viewer") == "viewer"
    assert _sqlstate(db, "SELECT cryo.authorize_user(%s, 'dev', 'default', 'member')",
                     (viewer,)) == "CR020"
    assert _authorize(db, member, "member") == "member"
    assert _sqlstate(db, "SELECT cryo.authorize_user(%s, 'dev', 'default', 'admin')",
                     (member,)) == "CR020"
    assert _authorize(db, admin, "admin") == "admin"
    # Another org, or a project that does not exist: not found, whatever the role.
    for org, project in (("acme", "web"), ("acme", "nope"), ("dev", "nope"), ("zzz", "default")):
        assert _sqlstate(db, "SELECT cryo.authorize_user(%s, %s, %s, 'viewer')",
                         (admin, org, project)) == "CR005", (org, project)
    # An agent token is no user token.
    db.execute("SELECT cryo.create_token('agent', 'dev', 'a', %s)", (_h("agent"),))
    assert _sqlstate(db, "SELECT cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (_h("agent"),)) == "CR008"


def test_expired_and_revoked_tokens_stop_working(db: psycopg.Connection) -> None:
    soon = _user(db, "sam", "member", expires="2100-01-01 00:00+00")
    kept = _user(db, "kim", "member")
    assert _authorize(db, soon, "member") == "member"
    db.execute("SELECT set_config('cryo.fake_now', '2100-01-01 00:00:01+00', false)")
    assert _sqlstate(db, "SELECT cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (soon,)) == "CR008"
    assert _sqlstate(db, "SELECT cryo.authenticate_token(%s)", (soon,)) == "CR008"
    tok = db.execute("SELECT token_id FROM cryo.authenticate_token(%s)", (kept,)).fetchone()[0]
    assert db.execute("SELECT cryo.revoke_token('dev', %s)", (tok,)).fetchone()[0] is True
    assert _sqlstate(db, "SELECT cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (kept,)) == "CR008"
    assert db.execute("SELECT cryo.revoke_token('dev', %s)", (tok,)).fetchone()[0] is False
    assert _sqlstate(db, "SELECT cryo.revoke_token('other', %s)", (tok,)) == "CR005"
    assert _sqlstate(db, "SELECT cryo.create_token('user', 'dev', 'x', %s, '{}', "
                         "'2000-01-01'::timestamptz, 'kim')", (_h("past"),)) == "CR004"


def test_member_rules_owner_only_grants_owner_and_last_owner_stays(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_member('dev', 'olga', 'owner')")
    db.execute("SELECT cryo.put_member('dev', 'ada', 'admin')")
    assert _sqlstate(db, "SELECT cryo.put_member('dev', 'eve', 'owner', 'ada')") == "CR020"
    assert _sqlstate(db, "SELECT cryo.put_member('dev', 'olga', 'viewer', 'ada')") == "CR020"
    db.execute("SELECT cryo.put_member('dev', 'mo', 'member', 'ada')")
    assert _sqlstate(db, "SELECT cryo.put_member('dev', 'x', 'viewer', 'mo')") == "CR020"
    assert _sqlstate(db, "SELECT cryo.put_member('dev', 'olga', 'admin', 'olga')") == "CR004"
    assert _sqlstate(db, "SELECT cryo.remove_member('dev', 'olga')") == "CR004"
    tok = _user(db, "gone", "member")
    db.execute("SELECT cryo.remove_member('dev', 'gone', 'ada')")
    assert _sqlstate(db, "SELECT cryo.authenticate_token(%s)", (tok,)) == "CR008"
    assert [r[0] for r in db.execute("SELECT login FROM cryo.list_members('dev')")] == \
        ["ada", "mo", "olga"]


def test_slugs_are_permanent_and_names_rename(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_project('dev', 'web', 'Web')")
    db.execute("SELECT cryo.rename_project('dev', 'web', 'Storefront')")
    assert db.execute("SELECT slug, name FROM cryo.list_projects('dev') WHERE slug = 'web'"
                      ).fetchone() == ("web", "Storefront")
    assert db.execute("SELECT cryo.ensure_project('dev', 'web', 'Again')").fetchone()[0] is False
    assert _sqlstate(db, "SELECT cryo.ensure_project('dev', 'Web Site', 'x')") == "CR004"


def test_agent_ceiling_defaults_without_connector(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.create_token('agent', 'dev', 'a', %s)", (_h("a"),))
    caps = db.execute("SELECT capabilities FROM cryo.authenticate_token(%s)",
                      (_h("a"),)).fetchone()[0]
    assert sorted(caps) == ["polyglot", "shell"]


def test_secrets_reach_only_a_trusted_live_claim(db: psycopg.Connection) -> None:
    assert db.execute("SELECT cryo.set_secret('dev', 'default', 'API_KEY', 'sealed-1')"
                      ).fetchone()[0] is True
    assert db.execute("SELECT cryo.set_secret('dev', 'default', 'API_KEY', 'sealed-2')"
                      ).fetchone()[0] is False
    assert db.execute("SELECT name FROM cryo.list_secrets('dev', 'default')").fetchall() == \
        [("API_KEY",)]
    trusted = submit(db)
    run_id, token = claim(db)
    assert run_id == trusted
    assert db.execute("SELECT name, value, withheld FROM cryo.claim_secrets(%s, %s)",
                      (run_id, token)).fetchall() == [("API_KEY", b"sealed-2", False)]
    untrusted = db.execute(
        "SELECT run_id FROM cryo.submit_script('dev', 'default', 'u.sh', NULL, 's', "
        "p_untrusted => true)"
    ).fetchone()[0]
    assert claim(db) is None  # only an agent that confines its jobs takes it
    run_id, token = claim(db, caps=["shell", "polyglot", "isolated"])
    assert run_id == untrusted
    assert db.execute("SELECT name, value, withheld FROM cryo.claim_secrets(%s, %s)",
                      (run_id, token)).fetchall() == [("API_KEY", None, True)]
    # A child it spawns is untrusted too.
    child = db.execute("SELECT cryo.spawn_run(%s, %s, NULL, 0, 'c.sh', NULL, 's', NULL, "
                       "'{shell}')", (run_id, token)).fetchone()[0]
    assert db.execute("SELECT untrusted FROM cryo.runs WHERE id = %s", (child,)).fetchone()[0]
    # Nothing of a secret is in the queue, and a stale token reads nothing.
    assert _sqlstate(db, "SELECT * FROM cryo.claim_secrets(%s, gen_random_uuid())",
                     (run_id,)) == "CR002"
    assert db.execute("SELECT cryo.delete_secret('dev', 'default', 'API_KEY')").fetchone()[0]
    for bad in ("CRYO_X", "PATH", "LD_PRELOAD", "1ABC", "A-B", "", "a b"):
        assert _sqlstate(db, "SELECT cryo.set_secret('dev', 'default', %s, 'v')",
                         (bad,)) == "CR004", bad


def test_rewrap_is_all_or_nothing(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.ensure_org('acme', 'Acme')")
    db.execute("SELECT cryo.set_org_key('dev', 'k-1', 'old-dev')")
    db.execute("SELECT cryo.set_org_key('acme', 'k-2', 'old-acme')")
    assert _sqlstate(db, "SELECT cryo.rewrap_org_keys('{dev,acme}', '{old-dev,stale}', '{n1,n2}')"
                     ) == "CR004"
    assert db.execute("SELECT wrapped_key FROM cryo.get_org_key('dev')").fetchone()[0] == b"old-dev"
    assert db.execute("SELECT cryo.rewrap_org_keys('{dev,acme}', '{old-dev,old-acme}', "
                      "'{n1,n2}')").fetchone()[0] == 2
    assert [bytes(r[2]) for r in db.execute("SELECT * FROM cryo.list_org_keys()")] == [b"n2", b"n1"]


def test_application_role_calls_functions_but_touches_no_table(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_workflow('dev', 'default', 'report', 'r.sh', NULL, 'sealed')")
    # An application's role: in cryo_app and bound to its tenant (bare cryo_app gets nothing).
    db.execute("SELECT cryo.bind_app_role('tenancy_test_app', 'dev', 'default', true)")
    db.execute("SET ROLE tenancy_test_app")
    for sql in ("SELECT * FROM cryo.runs", "SELECT * FROM cryo.queue",
                "INSERT INTO cryo.runs (id) VALUES ('x')", "DELETE FROM cryo.journal",
                "SELECT * FROM cryo.secrets", "SELECT * FROM cryo.tokens",
                "SELECT cryo.submit_script('dev', 'default', 'x.sh', NULL, 's')",
                "SELECT * FROM cryo.claim_job('dev', 'a', '{shell}', 30)",
                "SELECT cryo.set_secret('dev', 'default', 'K', 'v')"):
        assert _sqlstate(db, sql) == "42501", sql  # insufficient_privilege
    run_id = db.execute("SELECT cryo.submit_run('dev', 'default', 'report', '{\"a\": 1}')"
                        ).fetchone()[0]
    assert db.execute("SELECT status FROM cryo.run_overview WHERE id = %s",
                      (run_id,)).fetchone()[0] == "pending"
    assert db.execute("SELECT status FROM cryo.get_run(%s)", (run_id,)).fetchone()[0] == "pending"
    assert db.execute("SELECT cryo.cancel_run(%s)", (run_id,)).fetchone()[0] == "cancelled"
    db.execute("RESET ROLE")
    db.execute("SET ROLE cryo_dba")
    assert db.execute("SELECT count(*) FROM cryo.run_overview").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM cryo.pending_runs").fetchone()[0] == 0
    for sql in ("SELECT * FROM cryo.runs", "SELECT cryo.submit_run('dev', 'default', 'report')",
                "SELECT cryo.cancel_run('x')"):
        assert _sqlstate(db, sql) == "42501", sql
    db.execute("RESET ROLE")


INJECTIONS = ["x'; DROP TABLE cryo.runs; --", "a\" OR 1=1 --", "$$; DROP SCHEMA cryo CASCADE; $$",
              "../../etc/passwd", "name\nwith newline", "'); DELETE FROM cryo.queue; --"]


@pytest.mark.parametrize("bad", INJECTIONS)
def test_sql_injection_through_names_keys_groups_and_signals(db: psycopg.Connection,
                                                             bad: str) -> None:
    run_id = submit(db)
    _, token = claim(db)
    refused = [
        ("SELECT cryo.put_workflow('dev', 'default', %s, 'r.sh', NULL, 's')", (bad,)),
        ("SELECT cryo.set_secret('dev', 'default', %s, 'v')", (bad,)),
        ("SELECT cryo.put_member('dev', %s, 'viewer')", (bad,)),
        ("SELECT cryo.ensure_project('dev', %s, 'n')", (bad,)),
        ("SELECT cryo.state_scope('dev', 'default', NULL, %s)", (bad,)),  # entity (group) name
        ("SELECT cryo.submit_run('dev', 'default', %s)", (bad,)),  # no such workflow
    ]
    for sql, params in refused:
        assert _sqlstate(db, sql, params) in ("CR004", "CR005"), sql
    # State keys, signal and event names may hold any printable text: they are data,
    # stored as given and found again by exactly that text.
    as_data = [
        ("SELECT cryo.state_set(%s, %s, NULL, %s, 'v')", (run_id, token, bad)),
        ("SELECT cryo.send_signal(%s, %s)", (run_id, bad)),
        ("SELECT cryo.publish_event('dev', 'default', %s)", (bad,)),
    ]
    for sql, params in as_data:
        assert _sqlstate(db, sql, params) == ("CR004" if "\n" in bad else None), sql
    if "\n" not in bad:
        assert db.execute("SELECT key FROM cryo.state_list(%s)", (run_id,)).fetchall() == [(bad,)]
    # Everything is still there.
    assert db.execute("SELECT count(*) FROM cryo.runs").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM cryo.queue").fetchone()[0] == 1
