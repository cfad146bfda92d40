"""Envelope sealing: round trips, and every way an envelope must refuse to open."""

from __future__ import annotations

import base64

import pytest

from cryopg.errors import InvalidArgument, Unreadable
from cryopg.seal import MasterKey, Sealer, generate_master_key, parse_master_key


def _sealer(org: str = "acme",
            master: MasterKey | None = None) -> tuple[Sealer, MasterKey, str, bytes]:
    master = master or MasterKey(parse_master_key(generate_master_key()))
    key_id, wrapped, data_key = master.new_org_key(org)
    return Sealer(org, key_id, master.unwrap(org, key_id, wrapped)), master, key_id, wrapped


def test_round_trip_and_no_plaintext_in_the_envelope() -> None:
    sealer, *_ = _sealer()
    env = sealer.seal_json({"card": "4242-4242"})
    assert b"4242" not in env and env.startswith(b"CRY1")
    assert sealer.open_json(env) == {"card": "4242-4242"}
    assert sealer.seal(b"x") != sealer.seal(b"x")  # a fresh nonce every time


def test_a_flipped_byte_is_unreadable_not_absent() -> None:
    sealer, *_ = _sealer()
    env = bytearray(sealer.seal(b"hello"))
    env[-1] ^= 1
    with pytest.raises(Unreadable):
        sealer.open(bytes(env))


def test_another_orgs_key_or_aad_cannot_open() -> None:
    mine, master, key_id, wrapped = _sealer("acme")
    theirs, *_ = _sealer("other", master)
    with pytest.raises(Unreadable):
        theirs.open(mine.seal(b"secret"))
    # The same data key under another org's name fails too: the org is bound in.
    impostor = Sealer("other", key_id, master.unwrap("acme", key_id, wrapped))
    with pytest.raises(Unreadable):
        impostor.open(mine.seal(b"secret"))


def test_the_wrong_master_key_cannot_unwrap() -> None:
    _, master, key_id, wrapped = _sealer()
    stranger = MasterKey(parse_master_key(generate_master_key()))
    with pytest.raises(Unreadable):
        stranger.unwrap("acme", key_id, wrapped)
    assert master.unwrap("acme", key_id, wrapped)


def test_master_key_formats() -> None:
    raw = bytes(range(32))
    assert parse_master_key(raw.hex()) == raw
    assert parse_master_key(base64.b64encode(raw).decode()) == raw
    assert parse_master_key(base64.urlsafe_b64encode(raw).decode()) == raw
    for bad in ("", "short", base64.b64encode(b"x" * 16).decode()):
        with pytest.raises(InvalidArgument):
            parse_master_key(bad)
