"""Artifacts end to end: a bash script and a Python script put, get and list through
the agent socket of a real `cryopg dev`, and the CLI reads them from outside the run."""

from __future__ import annotations

import hashlib
import json

from tests.conftest import Stack
from tests.e2e.helpers import script, show, submit, wait_for


def _ended(stack: Stack, run_id: str) -> dict:
    return wait_for(f"{run_id} to end", lambda: (s := show(stack, run_id))["status"] in (
        "succeeded", "failed") and s, timeout=60)


def test_a_bash_run_puts_gets_and_lists(stack: Stack) -> None:
    path = script(stack.dir, "art.sh", """set -e
head -c 300000 /dev/urandom > data.bin
sha256sum data.bin | cut -d' ' -f1 > want.txt
cryopg artifact put data data.bin
cryopg artifact put deps want.txt --key lock-1
cryopg artifact get data copy.bin
cmp data.bin copy.bin
cryopg artifact list
cryopg artifact put big /nonexistent || echo "refused $?"
""")
    run_id = submit(stack, path)
    run = _ended(stack, run_id)
    logs = stack.cli("logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "refused 2" in logs and "data\t300000\t" in logs
    listed = stack.cli("artifact", "list", run_id, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [a["name"] for a in json.loads(listed.stdout)] == ["data"]
    got = stack.cli("artifact", "get", "data", str(stack.dir / "out.bin"), "--run", run_id)
    assert got.returncode == 0, got.stderr
    want = hashlib.sha256((stack.dir / "out.bin").read_bytes()).hexdigest()
    assert json.loads(listed.stdout)[0]["sha256"] == want
    cached = stack.cli("artifact", "list", "--cached", "--json")
    assert [(a["name"], a["key"]) for a in json.loads(cached.stdout)] == [("deps", "lock-1")]
    # Outside a run a put needs a key, and with one any member may put.
    assert stack.cli("artifact", "put", "x", str(stack.dir / "out.bin")).returncode == 2
    put = stack.cli("artifact", "put", "x", str(stack.dir / "out.bin"), "--key", "k")
    assert put.returncode == 0 and put.stdout.startswith(want), put.stderr
    missing = stack.cli("artifact", "get", "nope", "--run", run_id)
    assert missing.returncode == 2 and "no artifact" in missing.stderr


def test_a_python_run_uses_the_sdk(stack: Stack) -> None:
    path = script(stack.dir, "art.py", """from cryosleep import script
with open("in.txt", "w") as fh:
    fh.write("hello artifacts")
row = script.artifact_put("greeting", "in.txt", key="v1")
back = script.artifact_get("greeting", "out.txt", key="v1")
assert open(back).read() == "hello artifacts"
script.artifact_put("mine", "in.txt")
print(sorted(a["name"] for a in script.artifact_list()), row["size"])
""")
    run_id = submit(stack, path)
    run = _ended(stack, run_id)
    logs = stack.cli("logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "['mine'] 15" in logs


def test_a_tool_put_as_an_artifact_comes_back_executable(stack: Stack) -> None:
    """Inside a run, through the agent socket: the CLI verb and the Python SDK keep the
    file's executable bit (issue 42, item 5: it came back 0600)."""
    path = script(stack.dir, "tool.sh", """set -e
printf '#!/bin/sh\\necho tool ran\\n' > tool
chmod 755 tool
echo text > note.txt
cryopg artifact put tool tool
cryopg artifact put note note.txt
cryopg artifact get tool got-tool
cryopg artifact get note got-note
./got-tool
test ! -x got-note && echo "note not executable"
python3 - <<'PY'
import os
from cryosleep import script
script.artifact_get("tool", "sdk-tool")
print("sdk", "executable" if os.access("sdk-tool", os.X_OK) else "NOT executable")
PY
""")
    run_id = submit(stack, path)
    run = _ended(stack, run_id)
    logs = stack.cli("logs", run_id).stdout
    assert run["status"] == "succeeded", logs
    assert "tool ran" in logs and "note not executable" in logs and "sdk executable" in logs
