"""The typed rows the wrappers return: one frozen dataclass per row shape."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any


@dataclasses.dataclass(frozen=True)
class Claim:
    run_id: str
    claim_token: uuid.UUID
    attempt: int
    filename: str
    interpreter: str | None
    source: bytes
    input: bytes | None
    input_clear: Any
    workdir: str | None = None
    untrusted: bool = False


@dataclasses.dataclass(frozen=True)
class ClaimGrant:
    """One row of cryo.claim_grants: a claim, the agent it went to, and what its grant
    needs (the run's memos and the secrets the claim may see, still sealed)."""

    agent_id: str
    claim: Claim
    journal: list[Memo]
    secrets: list[ClaimSecret]
    agent_token: str | None = None  # the agent token the claim is bound to


@dataclasses.dataclass(frozen=True)
class Memo:
    seq: int
    path: str
    family: str
    name: str
    ordinal: int
    status: str
    result: bytes | None
    exit_code: int | None
    answer_clear: Any = None
    ref_run_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Run:
    id: str
    org: str
    project: str
    workflow: str | None
    filename: str
    status: str
    substate: str | None
    attempt: int
    exit_code: int | None
    error: str | None
    idempotency_key: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    wake_at: dt.datetime | None
    agent_id: str | None
    concurrency_group: str | None = None
    queue_position: int | None = None
    finished: bool = False  # cryo.is_terminal(status): SQL holds the one definition
    parent_run_id: str | None = None
    activity_name: str | None = None
    kind: str = "script"  # or "graph"
    # The exit code a finished run reports (cryo._outcome_code, the one rule); None
    # while it runs, and in lists.
    outcome_code: int | None = None


@dataclasses.dataclass(frozen=True)
class RunRow(Run):
    """A row of the runs list: a run, what started it and how many children it has."""
    parent_run_id: str | None = None
    trig: str = "manual"
    children: int = 0


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A journal entry as the run page draws it: identity, status and times, no payload."""
    seq: int
    family: str
    name: str
    ordinal: int
    label: str | None
    attempt: int
    status: str
    exit_code: int | None
    due_at: dt.datetime | None
    created_at: dt.datetime
    completed_at: dt.datetime | None
    ref_run_id: str | None = None  # the child a spawn or activity started


@dataclasses.dataclass(frozen=True)
class LogTail:
    """Where a tail window of a log starts (read chunks after after_id)."""
    after_id: int
    skipped_bytes: int
    total_bytes: int


@dataclasses.dataclass(frozen=True)
class RunDetail:
    input: bytes | None
    input_clear: Any
    parent_run_id: str | None
    trigger_kind: str | None
    trigger_name: str | None
    trigger_depth: int | None
    untrusted: bool = False


@dataclasses.dataclass(frozen=True)
class LogChunk:
    id: int
    data: bytes
    created_at: dt.datetime | None = None  # when the chunk was stored


@dataclasses.dataclass(frozen=True)
class HistoryEvent:
    id: int
    kind: str
    family: str | None
    name: str | None
    ordinal: int | None
    attempt: int | None
    payload: bytes | None
    created_at: dt.datetime
    label: str | None = None


@dataclasses.dataclass(frozen=True)
class TokenInfo:
    token_id: str
    kind: str
    org: str
    capabilities: list[str]
    member: str | None = None
    role: str | None = None


@dataclasses.dataclass(frozen=True)
class UserAuth:
    token_id: str
    member: str
    role: str


@dataclasses.dataclass(frozen=True)
class TokenRow:
    id: str
    kind: str
    name: str
    member: str | None
    capabilities: list[str]
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Member:
    login: str
    role: str
    created_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class SecretName:
    name: str
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class ClaimSecret:
    name: str
    value: bytes | None
    withheld: bool


@dataclasses.dataclass(frozen=True)
class Cell:
    key: str
    value: bytes
    version: int
    created_by_run: str
    updated_at: dt.datetime
    tainted: bool = False  # written by an untrusted run (docs/security/trust.md)
    published: bool = False  # a trusted cell untrusted runs may read


@dataclasses.dataclass(frozen=True)
class EntityCell:
    """An entity cell a run touched (created, or wrote last)."""
    entity: str
    key: str
    value: bytes
    version: int
    created_by_run: str
    updated_by_run: str
    updated_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class StateAnswer:
    """What state_add / state_cas answered: won (claimed or swapped), the cell's version
    after the call (None when replayed), and whether the answer came from a memo."""

    won: bool
    version: int | None
    replayed: bool


@dataclasses.dataclass(frozen=True)
class IncrStep:
    outcome: str  # 'done', 'moved' or 'recorded'
    version: int | None
    sealed: bytes | None


@dataclasses.dataclass(frozen=True)
class WaitAnswer:
    parked: bool
    payload: bytes | None
    payload_clear: Any
    timed_out: bool


@dataclasses.dataclass(frozen=True)
class Event:
    id: int
    name: str
    payload: bytes | None
    payload_clear: Any
    emitted_by_run: str | None
    created_at: dt.datetime
    depth: int
    untrusted: bool
    refused: str | None
