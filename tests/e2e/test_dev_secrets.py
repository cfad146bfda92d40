"""Issue 37 item 6: in `cryopg dev` the embedded agents share the server's process, so a
job's parent is the process that read the deployment's secrets. A Member's script must
find none of them in /proc/<pid>/environ of its parent or any other ancestor
(cryopg/secret_env.py scrubs them once the configuration is read)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from cryopg.seal import generate_master_key
from tests.e2e.test_dev_stack import CLI, _start_dev, _stop

LEAK_SCRIPT = """\
pid=$$
while [ "$pid" -gt 1 ]; do
  if tr '\\0' '\\n' < /proc/$pid/environ 2>/dev/null | grep -q "{mark}"; then
    echo "LEAK in $pid $(cat /proc/$pid/comm)"
  fi
  pid=$(awk '{{print $4}}' /proc/$pid/stat)
done
echo walked
"""


def test_a_job_cannot_read_the_dev_servers_secrets_from_proc(tmp_path: Path, dsn: str) -> None:
    mark = f"sekrit-{secrets.token_hex(8)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRYO_", "CRYOPG_"))}
    env.update(CRYOPG_MASTER_KEY=generate_master_key(),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
               CRYOPG_OIDC_CLIENT_SECRET=f"{mark}-oidc",
               CRYOPG_LOGS_S3_SECRET_ACCESS_KEY=f"{mark}-s3",
               AWS_SECRET_ACCESS_KEY=f"{mark}-aws")
    proc, _ = _start_dev(tmp_path, dsn, env)
    try:
        (tmp_path / "leak.sh").write_text(LEAK_SCRIPT.format(mark=mark))
        done = subprocess.run([*CLI, "submit", "leak.sh", "--follow"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert "walked" in done.stdout, done.stdout + done.stderr
        assert "LEAK" not in done.stdout, done.stdout
        # And the dev process itself holds them in no readable form.
        assert mark not in Path(f"/proc/{proc.pid}/environ").read_bytes().decode(errors="replace")
    finally:
        _stop(proc)
