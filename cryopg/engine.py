"""One typed wrapper per public `cryo` SQL function. Python never touches tables."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb


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

    TERMINAL = frozenset({"succeeded", "failed", "cancelled", "unreadable"})

    @property
    def finished(self) -> bool:
        return self.status in self.TERMINAL


@dataclasses.dataclass(frozen=True)
class LogChunk:
    id: int
    data: bytes


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


async def _one(conn: AsyncConnection, sql: str, params: tuple[Any, ...]) -> Any:
    row = await (await conn.execute(sql, params)).fetchone()
    return row[0] if row else None


# -- tenancy ---------------------------------------------------------------------------

async def get_org_key(conn: AsyncConnection, org: str) -> tuple[str | None, bytes | None]:
    cur = await conn.execute("SELECT * FROM cryo.get_org_key(%s)", (org,))
    key_id, wrapped = await cur.fetchone()
    return key_id, wrapped


async def set_org_key(conn: AsyncConnection, org: str, key_id: str,
                      wrapped: bytes) -> tuple[str, bytes]:
    cur = await conn.execute("SELECT * FROM cryo.set_org_key(%s, %s, %s)", (org, key_id, wrapped))
    key_id, wrapped = await cur.fetchone()
    return key_id, wrapped


async def create_token(conn: AsyncConnection, kind: str, org: str, name: str, secret_hash: bytes,
                       capabilities: list[str] | None = None, *,
                       expires_at: dt.datetime | None = None, member: str | None = None) -> str:
    return await _one(conn, "SELECT cryo.create_token(%s, %s, %s, %s, %s, %s, %s)",
                      (kind, org, name, secret_hash, capabilities or [], expires_at, member))


async def authorize_user(conn: AsyncConnection, secret_hash: bytes, org: str,
                         project: str | None, need: str) -> UserAuth:
    cur = conn.cursor(row_factory=class_row(UserAuth))
    await cur.execute("SELECT * FROM cryo.authorize_user(%s, %s, %s, %s)",
                      (secret_hash, org, project, need))
    return await cur.fetchone()


async def list_tokens(conn: AsyncConnection, org: str) -> list[TokenRow]:
    cur = conn.cursor(row_factory=class_row(TokenRow))
    await cur.execute("SELECT * FROM cryo.list_tokens(%s)", (org,))
    return await cur.fetchall()


async def revoke_token(conn: AsyncConnection, org: str, token_id: str) -> bool:
    return await _one(conn, "SELECT cryo.revoke_token(%s, %s)", (org, token_id))


async def ensure_org(conn: AsyncConnection, slug: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.ensure_org(%s, %s)", (slug, name))


async def ensure_project(conn: AsyncConnection, org: str, slug: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.ensure_project(%s, %s, %s)", (org, slug, name))


async def rename_project(conn: AsyncConnection, org: str, slug: str, name: str) -> None:
    await conn.execute("SELECT cryo.rename_project(%s, %s, %s)", (org, slug, name))


async def delete_project(conn: AsyncConnection, org: str, slug: str) -> int:
    return await _one(conn, "SELECT cryo.delete_project(%s, %s)", (org, slug))


async def get_retention(conn: AsyncConnection, org: str, slug: str) -> tuple[Any, Any]:
    cur = await conn.execute("SELECT runs, events FROM cryo.get_retention(%s, %s)", (org, slug))
    row = await cur.fetchone()
    assert row is not None  # the function raises for an unknown project
    return row[0], row[1]


async def set_retention(conn: AsyncConnection, org: str, slug: str,
                        runs: dt.timedelta | None, events: dt.timedelta | None) -> None:
    await conn.execute("SELECT cryo.set_retention(%s, %s, %s, %s)", (org, slug, runs, events))


async def ensure_member(conn: AsyncConnection, org: str, login: str, role: str) -> str:
    return await _one(conn, "SELECT cryo.ensure_member(%s, %s, %s)", (org, login, role))


async def put_member(conn: AsyncConnection, org: str, login: str, role: str,
                     by: str | None) -> str:
    return await _one(conn, "SELECT cryo.put_member(%s, %s, %s, %s)", (org, login, role, by))


async def remove_member(conn: AsyncConnection, org: str, login: str, by: str | None) -> None:
    await conn.execute("SELECT cryo.remove_member(%s, %s, %s)", (org, login, by))


async def list_members(conn: AsyncConnection, org: str) -> list[Member]:
    cur = conn.cursor(row_factory=class_row(Member))
    await cur.execute("SELECT * FROM cryo.list_members(%s)", (org,))
    return await cur.fetchall()


async def list_org_keys(conn: AsyncConnection) -> list[tuple[str, str, bytes]]:
    cur = await conn.execute("SELECT * FROM cryo.list_org_keys()")
    return [tuple(r) for r in await cur.fetchall()]


async def rewrap_org_keys(conn: AsyncConnection, rows: list[tuple[str, bytes, bytes]]) -> int:
    """Each row is (org, old wrapped key, new wrapped key); all or nothing."""
    return await _one(conn, "SELECT cryo.rewrap_org_keys(%s, %s, %s)",
                      ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]))


# -- secrets (16_secrets.sql) ---------------------------------------------------------------

async def set_secret(conn: AsyncConnection, org: str, project: str, name: str,
                     sealed: bytes) -> bool:
    return await _one(conn, "SELECT cryo.set_secret(%s, %s, %s, %s)", (org, project, name, sealed))


async def delete_secret(conn: AsyncConnection, org: str, project: str, name: str) -> bool:
    return await _one(conn, "SELECT cryo.delete_secret(%s, %s, %s)", (org, project, name))


async def list_secrets(conn: AsyncConnection, org: str, project: str) -> list[SecretName]:
    cur = conn.cursor(row_factory=class_row(SecretName))
    await cur.execute("SELECT * FROM cryo.list_secrets(%s, %s)", (org, project))
    return await cur.fetchall()


async def claim_secrets(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> list[ClaimSecret]:
    cur = conn.cursor(row_factory=class_row(ClaimSecret))
    await cur.execute("SELECT * FROM cryo.claim_secrets(%s, %s)", (run_id, token))
    return await cur.fetchall()


async def authenticate_token(conn: AsyncConnection, secret_hash: bytes) -> TokenInfo:
    cur = conn.cursor(row_factory=class_row(TokenInfo))
    await cur.execute("SELECT * FROM cryo.authenticate_token(%s)", (secret_hash,))
    return await cur.fetchone()


async def register_agent(conn: AsyncConnection, org: str, agent_id: str, caps: list[str]) -> None:
    await conn.execute("SELECT cryo.register_agent(%s, %s, %s)", (org, agent_id, caps))


# -- runs ------------------------------------------------------------------------------

async def submit_script(conn: AsyncConnection, org: str, project: str, *, filename: str,
                        interpreter: str | None, source: bytes, input: bytes | None,
                        idempotency_key: str | None, required_caps: list[str],
                        untrusted: bool = False, concurrency: str | None = None,
                        policy: str | None = None) -> tuple[str | None, bool]:
    """Returns (run id, created); the id is None when `skip` found the group held."""
    if untrusted:
        sql = "SELECT * FROM cryo.submit_untrusted_script(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    else:
        sql = "SELECT * FROM cryo.submit_script(%s, %s, %s, %s, %s, %s, %s, %s, NULL, NULL, %s, %s)"
    cur = await conn.execute(
        sql, (org, project, filename, interpreter, source, input, idempotency_key, required_caps,
              concurrency, policy))
    run_id, created = await cur.fetchone()
    return run_id, created


async def submit_run(conn: AsyncConnection, org: str, project: str, workflow: str,
                     input: Any = None, idempotency_key: str | None = None) -> str:
    return await _one(conn, "SELECT cryo.submit_run(%s, %s, %s, %s, %s)",
                      (org, project, workflow, None if input is None else Jsonb(input),
                       idempotency_key))


async def put_workflow(conn: AsyncConnection, org: str, project: str, name: str, *,
                       filename: str, interpreter: str | None, source: bytes) -> None:
    await conn.execute("SELECT cryo.put_workflow(%s, %s, %s, %s, %s, %s)",
                       (org, project, name, filename, interpreter, source))


async def cancel_run(conn: AsyncConnection, run_id: str) -> str:
    return await _one(conn, "SELECT cryo.cancel_run(%s)", (run_id,))


async def get_run(conn: AsyncConnection, run_id: str) -> Run:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.get_run(%s)", (run_id,))
    return await cur.fetchone()


async def list_runs(conn: AsyncConnection, org: str, project: str, limit: int = 50) -> list[Run]:
    cur = conn.cursor(row_factory=class_row(Run))
    await cur.execute("SELECT * FROM cryo.list_runs(%s, %s, %s)", (org, project, limit))
    return await cur.fetchall()


async def read_history(conn: AsyncConnection, run_id: str) -> list[HistoryEvent]:
    cur = conn.cursor(row_factory=class_row(HistoryEvent))
    await cur.execute("SELECT * FROM cryo.read_history(%s)", (run_id,))
    return await cur.fetchall()


# -- claims and the journal --------------------------------------------------------------

async def claim_job(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                    lease_seconds: float) -> Claim | None:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_job(%s, %s, %s, %s)",
                      (org, agent_id, caps, lease_seconds))
    return await cur.fetchone()


async def seal_run_input(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                         sealed: bytes) -> None:
    await conn.execute("SELECT cryo.seal_run_input(%s, %s, %s)", (run_id, token, sealed))


async def read_journal(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> list[Memo]:
    cur = conn.cursor(row_factory=class_row(Memo))
    await cur.execute("SELECT * FROM cryo.read_journal(%s, %s)", (run_id, token))
    return await cur.fetchall()


async def append_log(conn: AsyncConnection, run_id: str, token: uuid.UUID, data: bytes | None,
                     lease_seconds: float) -> bool:
    return await _one(conn, "SELECT cryo.append_log(%s, %s, %s, %s)",
                      (run_id, token, data, lease_seconds))


async def record_step(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                      family: str, name: str, ordinal: int, label: str | None,
                      result: bytes | None, exit_code: int | None) -> int:
    return await _one(conn, "SELECT cryo.record_step(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, family, name, ordinal, label, result, exit_code))


async def park_sleep(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                     ordinal: int, seconds: float) -> dt.datetime:
    return await _one(conn, "SELECT cryo.park_sleep(%s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, seconds))


async def annotate_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, text: bytes) -> None:
    await conn.execute("SELECT cryo.annotate_run(%s, %s, %s)", (run_id, token, text))


async def finish_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, outcome: str,
                     exit_code: int | None, error: str | None) -> None:
    await conn.execute("SELECT cryo.finish_run(%s, %s, %s, %s, %s)",
                       (run_id, token, outcome, exit_code, error))


async def release_claim(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    await conn.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))


async def read_logs(conn: AsyncConnection, run_id: str, after: int = 0,
                    limit: int = 500) -> list[LogChunk]:
    cur = conn.cursor(row_factory=class_row(LogChunk))
    await cur.execute("SELECT * FROM cryo.read_logs(%s, %s, %s)", (run_id, after, limit))
    return await cur.fetchall()


async def tick(conn: AsyncConnection) -> tuple[int, int]:
    cur = await conn.execute("SELECT * FROM cryo.tick()")
    expired, woken = await cur.fetchone()
    return expired, woken


# -- batched claims and completions (35_batch.sql) -----------------------------------------

async def claim_jobs(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                     lease_seconds: float, limit: int) -> list[Claim]:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_jobs(%s, %s, %s, %s, %s)",
                      (org, agent_id, caps, lease_seconds, limit))
    return await cur.fetchall()


async def finish_runs(
        conn: AsyncConnection, runs: list[tuple[str, uuid.UUID, str, int | None, str | None]],
) -> dict[str, bool]:
    """Each item is (run_id, token, outcome, exit_code, error); returns run_id -> finished."""
    cur = await conn.execute(
        "SELECT * FROM cryo.finish_runs(%s, %s, %s, %s, %s)",
        ([r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs],
         [r[3] for r in runs], [r[4] for r in runs]))
    return dict(await cur.fetchall())


# -- durable state (60_state.sql) ---------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Cell:
    key: str
    value: bytes
    version: int
    created_by_run: str
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


_SCOPE = "cryo.state_scope(%s, %s, %s, %s)"


async def state_get(conn: AsyncConnection, org: str, project: str, run_id: str | None,
                    entity: str | None, key: str) -> Cell | None:
    cur = await conn.execute(
        f"SELECT value, version, created_by_run, updated_at FROM cryo.state_get({_SCOPE}, %s)",
        (org, project, run_id, entity, key))
    row = await cur.fetchone()
    return Cell(key, *row) if row else None


async def state_list(conn: AsyncConnection, org: str, project: str, run_id: str | None,
                     entity: str | None) -> list[Cell]:
    cur = conn.cursor(row_factory=class_row(Cell))
    await cur.execute(f"SELECT * FROM cryo.state_list({_SCOPE})", (org, project, run_id, entity))
    return await cur.fetchall()


async def state_set(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes) -> int:
    return await _one(conn, "SELECT cryo.state_set(%s, %s, %s, %s, %s)",
                      (run_id, token, entity, key, value))


async def state_delete(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                       key: str) -> bool:
    return await _one(conn, "SELECT cryo.state_delete(%s, %s, %s, %s)",
                      (run_id, token, entity, key))


async def state_add(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes, *, path: str, name: str, ordinal: int) -> StateAnswer:
    cur = await conn.execute("SELECT * FROM cryo.state_add(%s, %s, %s, %s, %s, %s, %s, %s)",
                             (run_id, token, entity, key, value, path, name, ordinal))
    return StateAnswer(*await cur.fetchone())


async def state_cas(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                    key: str, value: bytes, expect: int, *, path: str, name: str,
                    ordinal: int) -> StateAnswer:
    cur = await conn.execute("SELECT * FROM cryo.state_cas(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                             (run_id, token, entity, key, value, expect, path, name, ordinal))
    return StateAnswer(*await cur.fetchone())


async def state_incr(conn: AsyncConnection, run_id: str, token: uuid.UUID, entity: str | None,
                     key: str, expect: int | None, value: bytes | None, result: bytes | None, *,
                     path: str, name: str, ordinal: int) -> IncrStep:
    cur = await conn.execute(
        "SELECT * FROM cryo.state_incr(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, token, entity, key, expect, value, result, path, name, ordinal))
    return IncrStep(*await cur.fetchone())


# -- signals, events, children, outputs -------------------------------------------------

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


async def send_signal(conn: AsyncConnection, run_id: str, name: str, payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.send_signal(%s, %s, %s)", (run_id, name, payload))


async def wait_signal(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                      name: str, ordinal: int, timeout: float | None) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_signal(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, ordinal, timeout))
    return await cur.fetchone()


async def wait_event(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                     name: str, ordinal: int, timeout: float | None) -> WaitAnswer:
    cur = conn.cursor(row_factory=class_row(WaitAnswer))
    await cur.execute("SELECT * FROM cryo.wait_event(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, ordinal, timeout))
    return await cur.fetchone()


async def publish_event(conn: AsyncConnection, org: str, project: str, name: str,
                        payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.publish_event(%s, %s, %s, %s)",
                      (org, project, name, payload))


async def emit_from_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                        ordinal: int, name: str, payload: bytes) -> int:
    return await _one(conn, "SELECT cryo.emit_from_run(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, name, payload))


async def list_events(conn: AsyncConnection, org: str, project: str, name: str | None,
                      limit: int) -> list[Event]:
    cur = conn.cursor(row_factory=class_row(Event))
    await cur.execute("SELECT * FROM cryo.list_events(%s, %s, %s, %s)", (org, project, name, limit))
    return await cur.fetchall()


async def spawn_run(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                    ordinal: int, filename: str, interpreter: str | None, source: bytes,
                    input: bytes | None, required_caps: list[str]) -> str:
    return await _one(conn, "SELECT cryo.spawn_run(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, filename, interpreter, source, input,
                       required_caps))


async def submit_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                          name: str, source: bytes, required_caps: list[str], retries: int,
                          retry_backoff: float, retry_on: list[int] | None) -> str:
    return await _one(conn, "SELECT cryo.submit_activity(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, name, source, required_caps, retries, retry_backoff,
                       retry_on))


async def collect_activity(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                           ordinal: int, name: str) -> tuple[bool, str, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.collect_activity(%s, %s, %s, %s, %s)",
                             (run_id, token, path, ordinal, name))
    parked, child, code = await cur.fetchone()
    return parked, child, code


async def wait_all_activities(conn: AsyncConnection, run_id: str, token: uuid.UUID, *,
                              path: str, ordinal: int) -> tuple[bool, int | None]:
    cur = await conn.execute("SELECT * FROM cryo.wait_all_activities(%s, %s, %s, %s)",
                             (run_id, token, path, ordinal))
    parked, failed = await cur.fetchone()
    return parked, failed


async def set_output(conn: AsyncConnection, run_id: str, token: uuid.UUID, key: str,
                     value: bytes) -> None:
    await conn.execute("SELECT cryo.set_output(%s, %s, %s, %s)", (run_id, token, key, value))


async def read_outputs(conn: AsyncConnection, run_id: str) -> list[tuple[str, bytes]]:
    cur = await conn.execute("SELECT key, value FROM cryo.read_outputs(%s)", (run_id,))
    return [(k, v) for k, v in await cur.fetchall()]


async def read_last_attempt_log(conn: AsyncConnection, run_id: str) -> list[LogChunk]:
    cur = conn.cursor(row_factory=class_row(LogChunk))
    await cur.execute("SELECT * FROM cryo.read_last_attempt_log(%s)", (run_id,))
    return await cur.fetchall()


# -- admission and leases -----------------------------------------------------------------

async def acquire_lock(conn: AsyncConnection, run_id: str, token: uuid.UUID, *, path: str,
                       ordinal: int, group: str, scoped: bool) -> bool:
    return await _one(conn, "SELECT cryo.acquire_lock(%s, %s, %s, %s, %s, %s)",
                      (run_id, token, path, ordinal, group, scoped))


async def release_lock(conn: AsyncConnection, run_id: str, token: uuid.UUID, group: str) -> bool:
    return await _one(conn, "SELECT cryo.release_lock(%s, %s, %s)", (run_id, token, group))


async def watch_run(conn: AsyncConnection, run_id: str) -> None:
    await conn.execute("SELECT cryo.watch_run(%s)", (run_id,))
