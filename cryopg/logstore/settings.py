"""CRYOPG_LOGS_S3_*: where finished runs' logs go, read once at server start."""

from __future__ import annotations

import dataclasses
import os

from cryopg.objectstore import S3Settings

RUN_BUFFER_BYTES = 4 << 20  # a finished run's log kept while the store is down
REPLICA_BUFFER_BYTES = 64 << 20  # the same, for all one replica is moving
LEASE_SECONDS = 60.0  # a mover's hold on a log; another replica takes over once it lapses
OUTAGE_GRACE_SECONDS = 300.0  # the store down this long before waiting logs are bounded


def _seconds(env: dict[str, str], name: str, default: float, low: float, high: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g} seconds")
    return value


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
    # How long a mover's lease lasts unrenewed (it renews a third of the way through); it
    # must outlast the upload of one part and the final call that completes the object.
    lease_seconds: float = LEASE_SECONDS
    # A store failing for less than this only delays moves; past it, waiting logs are cut
    # to the bounds above, each cut marked in the log.
    outage_grace_seconds: float = OUTAGE_GRACE_SECONDS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> LogStoreSettings | None:
        """None when CRYOPG_LOGS_S3_BUCKET is unset (logs stay in the database)."""
        env = dict(os.environ if env is None else env)
        bucket = env.get("CRYOPG_LOGS_S3_BUCKET", "").strip()
        if not bucket:
            return None
        move_after = _seconds(env, "CRYOPG_LOGS_S3_MOVE_AFTER", 30.0, 0, 86400)
        lease = _seconds(env, "CRYOPG_LOGS_S3_LEASE", LEASE_SECONDS, 1, 3600)
        grace = _seconds(env, "CRYOPG_LOGS_S3_OUTAGE_GRACE", OUTAGE_GRACE_SECONDS, 0, 86400)
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
            lease_seconds=lease,
            outage_grace_seconds=grace,
        )

    def s3(self) -> S3Settings:
        """The bucket's place and credentials (an access key without a secret gets an
        empty secret; without an access key, the environment's credentials apply)."""
        key = self.access_key_id
        secret = (self.secret_access_key or "") if key else None
        return S3Settings(bucket=self.bucket, endpoint=self.endpoint, region=self.region,
                          access_key=key or None, secret_key=secret)
