"""Envelope sealing: AES-256-GCM under a per-org data key, wrapped by the master key.

An envelope is  b"CRY1" | len(key_id) | key_id | nonce(12) | ciphertext+tag, with the
org slug and key id as associated data, so an envelope moved to another org, or
altered in any byte, fails to open instead of reading as something else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from cryopg.errors import InvalidArgument, Unreadable

_MAGIC = b"CRY1"


def generate_master_key() -> str:
    return base64.b64encode(AESGCM.generate_key(bit_length=256)).decode()


def parse_master_key(text: str) -> bytes:
    """Accepts 32 bytes as base64 (standard or url-safe) or as 64 hex digits."""
    text = text.strip()
    raw: bytes | None = None
    if len(text) == 64:
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            raw = None
    if raw is None:
        try:
            raw = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != 32:
        raise InvalidArgument("CRYOPG_MASTER_KEY must be 32 bytes, as base64 or 64 hex digits")
    return raw


def _seal(key: bytes, key_id: str, aad: bytes, plaintext: bytes) -> bytes:
    kid = key_id.encode()
    nonce = os.urandom(12)
    head = _MAGIC + bytes([len(kid)]) + kid
    return head + nonce + AESGCM(key).encrypt(nonce, plaintext, aad + b"|" + kid)


def envelope_key_id(envelope: bytes) -> str:
    if len(envelope) < 6 or envelope[:4] != _MAGIC:
        raise Unreadable("not a sealed envelope")
    n = envelope[4]
    return envelope[5:5 + n].decode(errors="replace")


def _open(key: bytes, key_id: str, aad: bytes, envelope: bytes) -> bytes:
    found = envelope_key_id(envelope)
    if found != key_id:
        raise Unreadable(f"sealed under key {found}, but the key in force is {key_id}")
    body = envelope[5 + len(found.encode()):]
    try:
        return AESGCM(key).decrypt(body[:12], body[12:], aad + b"|" + key_id.encode())
    except (InvalidTag, ValueError) as exc:
        raise Unreadable(f"sealed payload under key {key_id} failed to open") from exc


class MasterKey:
    """Wraps and unwraps org data keys. Its id is a digest, never the key."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self.key_id = "m-" + hashlib.sha256(b"cryopg-master" + raw).hexdigest()[:12]

    def new_org_key(self, org: str) -> tuple[str, bytes, bytes]:
        """Returns (data key id, wrapped data key, data key)."""
        data_key = AESGCM.generate_key(bit_length=256)
        key_id = "k-" + os.urandom(6).hex()
        return key_id, self.wrap(org, key_id, data_key), data_key

    def wrap(self, org: str, key_id: str, data_key: bytes) -> bytes:
        return _seal(self._raw, self.key_id, f"org-key|{org}|{key_id}".encode(), data_key)

    def unwrap(self, org: str, key_id: str, wrapped: bytes) -> bytes:
        try:
            return _open(self._raw, self.key_id, f"org-key|{org}|{key_id}".encode(), wrapped)
        except Unreadable as exc:
            raise Unreadable(
                f"org {org}'s data key will not open with this master key: {exc}") from exc


class Sealer:
    """Seals and opens one org's payloads."""

    def __init__(self, org: str, key_id: str, data_key: bytes) -> None:
        self.org, self.key_id, self._key = org, key_id, data_key
        self._aad = f"org|{org}".encode()

    def seal(self, plaintext: bytes) -> bytes:
        return _seal(self._key, self.key_id, self._aad, plaintext)

    def open(self, envelope: bytes) -> bytes:
        return _open(self._key, self.key_id, self._aad, bytes(envelope))

    def seal_text(self, text: str) -> bytes:
        return self.seal(text.encode())

    def open_text(self, envelope: bytes) -> str:
        return self.open(envelope).decode()

    def seal_json(self, value: Any) -> bytes:
        return self.seal(json.dumps(value, separators=(",", ":")).encode())

    def open_json(self, envelope: bytes) -> Any:
        return json.loads(self.open(envelope))

    def keyed_digest(self, purpose: str, text: str) -> bytes:
        """32 bytes naming `text` for `purpose` (e.g. a node's cache key) that the
        database can compare without learning the text: an HMAC-SHA256 under the org's
        data key (a new key gives new digests)."""
        return hmac.new(self._key, f"{purpose}|{self.org}|{text}".encode(),
                        hashlib.sha256).digest()

    def digest(self, text: str) -> bytes:
        """A keyed hash of a clear text (a workflow's source): the database can tell two
        sealed texts apart by it, and learn nothing of either."""
        return self.keyed_digest("text", text)

    def derive(self, purpose: bytes) -> bytes:
        """A 32-byte key for another use than sealing (HKDF-SHA256 of the org's data key),
        one per purpose: it says nothing of the data key or of another purpose's key."""
        return HKDF(algorithm=SHA256(), length=32, salt=None,
                    info=b"cryopg|" + self.org.encode() + b"|" + purpose).derive(self._key)


class OrgSealers(Protocol):
    """Where each org's Sealer comes from: the server's OrgKeys (server/keys.py), which
    the graph driver and the log mover are handed instead of reaching into the server."""

    async def sealer(self, org: str) -> Sealer: ...
