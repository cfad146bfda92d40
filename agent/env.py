"""The sealed environment a script runs in: an allowlist, opt-in globs, and the CRYO_* handles."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import sys
from collections.abc import Mapping

from agent.sdk_env import add_sdk_paths

# Enough for ordinary tools to behave; everything else must be opted in.
ALLOWED_NAMES = frozenset(
    {"PATH", "HOME", "LANG", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR"}
)
ALLOWED_PREFIXES = ("LC_",)
# Never handed to a script, whatever the passthrough globs say: the agent's own
# credentials and configuration, and CRYO_* handles that only the agent may set.
FORBIDDEN_PREFIXES = ("CRYOPG_", "CRYO_")
# The one agent setting a job sees: the egress allowlist the http node's job enforces
# (host names and networks, no credential).
EGRESS_ALLOW = "CRYOPG_EGRESS_ALLOW"


def passthrough_globs(value: str | None) -> list[str]:
    """Split CRYO_ENV_PASSTHROUGH (comma or space separated fnmatch globs)."""
    return [g for g in re.split(r"[,\s]+", value or "") if g]


def sealed_env(
    source: Mapping[str, str],
    *,
    run_id: str,
    attempt: int | str,
    socket_path: str,
    input_file: str,
    agent_token: str | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = _base_env(source, agent_token)
    # The run's secrets, from its claim grant (none for an untrusted run). The server
    # refuses names that would replace the handles below or the allowlisted basics.
    for name, value in (secrets or {}).items():
        if not name.startswith(FORBIDDEN_PREFIXES):
            env[name] = value
    env["CRYO_SOCKET"] = socket_path
    env["CRYO_RUN_ID"] = run_id
    env["CRYO_ATTEMPT"] = str(attempt)
    env["CRYO_INPUT_FILE"] = input_file
    env["CRYO_IDEMPOTENCY_KEY"] = run_idempotency_key(run_id)
    return env


# The part of the environment every job of this agent shares, computed once per agent
# environment (some 0.1 ms a job: decoding and filtering every variable, the PATH and
# SDK lookups). It is recomputed whenever the agent's environment or token differs.
_BASE: tuple[dict[bytes, bytes], str | None, dict[str, str]] | None = None


def _base_env(source: Mapping[str, str], agent_token: str | None) -> dict[str, str]:
    global _BASE
    data = getattr(source, "_data", None)  # os.environ's raw bytes: compared in C
    if not isinstance(data, dict):
        return _filtered_env(source, agent_token)
    if _BASE is not None and _BASE[1] == agent_token and _BASE[0] == data:
        return dict(_BASE[2])
    env = _filtered_env(source, agent_token)
    _BASE = (dict(data), agent_token, dict(env))
    return env


def _filtered_env(source: Mapping[str, str], agent_token: str | None) -> dict[str, str]:
    globs = passthrough_globs(source.get("CRYO_ENV_PASSTHROUGH"))
    env: dict[str, str] = {}
    for name, value in source.items():
        if name.startswith(FORBIDDEN_PREFIXES):
            continue
        if agent_token and value == agent_token:
            continue  # the token under some other name is still the token
        if (
            name in ALLOWED_NAMES
            or name.startswith(ALLOWED_PREFIXES)
            or any(fnmatch.fnmatchcase(name, g) for g in globs)
        ):
            env[name] = value

    if source.get(EGRESS_ALLOW):
        env[EGRESS_ALLOW] = source[EGRESS_ALLOW]

    # The interpreter's bin dir holds the `cryopg` entry point the script calls back with.
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    first = [bindir]
    # Before it, the compiled `cryopg` scripts/setup builds (`cryopg step` without
    # starting Python; it hands every other command to the one in bindir).
    fast = os.path.join(os.path.dirname(bindir), "libexec", "cryopg-fast")
    if os.access(os.path.join(fast, "cryopg"), os.X_OK):
        first.insert(0, fast)
    parts = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p]
    env["PATH"] = os.pathsep.join([*first, *(p for p in parts if p not in first)])
    env.setdefault("TERM", "xterm")
    add_sdk_paths(env)  # this checkout's cryosleep package and bash prelude
    return env


def run_idempotency_key(run_id: str) -> str:
    """The key a job hands to the systems it changes. One per run: an activity (and each
    fan-out item) is its own run, so its key is its own, and it stays the same across
    the activity's retries and every re-dispatch of it to an agent."""
    return hashlib.sha256(f"cryo-run/{run_id}".encode()).hexdigest()[:32]
