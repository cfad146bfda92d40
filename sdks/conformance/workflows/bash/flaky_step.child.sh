# Child of flaky_step: `flaky` fails on the first attempt only. bash has no step_fn and a
# failed `cryo_step` is recorded, so here the failure happens before the step is reached.
# The retry re-runs the whole unit: `before` runs again on attempt 2.
source "$CRYO_PRELUDE"
echo "attempt $CRYO_ATTEMPT"
a=$(cryo_step before -- sh -c 'echo "before ran" >&2; echo 1')
if [ "$CRYO_ATTEMPT" = 1 ]; then
    echo "flaky ran"
    exit 1
fi
b=$(cryo_step flaky -- sh -c 'echo "flaky ran" >&2; echo ok')
echo "before=$a flaky=$b"
