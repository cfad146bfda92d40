"""An agent's build id, and how it drains.

The build id is the package version and a digest of the agent's own source (agent/,
cryopg/, sql/), so two agents of one version but different code tell apart; an operator
retires a build with `cryopg agents drain --build OLD`. CRYOPG_AGENT_BUILD overrides it
(a deployment that stamps its images).

Draining means: finish the run held now, take no new one, exit. SIGTERM drains (what a
container runtime or systemd sends first); a second SIGTERM, or SIGINT, stops at once
(the script is killed and the run handed back). The server can ask for a drain too,
at the agent's next claim.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import secrets
import signal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("agent", "cryopg", "sql")
SOURCE_SUFFIXES = (".py", ".sql")
# One per process: a restarted agent under the same id is not the one asked to drain.
INSTANCE = secrets.token_hex(8)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("cryopg")
    except Exception:  # noqa: BLE001 - not installed as a distribution: a checkout
        return "0"


@functools.cache
def build_id() -> str:
    """`VERSION+DIGEST` (12 hex digits of SHA-256 over the source files), or
    CRYOPG_AGENT_BUILD."""
    given = os.environ.get("CRYOPG_AGENT_BUILD", "").strip()
    if given:
        return given[:200]
    digest = hashlib.sha256()
    for top in SOURCE_DIRS:
        base = ROOT / top
        for path in sorted(p for p in base.rglob("*") if p.suffix in SOURCE_SUFFIXES):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return f"{_version()}+{digest.hexdigest()[:12]}"


def signal_events() -> tuple[asyncio.Event, asyncio.Event]:
    """(stop, drain), set by signals: SIGTERM drains and a second one stops; SIGINT
    stops."""
    stop, drain = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        if drain.is_set():
            stop.set()
        drain.set()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    return stop, drain
