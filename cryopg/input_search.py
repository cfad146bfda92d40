"""Runs found by their sealed input's values without storing those values: keyed hashes.

At submit the server hashes each scalar value of a trusted run's input (strings folded to
lower case, numbers and booleans as JSON writes them) with HMAC-SHA256 under a key derived
from the org's data key for one project (`Sealer.derive`), and stores the digests with the
run (cryo.runs.input_hashes). A search term is hashed the same way, so the runs search
matches a run whose input holds that exact value. The digests reveal nothing to someone
without the key (no guess can be checked), equal values in two projects hash apart, and
an untrusted run's input is never hashed: an untrusted submitter cannot learn, through
the search, whether a value of theirs equals a trusted run's.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from cryopg.seal import Sealer

MAX_VALUES = 256  # digests kept per run; a bigger input is found by its first values
MAX_CHARS = 200  # the search text's own bound: a longer value could never be searched


def project_key(sealer: Sealer, project: str) -> bytes:
    return sealer.derive(b"input search v1|" + project.encode())


def _digest(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _scalars(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack and len(out) < 4 * MAX_VALUES:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, str):
            out.append(v.strip().lower())
        elif isinstance(v, bool | int | float):
            out.append(json.dumps(v))
    return out


def input_hashes(key: bytes, value: Any) -> list[bytes] | None:
    """The digests of an input's scalar values (deduplicated, at most MAX_VALUES), or
    None when it has none worth finding."""
    seen: dict[bytes, None] = {}
    for text in _scalars(value):
        if text and len(text) <= MAX_CHARS:
            seen.setdefault(_digest(key, text), None)
        if len(seen) >= MAX_VALUES:
            break
    return list(seen) or None


def term_hash(key: bytes, term: str) -> bytes:
    """The digest a search term matches: as a string value is hashed."""
    return _digest(key, term.strip().lower())
