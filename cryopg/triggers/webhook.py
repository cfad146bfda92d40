"""A webhook delivery: its signature, its event name and what a run reads of it.

The HMAC-SHA256 of the raw body under the webhook's secret is the only authentication
of a delivery, sent GitHub's way (`X-Hub-Signature-256: sha256=<hex>`) or generically
(`X-Cryo-Signature: sha256=<hex>`), and compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

SIGNATURE_HEADERS = ("X-Hub-Signature-256", "X-Cryo-Signature")
EVENT_HEADERS = ("X-GitHub-Event", "X-Cryo-Event")
DEFAULT_EVENT = "webhook"
_EVENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def new_secret() -> str:
    return "whsec_" + secrets.token_hex(32)


def sign(secret: str, body: bytes) -> str:
    """The header value a sender puts on a body: sha256=<hex>."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_ok(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """Whether some signature header carries the body's HMAC. Each present header is
    compared in constant time; a missing one counts as wrong."""
    want = sign(secret, body).encode()
    ok = False
    for name in SIGNATURE_HEADERS:
        got = headers.get(name)
        if got is not None:
            ok = hmac.compare_digest(want, got.strip().lower().encode()) or ok
    return ok


def event_name(headers: Mapping[str, str]) -> str | None:
    """The delivery's event (GitHub's header, or X-Cryo-Event); None when malformed."""
    for name in EVENT_HEADERS:
        got = headers.get(name)
        if got is not None:
            return got if _EVENT.match(got) else None
    return DEFAULT_EVENT


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def trigger_of(webhook: str, event: str, payload: Any) -> tuple[dict[str, Any], bool]:
    """The run's `trigger` ({kind, webhook, event, ref, sha, payload}) and whether the
    delivery is untrusted: a GitHub pull_request whose head repository is not its base
    repository comes from a fork, whose author may be anybody."""
    ref = _dig(payload, "ref")
    sha = _dig(payload, "after") or _dig(payload, "sha")
    untrusted = False
    if event == "pull_request" and isinstance(_dig(payload, "pull_request"), dict):
        ref = _dig(payload, "pull_request", "head", "ref") or ref
        sha = _dig(payload, "pull_request", "head", "sha") or sha
        head = _dig(payload, "pull_request", "head", "repo", "full_name")
        base = _dig(payload, "pull_request", "base", "repo", "full_name")
        untrusted = head != base or head is None
    trigger = {"kind": "webhook", "webhook": webhook, "event": event,
               "ref": ref if isinstance(ref, str) else None,
               "sha": sha if isinstance(sha, str) else None, "payload": payload}
    return trigger, untrusted
