"""The one place an S3 client (obstore's) is built, for finished runs' logs
(cryopg/logstore/) and artifact bytes (cryopg/artifacts/) alike: where the bucket is,
from settings, and how long its requests may take, from the caller. The two differ on
purpose: the log mover fails fast and tries again next round, while an artifact
download may stream for as long as its bytes need but must hear from the store within
the deployment's timeout."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from obstore.store import S3Store


@dataclasses.dataclass(frozen=True)
class S3Settings:
    bucket: str
    endpoint: str | None  # None: AWS itself, in `region`
    region: str
    access_key: str | None  # None (with secret_key): the environment's credentials
    secret_key: str | None


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """How long one client's requests may take, retries included."""

    connect: dt.timedelta
    request: dt.timedelta  # one request whole, its body included
    retry: dt.timedelta  # a call's retries, all together
    retries: int
    read: dt.timedelta | None = None  # between two reads of an answer (None: no bound)
    # The first and the longest pause between retries (None: obstore's own).
    backoff: tuple[dt.timedelta, dt.timedelta] | None = None


def s3_client(s3: S3Settings, timeouts: Timeouts) -> S3Store:
    # Imported here: the CLI and the agent read the settings above, never the client.
    from obstore.store import S3Store as Client

    config: dict[str, Any] = {"region": s3.region, "virtual_hosted_style_request": False}
    if s3.endpoint:
        config["endpoint"] = s3.endpoint
    if s3.access_key is not None:
        config["access_key_id"] = s3.access_key
    if s3.secret_key is not None:
        config["secret_access_key"] = s3.secret_key
    options: dict[str, Any] = {
        "allow_http": bool(s3.endpoint and s3.endpoint.startswith("http:")),
        "connect_timeout": timeouts.connect, "timeout": timeouts.request}
    if timeouts.read is not None:
        options["read_timeout"] = timeouts.read
    backoff: dict[str, Any] = {}
    if timeouts.backoff is not None:
        backoff = {"init_backoff": timeouts.backoff[0], "max_backoff": timeouts.backoff[1]}
    retry = {"max_retries": timeouts.retries, "backoff": backoff,
             "retry_timeout": timeouts.retry}
    return Client(s3.bucket, config=config, client_options=options,  # type: ignore[arg-type]
                  retry_config=retry)  # type: ignore[arg-type]
