"""An agent takes runs and, while it holds the claim, streams logs and reads secrets."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row, dict_row

from cryopg.engine._sql import _one
from cryopg.engine.finish import FinishItem, log_offsets
from cryopg.engine.types import Claim, ClaimGrant, ClaimSecret, Memo


async def claim_job(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                    claim_seconds: float) -> Claim | None:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_job(%s, %s, %s, %s)",
                      (org, agent_id, caps, claim_seconds))
    return await cur.fetchone()


async def claim_jobs(conn: AsyncConnection, org: str, agent_id: str, caps: list[str],
                     claim_seconds: float, limit: int) -> list[Claim]:
    cur = conn.cursor(row_factory=class_row(Claim))
    await cur.execute("SELECT * FROM cryo.claim_jobs(%s, %s, %s, %s, %s)",
                      (org, agent_id, caps, claim_seconds, limit))
    return await cur.fetchall()


def _b64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _claim_grant(row: dict[str, Any]) -> ClaimGrant:
    claim = Claim(run_id=row["run_id"], claim_token=row["claim_token"], attempt=row["attempt"],
                  filename=row["filename"], interpreter=row["interpreter"],
                  source=row["source"], input=row["input"], input_clear=row["input_clear"],
                  workdir=row["workdir"], untrusted=bool(row["untrusted"]))
    journal = [Memo(seq=m["seq"], path=m["path"], family=m["family"], name=m["name"],
                    ordinal=m["ordinal"], status=m["status"], result=_b64(m["result"]),
                    exit_code=m["exit_code"], answer_clear=m["answer_clear"],
                    ref_run_id=m["ref_run_id"]) for m in row["journal"]]
    secrets = [ClaimSecret(name=s["name"], value=_b64(s["value"]), withheld=s["withheld"])
               for s in row["secrets"]]
    return ClaimGrant(agent_id=row["agent_id"], claim=claim, journal=journal, secrets=secrets,
                      agent_token=row["agent_token"])


async def claim_grants(conn: AsyncConnection, org: str, agent_ids: list[str], caps: list[str],
                       claim_seconds: float,
                       agent_tokens: list[str] | None = None) -> list[ClaimGrant]:
    """One claim per waiting agent (fewer when fewer runs are pending), each with the
    run's memos and the secrets its grant may carry, in one transaction; with
    agent_tokens (one per agent), each claim is bound to its agent's token."""
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute("SELECT * FROM cryo.claim_grants(%s, %s, %s, %s, %s)",
                      (org, agent_ids, caps, claim_seconds, agent_tokens), prepare=True)
    return [_claim_grant(row) for row in await cur.fetchall()]


async def finish_and_claim_grants(
        conn: AsyncConnection,
        runs: list[FinishItem],
        org: str, ask_agent_ids: list[str | None], caps: list[str], claim_seconds: float,
        ask_agent_tokens: list[str | None] | None = None,
) -> tuple[dict[str, bool], list[ClaimGrant]]:
    """finish_runs for `runs` (items as finish_runs takes them), then claim_grants for the
    agent asking beside each run that ended (None: no ask), in one statement and one
    commit; returns (run_id -> finished, the grants)."""
    cur = conn.cursor(row_factory=dict_row)
    await cur.execute(
        "SELECT * FROM cryo.finish_and_claim_grants(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s, %s, %s)",
        ([r[0] for r in runs], [r[1] for r in runs], [r[2] for r in runs],
         [r[3] for r in runs], [r[4] for r in runs], [r[5] for r in runs], org,
         ask_agent_ids, caps, claim_seconds, ask_agent_tokens, *log_offsets(runs)),
        prepare=True)
    done: dict[str, bool] = {}
    grants: list[ClaimGrant] = []
    for row in await cur.fetchall():
        if row["finished_run_id"] is not None:
            done[row["finished_run_id"]] = bool(row["finished"])
        else:
            grants.append(_claim_grant(row))
    return done, grants


async def check_claim(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    """Raises StaleClaim unless the token is the run's live claim."""
    await conn.execute("SELECT cryo.check_claim(%s, %s)", (run_id, token))


async def append_log(conn: AsyncConnection, run_id: str, token: uuid.UUID, data: bytes | None,
                     claim_seconds: float) -> bool:
    return await _one(conn, "SELECT cryo.append_log(%s, %s, %s, %s)",
                      (run_id, token, data, claim_seconds))


async def append_log_at(conn: AsyncConnection, run_id: str, token: uuid.UUID, offset: int,
                        length: int, data: bytes | None,
                        claim_seconds: float) -> tuple[bool, int]:
    """(cancel, the stored end of the pass's log after the call): the chunk is stored only
    at the stored end; short of offset + length, its tail past that end was not."""
    cur = await conn.execute("SELECT * FROM cryo.append_log_at(%s, %s, %s, %s, %s, %s)",
                             (run_id, token, offset, length, data, claim_seconds))
    row = await cur.fetchone()
    assert row is not None
    return bool(row[0]), int(row[1])


async def keep_log_context(conn: AsyncConnection, run_id: str, token: uuid.UUID,
                           context: bytes | None) -> None:
    await conn.execute("SELECT cryo.keep_log_context(%s, %s, %s)", (run_id, token, context))


async def log_context(conn: AsyncConnection, run_id: str) -> bytes | None:
    return await _one(conn, "SELECT cryo.log_context(%s)", (run_id,))


async def release_claim(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    await conn.execute("SELECT cryo.release_claim(%s, %s)", (run_id, token))


async def return_claim(conn: AsyncConnection, run_id: str, token: uuid.UUID) -> None:
    """Gives back a claim its agent never received (its attempt uncounted)."""
    await conn.execute("SELECT cryo.return_claim(%s, %s)", (run_id, token))
