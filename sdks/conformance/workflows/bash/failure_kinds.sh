# Conformance: the failure kinds as bash sees them (exit codes), over three passes.
source "$CRYO_PRELUDE"
echo pass
# Scripts run under bash -eu: a command that may fail is caught with `|| rc=$?`.
rc=0
cryo_step probe -- sh -c 'exit 3' || rc=$?
echo "unchecked=$rc"
if ! cryo_step fails -- sh -c 'exit 4'; then echo "step failed exit=4"; fi
cryo_activity_submit dup -- true >/dev/null
cryo_activity_submit dup -- true >/dev/null 2>&1 || echo "script error bad_request"
cryo_wait_signal nudge --timeout 500ms || [ $? -ne 124 ] || echo "signal timed out"
cryo_sleep 500ms || echo swallowed
# (no "not json" line: bash has no native values to encode; see lines_by_lang)
echo done
