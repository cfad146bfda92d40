"""Server settings."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from cryopg.replica import replica_id_from_env
from cryopg.seal import MasterKey

if TYPE_CHECKING:
    from cryopg.logstore.settings import LogStoreSettings
    from cryopg.server.oidc import OidcSettings


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0, not {raw!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    database_url: str
    master_key: MasterKey
    claim_seconds: float = 30.0
    tick_interval: float = 1.0
    claim_wait_max: float = 25.0
    pool_size: int = 10
    oidc: OidcSettings | None = None  # sign-in through an OIDC issuer (CRYOPG_OIDC_*)
    # This replica's name in /api/v1/health and history rows (CRYOPG_REPLICA_ID).
    replica_id: str = dataclasses.field(default_factory=replica_id_from_env)
    # Finished runs' logs in an S3-compatible store (CRYOPG_LOGS_S3_*); None: the database.
    log_store: LogStoreSettings | None = None
    # GET /metrics on the API's address needs `Authorization: Bearer` this secret
    # (CRYOPG_METRICS_TOKEN); unset, it answers 404 there (docs/operations.md).
    metrics_token: str | None = dataclasses.field(
        default_factory=lambda: os.environ.get("CRYOPG_METRICS_TOKEN") or None)
    # host:port of a second listener serving only GET /metrics, without auth
    # (CRYOPG_METRICS_ADDR): for a scraper on a private network.
    metrics_addr: str | None = dataclasses.field(
        default_factory=lambda: os.environ.get("CRYOPG_METRICS_ADDR") or None)
    # How long a scrape's database part is reused by the scrapes after it
    # (CRYOPG_METRICS_CACHE_SECONDS, default 1; 0: read on every scrape).
    metrics_cache_seconds: float = dataclasses.field(
        default_factory=lambda: _seconds_from_env("CRYOPG_METRICS_CACHE_SECONDS", 1.0))
    # How old the queue-depth gauge may grow before the tick's fold recounts the queue
    # (CRYOPG_METRICS_QUEUE_RECOUNT_SECONDS, default 10; 0: on every fold). A recount
    # reads every live queue row: ~200 ms of the database's time with 100,000 parked runs.
    metrics_queue_recount_seconds: float = dataclasses.field(
        default_factory=lambda: _seconds_from_env("CRYOPG_METRICS_QUEUE_RECOUNT_SECONDS", 10.0))
