"""What a deployment chose for artifacts, read once from the environment."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path

from cryopg.objectstore import S3Settings

DEFAULT_DIR = ".cryopg-artifacts"  # beside .cryopg/ when `cryopg dev` runs in a checkout
DEFAULT_RETENTION = dt.timedelta(days=30)
# A blob no name points at stays this long, so a put racing the collector finds it.
COLLECT_GRACE = dt.timedelta(minutes=10)
DEFAULT_STORE_TIMEOUT = dt.timedelta(seconds=10)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# The clients' side (an agent, `cryopg artifact` outside a run): how long a put or get
# keeps retrying a server or store that does not answer before it fails with one line.
CLIENT_TIMEOUT_ENV = "CRYOPG_ARTIFACTS_TIMEOUT"
DEFAULT_CLIENT_TIMEOUT = 30.0


def client_timeout(env: dict[str, str] | None = None) -> float:
    """CRYOPG_ARTIFACTS_TIMEOUT in seconds (default 30; a value that is not a positive
    number counts as unset)."""
    text = (os.environ if env is None else env).get(CLIENT_TIMEOUT_ENV) or ""
    try:
        value = float(text or DEFAULT_CLIENT_TIMEOUT)
    except ValueError:
        return DEFAULT_CLIENT_TIMEOUT
    return value if 0 < value < float("inf") else DEFAULT_CLIENT_TIMEOUT


@dataclasses.dataclass(frozen=True)
class ArtifactSettings:
    directory: Path
    s3: S3Settings | None
    proxy: bool  # agents move bytes through the server even when the store could sign
    max_bytes: int | None  # per project, each distinct blob counted once
    retention: dt.timedelta  # cached (--key) artifacts
    grace: dt.timedelta = COLLECT_GRACE
    # How long one store request may go without an answer before the put or get it
    # serves fails (503 artifact_store_unavailable, naming the store), retries included.
    store_timeout: dt.timedelta = DEFAULT_STORE_TIMEOUT

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ArtifactSettings:
        env = dict(os.environ if env is None else env)
        bucket = env.get("CRYOPG_ARTIFACTS_S3_BUCKET")
        s3 = None
        if bucket:
            s3 = S3Settings(
                bucket=bucket,
                endpoint=env.get("CRYOPG_ARTIFACTS_S3_ENDPOINT") or None,
                region=env.get("CRYOPG_ARTIFACTS_S3_REGION") or "us-east-1",
                access_key=env.get("CRYOPG_ARTIFACTS_S3_ACCESS_KEY_ID")
                or env.get("AWS_ACCESS_KEY_ID"),
                secret_key=env.get("CRYOPG_ARTIFACTS_S3_SECRET_ACCESS_KEY")
                or env.get("AWS_SECRET_ACCESS_KEY"))
        return cls(
            directory=Path(env.get("CRYOPG_ARTIFACTS_DIR") or Path.cwd() / DEFAULT_DIR),
            s3=s3,
            proxy=_flag(env.get("CRYOPG_ARTIFACTS_PROXY", ""), "CRYOPG_ARTIFACTS_PROXY"),
            max_bytes=_bytes(env.get("CRYOPG_ARTIFACTS_MAX_BYTES", "")),
            retention=_duration(env.get("CRYOPG_RETENTION_ARTIFACTS", ""),
                                "CRYOPG_RETENTION_ARTIFACTS") or DEFAULT_RETENTION,
            store_timeout=_duration(env.get("CRYOPG_ARTIFACTS_STORE_TIMEOUT", ""),
                                    "CRYOPG_ARTIFACTS_STORE_TIMEOUT") or DEFAULT_STORE_TIMEOUT)


def _flag(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name} must be 1 or 0, not {text!r}")


_SIZES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _bytes(text: str) -> int | None:
    """'', '1000', '512M', '10GiB' -> bytes (None: no bound)."""
    raw = text.strip().lower().removesuffix("ib").removesuffix("b")
    if not raw:
        return None
    scale = _SIZES.get(raw[-1], 1)
    number = raw[:-1] if raw[-1] in _SIZES else raw
    if not number.isdigit() or int(number) * scale <= 0:
        raise ValueError(f"CRYOPG_ARTIFACTS_MAX_BYTES must be a positive size such as "
                         f"1000000, 512M or 10G, not {text!r}")
    return int(number) * scale


def _duration(text: str, name: str) -> dt.timedelta | None:
    """'', '3600', '12h', '30d' -> a period (None: the default)."""
    raw = text.strip().lower()
    if not raw:
        return None
    scale = _UNITS.get(raw[-1], 1)
    number = raw[:-1] if raw[-1] in _UNITS else raw
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"{name} must be a positive period such as 3600, 12h or 30d, "
                         f"not {text!r}")
    return dt.timedelta(seconds=int(number) * scale)
