"""Conformance: a failing step_fn is re-run on the next attempt (the child's retry)."""

import os

from cryosleep import script

given = script.input()
child = os.path.join(given["dir"], "flaky_step.child.py")
out = script.activity("flaky", [*given["child_argv"], child], retries=1, retry_backoff="200ms")
print(out, end="")
print("collected")
