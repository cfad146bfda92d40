"""Sign-in sessions in SQL (92_sessions.sql): a browser's pending sign-in is single use
and must match its state, a person is matched to a member by subject or email or
admitted by the org's claim map, nobody else gets a session, and a session authorizes
like a user token until it expires, is revoked or its member is removed."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

ISS = "https://id.example"
LONG = "x" * 48


def _h(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _sqlstate(db: psycopg.Connection, sql: str, params: tuple[object, ...] = ()) -> str | None:
    try:
        db.execute(sql, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def _sign_in(db: psycopg.Connection, secret: str, *, sub: str = "sub-1",
             email: str | None = None, claims: dict[str, Any] | None = None,
             org: str = "dev", ttl: float = 3600) -> tuple[str, str, str]:
    row = db.execute("SELECT session_id, member, role FROM cryo.oidc_sign_in("
                     "%s, %s, %s, %s, %s, %s, 'web', %s)",
                     (org, ISS, sub, email, Jsonb(claims or {}), _h(secret), ttl)).fetchone()
    return row[0], row[1], row[2]


def _sign_in_state(db: psycopg.Connection, **kw: Any) -> str | None:
    sql = ("SELECT cryo.oidc_sign_in(%s, %s, %s, %s, %s, %s, 'web', 3600)")
    return _sqlstate(db, sql, (kw.get("org", "dev"), ISS, kw.get("sub", "nobody"),
                               kw.get("email"), Jsonb(kw.get("claims", {})), _h("s")))


def _authorize(db: psycopg.Connection, secret: str, need: str = "viewer") -> tuple[str, str]:
    row = db.execute("SELECT member, role FROM cryo.authorize_user(%s, 'dev', 'default', %s)",
                     (_h(secret), need)).fetchone()
    return row[0], row[1]


def test_a_pending_sign_in_is_used_once_and_only_with_its_state(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.begin_oidc_login(%s, %s, %s, %s, 'dev')",
               (_h("browser"), "state-" + LONG, "nonce-" + LONG, LONG))
    take = "SELECT * FROM cryo.take_oidc_login(%s, %s)"
    assert _sqlstate(db, take, (_h("browser"), "forged-" + LONG)) == "CR041"
    assert _sqlstate(db, take, (_h("another-browser"), "state-" + LONG)) == "CR041"
    row = db.execute(take, (_h("browser"), "state-" + LONG)).fetchone()
    assert row == ("nonce-" + LONG, LONG, "dev")
    assert _sqlstate(db, take, (_h("browser"), "state-" + LONG)) == "CR041"  # used up

    db.execute("SELECT cryo.begin_oidc_login(%s, %s, %s, %s, 'dev', 60)",
               (_h("late"), "state-" + LONG, "nonce-" + LONG, LONG))
    db.execute("SELECT set_config('cryo.fake_now', (now() + interval '61 seconds')::text, false)")
    assert _sqlstate(db, take, (_h("late"), "state-" + LONG)) == "CR041"
    # Too short to be unguessable, or a malformed org: refused before anything is stored.
    assert _sqlstate(db, "SELECT cryo.begin_oidc_login(%s, 'short', %s, %s, 'dev')",
                     (_h("b"), LONG, LONG)) == "CR004"
    assert _sqlstate(db, "SELECT cryo.begin_oidc_login(%s, %s, %s, %s, 'No Org')",
                     (_h("b"), LONG, LONG, LONG)) == "CR004"


def test_a_stranger_gets_no_session(db: psycopg.Connection) -> None:
    assert _sign_in_state(db, sub="stranger", email="stranger@example.com") == "CR040"
    assert _sign_in_state(db, org="no-such-org", sub="stranger") == "CR040"
    # A claim the org does not map admits nobody either.
    assert _sign_in_state(db, sub="s", claims={"groups": ["ops"]}) == "CR040"
    assert db.execute("SELECT count(*) FROM cryo.sessions").fetchone()[0] == 0


def test_members_are_matched_by_subject_or_email(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_member('dev', 'alice@example.com', 'member')")
    db.execute("SELECT cryo.put_member('dev', 'sub-bob', 'viewer')")
    _, login, role = _sign_in(db, "a", sub="whatever", email="Alice@Example.com")
    assert (login, role) == ("alice@example.com", "member")
    assert _authorize(db, "a", "member") == ("alice@example.com", "member")
    _, login, role = _sign_in(db, "b", sub="sub-bob", email="bob@example.com")
    assert (login, role) == ("sub-bob", "viewer")
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'dev', 'default', 'member')",
                     (_h("b"),)) == "CR020"
    # Another org's project reads as absent, as for a token.
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'acme', 'default', 'viewer')",
                     (_h("a"),)) == "CR005"


def test_the_claim_map_admits_and_sets_roles(db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_role_map('dev', 'groups', 'ops', 'admin')")
    db.execute("SELECT cryo.put_role_map('dev', 'groups', 'staff', 'viewer')")
    db.execute("SELECT cryo.put_role_map('dev', 'role', 'boss', 'owner')")
    # A newcomer with mapped groups becomes a member with the highest mapped role.
    _, login, role = _sign_in(db, "c", sub="sub-c", email="carol@example.com",
                              claims={"groups": ["staff", "ops"]})
    assert (login, role) == ("carol@example.com", "admin")
    assert ("carol@example.com", "admin") in db.execute(
        "SELECT login, role FROM cryo.list_members('dev')").fetchall()
    # Next time the IdP puts her in staff only: the map sets her role down.
    _, _, role = _sign_in(db, "c2", sub="sub-c", email="carol@example.com",
                          claims={"groups": ["staff"]})
    assert role == "viewer"
    # A string claim matches its value.
    _, _, role = _sign_in(db, "d", sub="sub-d", email="dan@example.com",
                          claims={"role": "boss"})
    assert role == "owner"
    # The last owner keeps owner even when the map says less.
    db.execute("SELECT cryo.ensure_org('solo', 'Solo'),"
               " cryo.put_member('solo', 'solo@example.com', 'owner'),"
               " cryo.put_role_map('solo', 'groups', 'staff', 'viewer')")
    _, _, role = _sign_in(db, "e", sub="sub-e", email="solo@example.com", org="solo",
                          claims={"groups": ["staff"]})
    assert role == "owner"
    assert db.execute("SELECT count(*) FROM cryo.list_role_maps('dev')").fetchone()[0] == 3
    assert db.execute("SELECT cryo.delete_role_map('dev', 'role', 'boss')").fetchone()[0]
    for bad in (("dev", "sub", "x", "owner"), ("dev", "groups", "x", "god"),
                ("dev", "groups", "", "viewer")):
        assert _sqlstate(db, "SELECT cryo.put_role_map(%s, %s, %s, %s)", bad) == "CR004"
    assert _sqlstate(db, "SELECT cryo.put_role_map('nope', 'groups', 'x', 'viewer')") == "CR005"


def test_a_session_ends_on_expiry_sign_out_revocation_and_removal(
        db: psycopg.Connection) -> None:
    db.execute("SELECT cryo.put_member('dev', 'erin@example.com', 'member')")
    _sign_in(db, "one", sub="e1", email="erin@example.com", ttl=600)
    assert _authorize(db, "one")[0] == "erin@example.com"
    db.execute("SELECT set_config('cryo.fake_now', (now() + interval '601 seconds')::text, false)")
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (_h("one"),)) == "CR008"
    assert _sqlstate(db, "SELECT * FROM cryo.session_info(%s)", (_h("one"),)) == "CR008"
    db.execute("SELECT set_config('cryo.fake_now', '', false)")

    _sign_in(db, "two", sub="e1", email="erin@example.com")
    assert db.execute("SELECT member FROM cryo.session_info(%s)",
                      (_h("two"),)).fetchone()[0] == "erin@example.com"
    assert db.execute("SELECT cryo.end_session(%s)", (_h("two"),)).fetchone()[0] is True
    assert db.execute("SELECT cryo.end_session(%s)", (_h("two"),)).fetchone()[0] is False
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (_h("two"),)) == "CR008"

    sid, _, _ = _sign_in(db, "three", sub="e1", email="erin@example.com")
    assert sid in [r[0] for r in db.execute("SELECT id FROM cryo.list_sessions('dev')")]
    assert db.execute("SELECT cryo.revoke_session('dev', %s)", (sid,)).fetchone()[0] is True
    assert _sqlstate(db, "SELECT cryo.revoke_session('acme', %s)", (sid,)) == "CR005"
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (_h("three"),)) == "CR008"

    _sign_in(db, "four", sub="e1", email="erin@example.com")
    db.execute("SELECT cryo.remove_member('dev', 'erin@example.com')")
    assert _sqlstate(db, "SELECT * FROM cryo.authorize_user(%s, 'dev', 'default', 'viewer')",
                     (_h("four"),)) == "CR008"


@pytest.mark.parametrize("kind,ttl", [("phone", 3600), ("web", 10), ("web", 91 * 86400)])
def test_a_session_needs_a_kind_and_a_sane_lifetime(db: psycopg.Connection, kind: str,
                                                     ttl: float) -> None:
    db.execute("SELECT cryo.put_member('dev', 'fay', 'member')")
    assert _sqlstate(db, "SELECT cryo.oidc_sign_in('dev', %s, 'fay', NULL, '{}', %s, %s, %s)",
                     (ISS, _h("f"), kind, ttl)) == "CR004"
