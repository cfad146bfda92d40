"""Conformance: the three failure kinds and the bad inputs, replayed over three passes."""

from cryosleep import script
from cryosleep.script import ScriptError, StepFailed, WaitSignalTimeout

print("pass")
print(f"unchecked={script.step_unchecked('probe', ['sh', '-c', 'exit 3']).exit_code}")
try:
    script.step("fails", ["sh", "-c", "exit 4"])
except StepFailed as e:
    print(f"step failed exit={e.exit_code}")
script.activity_submit("dup", ["true"])
try:
    script.activity_submit("dup", ["true"])
except ScriptError as e:
    print(f"script error {e.code}")
try:
    script.wait_signal("nudge", timeout="500ms")
except WaitSignalTimeout:
    print("signal timed out")
try:
    script.sleep("500ms")
except Exception:
    print("swallowed")  # never printed: a parking call does not return on its pass
# Last, after every park: a step_fn that raised records nothing, so durable calls made
# after catching it would sit one position earlier on the replay than on this pass
# (the journal's positions are dense), and strict replay would refuse the run.
try:
    script.step_fn("bad", lambda: {1, 2})
except ScriptError as e:
    print(f"not json {e.code}")
print("done")
