"""cryopg/secret_env.py: once scrubbed, a process's secrets are in neither os.environ
nor /proc/<pid>/environ (the block exec wrote), and the process is non-dumpable, which
keeps a same-uid, non-root child from reading its /proc files at all."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import ctypes, subprocess, sys
from cryopg.secret_env import scrub_secrets
print(scrub_secrets())
print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
got = subprocess.run(["cat", f"/proc/{__import__('os').getpid()}/environ"], capture_output=True)
print(b"sekrit" in got.stdout, b"CRYOPG_EGRESS_ALLOW=h.example" in got.stdout)
"""


def test_scrubbed_secrets_leave_environ_and_proc() -> None:
    env = dict(os.environ, CRYOPG_OIDC_CLIENT_SECRET="sekrit-1", AWS_SECRET_ACCESS_KEY="sekrit-2",
               CRYOPG_DATABASE_URL="postgresql://u:sekrit-3@h/db", CRYOPG_AGENT_TOKEN="sekrit-4",
               CRYOPG_EGRESS_ALLOW="h.example")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    removed, dumpable, leaked = done.stdout.splitlines()
    for name in ("CRYOPG_OIDC_CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY", "CRYOPG_DATABASE_URL",
                 "CRYOPG_AGENT_TOKEN"):
        assert name in removed
    assert "EGRESS" not in removed
    assert dumpable == "0"
    assert leaked == "False True"  # the secrets are gone; other settings stay
