"""Conformance: fan-out of activities, one retried on exit 75."""

from cryosleep import script

for i in (1, 2, 3):
    script.activity_submit(f"job-{i}", ["sh", "-c", f"echo out-{i}"])
script.activity_submit(
    "flaky",
    ["sh", "-c", 'if [ "$CRYO_ATTEMPT" -ge 2 ]; then echo "flaky-ok attempt $CRYO_ATTEMPT"; '
     "else exit 75; fi"],
    retries=2,
    retry_backoff="200ms",
    retry_on_exit=[75],
)
flaky = script.activity_collect("flaky")
failed = script.activity_wait_all()
first = script.activity_collect("job-1")
# Printed only once every wait has been answered, so the log is the same however many
# passes the waits took.
print(f"flaky={flaky.strip()}")
print(f"failed={failed}")
print(f"job-1={first.strip()}")
