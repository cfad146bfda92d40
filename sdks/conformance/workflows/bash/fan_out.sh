# Conformance: fan-out of activities, one retried on exit 75.
source "$CRYO_PRELUDE"
for i in 1 2 3; do cryo_activity_submit "job-$i" -- sh -c "echo out-$i" >/dev/null; done
cryo_activity_submit flaky --retries 2 --retry-backoff 200ms --retry-on-exit 75 -- \
  sh -c 'if [ "$CRYO_ATTEMPT" -ge 2 ]; then echo "flaky-ok attempt $CRYO_ATTEMPT"; else exit 75; fi' >/dev/null
flaky=$(cryo_activity_collect flaky)
failed=$(cryo_activity_wait_all)
first=$(cryo_activity_collect job-1)
echo "flaky=$flaky"
echo "failed=$failed"
echo "job-1=$first"
