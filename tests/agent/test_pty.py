"""What a script printed just before a parking verb reaches the log, even when the event
loop has not yet woken for the PTY."""

from __future__ import annotations

import time

from agent.runner import PtyProcess


async def test_read_pending_takes_what_the_loop_has_not_read_yet() -> None:
    seen: list[bytes] = []
    proc = await PtyProcess.spawn(
        ["sh", "-c", "echo env=pr-7; exec sleep 30"], cwd="/", env={"PATH": "/usr/bin:/bin"},
        on_output=seen.append,
    )
    try:
        # Block the loop, as the verb handler does between the script's write and the park:
        # the reader callback cannot run, so only read_pending can see the line.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc.read_pending()
            if b"".join(seen):
                break
            time.sleep(0.05)
        assert b"".join(seen) == b"env=pr-7\n"
    finally:
        proc.kill()
        await proc.wait()
        proc.close()
