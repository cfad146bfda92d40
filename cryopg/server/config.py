"""Server settings."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cryopg.seal import MasterKey
from cryopg.server.replica import replica_id_from_env

if TYPE_CHECKING:
    from cryopg.logstore.settings import LogStoreSettings
    from cryopg.server.oidc import OidcSettings


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
