"""Keeping a server's or agent's secrets out of reach of the jobs it starts.

Jobs get an allowlisted environment (agent/env.py), but a job runs as a child of its
agent, and in `cryopg dev` the agents share the server's process: `/proc/$PPID/environ`
showed the S3 keys and CRYOPG_OIDC_CLIENT_SECRET. Deleting them from os.environ is not
enough, since that file shows the environment block exec left on the stack, which
unsetenv never touches. So, once the configuration has been read:

- every variable whose name says it holds a secret is removed from os.environ (so no
  later child inherits it) and its bytes in that block are overwritten with NULs, which
  empties it from /proc/<pid>/environ for every reader, root included;
- the process is made non-dumpable (PR_SET_DUMPABLE 0): its /proc files then belong to
  root, so a job of the same non-root uid cannot read its environ or its memory (where
  the master key lives) at all. A job running as root still can read memory: untrusted
  jobs run as another user (agent/sandbox.py).
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

SECRET_NAME = re.compile(
    r"SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|PRIVATE|(?:^|_)KEY(?:$|_)|ACCESS_KEY|"
    r"DATABASE_URL|_DSN$|^PGPASS", re.IGNORECASE)
PR_SET_DUMPABLE = 4


def secret_names(environ: dict[str, str] | os._Environ[str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return sorted(n for n in env if SECRET_NAME.search(n))


def scrub_secrets() -> list[str]:
    """Removes the secret variables (see the module doc) and makes the process
    non-dumpable; returns the names removed. Call it after the configuration is read."""
    names = secret_names()
    for name in names:
        os.environ.pop(name, None)
    _blank_exec_environ({n.encode() for n in names})
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    return names


def _blank_exec_environ(names: set[bytes]) -> None:
    """Overwrites NAME=VALUE of each name in the environment block exec wrote (what
    /proc/self/environ reads: env_start..env_end, fields 50 and 51 of /proc/self/stat)."""
    if not names:
        return
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            offset = 0
            for entry in block.split(b"\0"):
                if entry.split(b"=", 1)[0] in names:
                    mem.seek(start + offset)
                    mem.write(b"\0" * len(entry))
                offset += len(entry) + 1
    except (OSError, ValueError, IndexError):
        pass  # no /proc (not Linux): os.environ is scrubbed all the same
