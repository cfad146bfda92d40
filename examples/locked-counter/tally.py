"""Count this run once in a shared tally, under a lock, then sleep.

A script replays from the top after every park (the sleep here), so the lock's body
runs again on the next pass. A read-then-set counts twice: the replay reads the value the
first pass wrote and adds one more. state_incr is a recorded call: the replay gets the
total the first pass got and adds nothing.
"""

from cryosleep import script

with script.lock("tally"):
    # Not: n = script.state_get("total", entity="tally") or 0
    #      script.state_set("total", n + 1, entity="tally")   <- runs again on replay
    total = script.state_incr("total", entity="tally", as_="count-me")
script.sleep("1s")  # parks; the next pass replays from the top
print(f"counted once: total is {total}")
