"""CRYOPG_LOGS_S3_*: where finished runs' logs go, read once at server start."""

from __future__ import annotations

import dataclasses
import os

RUN_BUFFER_BYTES = 4 << 20  # a finished run's log kept while the store is down
REPLICA_BUFFER_BYTES = 64 << 20  # the same, for all one replica is moving


@dataclasses.dataclass(frozen=True)
class LogStoreSettings:
    bucket: str
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
    prefix: str = "logs/"
    # A run's log moves this long after it ends (a graph reads its job's output first).
    move_after_seconds: float = 30.0
    run_buffer_bytes: int = RUN_BUFFER_BYTES
    replica_buffer_bytes: int = REPLICA_BUFFER_BYTES

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LogStoreSettings | None:
        """None when CRYOPG_LOGS_S3_BUCKET is unset (logs stay in the database)."""
        env = dict(os.environ if env is None else env)
        bucket = env.get("CRYOPG_LOGS_S3_BUCKET", "").strip()
        if not bucket:
            return None
        after = env.get("CRYOPG_LOGS_S3_MOVE_AFTER", "30")
        try:
            move_after = float(after)
        except ValueError:
            raise ValueError("CRYOPG_LOGS_S3_MOVE_AFTER must be a number of seconds") from None
        if not 0 <= move_after <= 86400:
            raise ValueError("CRYOPG_LOGS_S3_MOVE_AFTER must be between 0 and 86400 seconds")
        return cls(
            bucket=bucket,
            endpoint=env.get("CRYOPG_LOGS_S3_ENDPOINT") or None,
            region=env.get("CRYOPG_LOGS_S3_REGION") or env.get("AWS_REGION") or "us-east-1",
            access_key_id=(env.get("CRYOPG_LOGS_S3_ACCESS_KEY_ID")
                           or env.get("AWS_ACCESS_KEY_ID")),
            secret_access_key=(env.get("CRYOPG_LOGS_S3_SECRET_ACCESS_KEY")
                               or env.get("AWS_SECRET_ACCESS_KEY")),
            prefix=env.get("CRYOPG_LOGS_S3_PREFIX", "logs/"),
            move_after_seconds=move_after,
        )
