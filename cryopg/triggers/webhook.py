"""A webhook delivery: its signature, its event name and what a run reads of it.

The HMAC-SHA256 of the raw body under the webhook's secret is the only authentication
of a delivery, sent GitHub's way (`X-Hub-Signature-256: sha256=<hex>`) or generically
(`X-Cryo-Signature: sha256=<hex>`), and compared in constant time.

Whether a delivery's run is trusted (sees the project's secrets) is decided from its
payload, never from its event header alone: see untrusted_delivery.
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


# Events whose very kind says the code under test may come from another repository: a
# delivery of one of these that does not name its head repository is untrusted.
_FORKABLE = ("pull_request", "workflow_run", "check_suite", "check_run", "merge_group")
_WALK_MAX = 200_000  # dicts looked at in one payload; a bigger one is untrusted


def _repo_id(repo: Any) -> str | None:
    """A repository's identity as GitHub names it (full_name, else id, else url); None
    for a missing, null or deleted one."""
    if not isinstance(repo, dict):
        return None
    for key in ("full_name", "id", "url"):
        value = repo.get(key)
        if isinstance(value, str) and value:
            return f"{key}:{value.lower()}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{key}:{value}"
    return None


def _same(head: Any, base: Any) -> bool:
    """Whether two repository objects are one repository: some identity both carry is
    equal, and none both carry differs."""
    if not isinstance(head, dict) or not isinstance(base, dict):
        return False
    shared = False
    for key in ("full_name", "id", "url"):
        a, b = _repo_id({key: head.get(key)}), _repo_id({key: base.get(key)})
        if a is None or b is None:
            continue
        if a != b:
            return False
        shared = True
    return shared


def _head_pairs(payload: Any) -> list[tuple[Any, Any]] | None:
    """Every (head repository, base repository) the payload names anywhere: a `head`
    object with a `repo`, or beside a `base` (pull requests, also inside check suites,
    workflow runs and reviews); a `head_repository` beside its `repository` (workflow runs, check
    suites), else the payload's own repository. None when the payload is too big to
    look through."""
    top = _dig(payload, "repository")
    pairs: list[tuple[Any, Any]] = []
    stack: list[Any] = [payload]
    seen = 0
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        seen += 1
        if seen > _WALK_MAX:
            return None
        head = node.get("head")
        if isinstance(head, dict) and ("repo" in head or isinstance(node.get("base"), dict)):
            pairs.append((head.get("repo"), _dig(node, "base", "repo")))
        if "head_repository" in node:
            pairs.append((node.get("head_repository"), node.get("repository") or top))
        stack.extend(v for v in node.values() if isinstance(v, (dict, list)))
    return pairs


def untrusted_delivery(event: str, payload: Any) -> bool:
    """Whether a delivery may carry code from a fork, decided from its payload and never
    from its event header alone (the header is the sender's to choose): untrusted when
    any head repository it names is missing, null, deleted or not its base repository,
    and when an event of a pull-request-like kind names none. Fails closed."""
    pairs = _head_pairs(payload)
    if pairs is None:
        return True
    if any(not _same(head, base) for head, base in pairs):
        return True
    return not pairs and event.lower().startswith(_FORKABLE)


def trigger_of(webhook: str, event: str, payload: Any) -> tuple[dict[str, Any], bool]:
    """The run's `trigger` ({kind, webhook, event, ref, sha, payload}) and whether the
    delivery is untrusted (see untrusted_delivery): a fork's code may be anybody's."""
    ref = _dig(payload, "ref")
    sha = _dig(payload, "after") or _dig(payload, "sha")
    kind = event.lower()
    if kind.startswith("pull_request") and isinstance(_dig(payload, "pull_request"), dict):
        ref = _dig(payload, "pull_request", "head", "ref") or ref
        sha = _dig(payload, "pull_request", "head", "sha") or sha
    elif kind == "workflow_run" and isinstance(_dig(payload, "workflow_run"), dict):
        ref = _dig(payload, "workflow_run", "head_branch") or ref
        sha = _dig(payload, "workflow_run", "head_sha") or sha
    trigger = {"kind": "webhook", "webhook": webhook, "event": event,
               "ref": ref if isinstance(ref, str) else None,
               "sha": sha if isinstance(sha, str) else None, "payload": payload}
    return trigger, untrusted_delivery(event, payload)
