"""Conformance: a read-modify-write of an entity cell under a lock, by several runs."""

import time

from cryosleep import script

with script.lock("conf-tally"):
    n = script.state_get("total", entity="conf-tally") or 0
    time.sleep(0.2)  # widen the race a missing lock would lose
    script.state_set("total", n + 1, entity="conf-tally")
print("done")
