"""The project's exception classes, one per engine SQLSTATE, and the one translator.

The codes are listed once in SQL (cryo.error_codes()); a test checks this map agrees.
"""

from __future__ import annotations

import re


class CryoError(Exception):
    """Base of every error cryopg reports to a user; `code` is the wire name."""

    code = "error"
    http_status = 500


class ReservedKey(CryoError):
    code, http_status = "reserved_key", 400


class StaleClaim(CryoError):
    code, http_status = "stale_claim", 409


class RunTimedOut(StaleClaim):
    """(CR215) The run passed its deadline and the database failed it (exit code 124):
    the claim is gone, and its agent stops the job's whole process tree."""

    code, http_status = "run_timed_out", 409


class RunNotFound(CryoError):
    code, http_status = "run_not_found", 404


class InvalidArgument(CryoError):
    code, http_status = "invalid_argument", 400


class NotFound(CryoError):
    code, http_status = "not_found", 404


class RunFinished(CryoError):
    code, http_status = "run_finished", 409


class DuplicateCall(CryoError):
    code, http_status = "duplicate_call", 409


class IdentityMismatch(CryoError):
    """A durable call's path disagrees with its (family, name, ordinal)."""

    code, http_status = "identity_mismatch", 400


class Unauthorized(CryoError):
    code, http_status = "unauthorized", 401


class Forbidden(CryoError):
    """The member's role is too low for the route (the org and project are its own)."""

    code, http_status = "forbidden", 403


class TenantDenied(CryoError):
    """A database role in cryo_app acted on an org or project it is not bound to (or it
    is bound to none): see `cryopg app-role create`."""

    code, http_status = "tenant_denied", 403


class SecretWithheld(CryoError):
    """A step of an untrusted run asked for a secret; raised by the agent, no SQLSTATE."""

    code, http_status = "secret_withheld", 409


class DatabaseUnavailable(CryoError):
    code, http_status = "database_unavailable", 503


class Unreadable(CryoError):
    """A sealed payload would not open: wrong key, or the bytes were altered."""

    code, http_status = "unreadable", 500


class NotANumber(CryoError):
    """`state incr` found a cell holding something other than a number; the cell is
    left as it was. Raised by the server (SQL never sees values), so no SQLSTATE."""

    code, http_status = "not_a_number", 409


class QueueFull(CryoError):
    """A concurrency group's queue already holds its limit of runs."""

    code, http_status = "queue_full", 409


class LeaseHeld(CryoError):
    """The run already holds the lease on that concurrency group."""

    code, http_status = "lease_held", 409


class NotAMember(CryoError):
    """Somebody the issuer vouched for whom the org neither lists nor maps to a role."""

    code, http_status = "not_a_member", 403


class SignInExpired(CryoError):
    """The sign-in callback matched no sign-in of this browser (expired, used, or a
    forged state)."""

    code, http_status = "sign_in_expired", 400


class SignInRefused(CryoError):
    """The issuer's answer did not hold up: a bad ID token (signature, issuer, audience,
    expiry, nonce) or a refused code, raised by the server, which verifies tokens; or
    (CR150) an ID token traded before, a nonce this server did not hand a CLI sign-in,
    or no CLI session to renew."""

    code, http_status = "sign_in_refused", 401


class CsrfRefused(CryoError):
    """A cookie-authenticated request that changes something came without the session's
    X-Cryo-CSRF header (a page of another site may have sent it). No SQLSTATE."""

    code, http_status = "csrf_refused", 403


class InUse(CryoError):
    """A stored workflow still started by a schedule, handler or webhook made on its own."""

    code, http_status = "in_use", 409


class ArtifactQuota(CryoError):
    """A new artifact would take its project past CRYOPG_ARTIFACTS_MAX_BYTES."""

    code, http_status = "artifact_quota", 413


class ArtifactMissing(CryoError):
    """The index names a blob the store no longer holds (collected meanwhile): upload the
    bytes again. Raised by the server after checking its store; no SQLSTATE."""

    code, http_status = "artifact_missing", 409


class ArtifactUnverified(CryoError):
    """(CR170) An untrusted run's put named a blob by its digest alone: it must upload
    the bytes through the server, which checks them, before it names them (blobs are
    shared by content, so a digest is not proof of having the content)."""

    code, http_status = "artifact_unverified", 409


class BadTraceparent(CryoError):
    """(CR190) A trace context that is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)
    was given for a run."""

    code, http_status = "bad_traceparent", 400


class BadFoldBatch(CryoError):
    """(CR230) cryo.fold_metrics was given a batch size below 1."""

    code, http_status = "bad_fold_batch", 400


class BadQueueRecount(CryoError):
    """(CR231) cryo.fold_metrics was given a NULL or negative queue recount interval."""

    code, http_status = "bad_queue_recount", 400
class BadRunOrder(CryoError):
    """(CR236) The runs search was given an order other than started, ended, duration,
    status or workflow (with an optional leading - for descending)."""

    code, http_status = "bad_run_order", 400


class BadInputDigests(CryoError):
    """(CR237) A run's input digests for the search were more than 256, or not 32-byte
    SHA-256 digests."""

    code, http_status = "bad_input_digests", 400


class ArtifactStoreUnavailable(CryoError):
    """The artifact store (its bucket and endpoint, or directory, named in the message)
    did not answer within CRYOPG_ARTIFACTS_STORE_TIMEOUT, refused the connection or
    failed; a put or get may be retried. Raised by the server; no SQLSTATE."""

    code, http_status = "artifact_store_unavailable", 503


class Draining(CryoError):
    """The agent was asked to drain (`cryopg agents drain`): it gets no new run. No
    SQLSTATE: the server refuses it from the drain marks it reads each tick."""

    code, http_status = "draining", 409


class LogMoveLost(CryoError):
    """A log mover's attempt lost its lease on a run's log (it lapsed and another replica
    took the move over, or the run was collected): it must not record or trim anything."""

    code, http_status = "log_move_lost", 409


class LogGap(CryoError):
    """A log chunk does not start at the end of the pass's stored log: past it (a gap),
    or, at a finish, partly before it. `log_end` is the stored end, where the agent's
    next chunk must start (the message names it too)."""

    code, http_status = "log_gap", 409

    def __init__(self, message: str) -> None:
        super().__init__(message)
        found = re.search(r"ends at byte (\d+)", message)
        self.log_end: int | None = int(found.group(1)) if found else None


class ConnectionExists(CryoError):
    """(CR205) A connection of that name exists in the project: replace it, or delete it."""

    code, http_status = "connection_exists", 409


class ConnectionNotFound(CryoError):
    """(CR206) The project has no connection of that name."""

    code, http_status = "connection_not_found", 404


class ConnectionSecretMissing(CryoError):
    """(CR207) A connection names a project secret the project does not have."""

    code, http_status = "connection_secret_missing", 409


class ConnectionWithheld(CryoError):
    """(CR208) An untrusted run's connector node named a connection with a credential:
    the credential is withheld from it, so the node fails at start."""

    code, http_status = "connection_withheld", 403


class ApprovalAnswered(CryoError):
    """(CR225) That member already answered this approval: each approver counts once."""

    code, http_status = "approval_answered", 409


class NotAnApprover(CryoError):
    """(CR226) The member lacks the role or group the approval is restricted to."""

    code, http_status = "not_an_approver", 403


class InputRefused(CryoError):
    """(CR227) The input does not match the workflow's input_schema."""

    code, http_status = "input_refused", 422


class BadConcurrencyLimit(CryoError):
    """(CR228) A concurrency limit below 1 or a window not longer than 0."""

    code, http_status = "bad_concurrency_limit", 400
class WorkflowChanged(CryoError):
    """(CR240) A save named the version it was edited from, and the workflow has moved on
    since: reload it and edit again, so nobody's change is lost."""

    code, http_status = "workflow_changed", 409


class NotRedeliverable(CryoError):
    """(CR241) A webhook delivery stored before deliveries kept their input."""

    code, http_status = "not_redeliverable", 409


class TriggerOwned(CryoError):
    """(CR242) A schedule or handler a workflow's `on:` registered: change the workflow."""

    code, http_status = "trigger_owned", 409
class FanOutTooLarge(CryoError):
    """(CR210) A graph's fan_out has more items than the deployment allows
    (CRYOPG_GRAPH_FAN_OUT_MAX, 10,000 unless set)."""

    code, http_status = "fan_out_too_large", 400


BY_SQLSTATE: dict[str, type[CryoError]] = {
    "CR001": ReservedKey,
    "CR002": StaleClaim,
    "CR003": RunNotFound,
    "CR004": InvalidArgument,
    "CR005": NotFound,
    "CR006": RunFinished,
    "CR007": DuplicateCall,
    "CR008": Unauthorized,
    "CR009": IdentityMismatch,
    "CR020": Forbidden,
    "CR021": TenantDenied,
    "CR030": QueueFull,
    "CR031": LeaseHeld,
    "CR040": NotAMember,
    "CR041": SignInExpired,
    "CR150": SignInRefused,
    "CR055": InUse,
    "CR075": ArtifactQuota,
    "CR100": LogMoveLost,
    "CR160": LogGap,
    "CR170": ArtifactUnverified,
    "CR205": ConnectionExists,
    "CR206": ConnectionNotFound,
    "CR207": ConnectionSecretMissing,
    "CR208": ConnectionWithheld,
    "CR215": RunTimedOut,
    "CR190": BadTraceparent,
    "CR230": BadFoldBatch,
    "CR225": ApprovalAnswered,
    "CR226": NotAnApprover,
    "CR227": InputRefused,
    "CR228": BadConcurrencyLimit,
    "CR240": WorkflowChanged,
    "CR241": NotRedeliverable,
    "CR242": TriggerOwned,
    "CR210": FanOutTooLarge,
    "CR231": BadQueueRecount,
    "CR236": BadRunOrder,
    "CR237": BadInputDigests,
}


def from_sqlstate(sqlstate: str | None, message: str) -> CryoError | None:
    cls = BY_SQLSTATE.get(sqlstate or "")
    return cls(message) if cls else None
