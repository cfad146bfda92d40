# Conformance: a failing step is re-run on the next attempt (the child's retry).
source "$CRYO_PRELUDE"
dir=$(cryo_input dir)
cryo_activity flaky --retries 1 --retry-backoff 200ms -- bash "$dir/flaky_step.child.sh"
echo collected
