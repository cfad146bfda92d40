"""cryosleep: durable workflows in Python for cryopg. Use it as `from cryosleep import script`.

Standard library only. A script using it must run under a cryopg agent (which sets
$CRYO_SOCKET); the agent puts this package on PYTHONPATH of the scripts it runs.
"""

from __future__ import annotations

from cryosleep import script
from cryosleep.errors import (
    AgentTooOld,
    AgentUnavailable,
    CryoError,
    ScriptError,
    StepFailed,
    WaitEventTimeout,
    WaitSignalTimeout,
    WaitTimeout,
)

__version__ = "0.1.0"
__all__ = [
    "AgentTooOld", "AgentUnavailable", "CryoError", "ScriptError", "StepFailed",
    "WaitEventTimeout", "WaitSignalTimeout", "WaitTimeout", "script",
]
