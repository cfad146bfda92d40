# cryosleep bash prelude: cryo_* helpers over the in-script `cryopg` verbs.
#
#   source "${CRYO_PRELUDE:-/path/to/cryopg/sdks/bash/prelude.sh}"
#
# Every helper is a thin wrapper: arguments pass through to the verb, and the verb's
# exit code is the helper's (step: the command's; bounded waits: 124 on timeout;
# state add/cas: 3 when lost). A waiting helper whose run parks never returns: the agent
# stops the script and the run replays from the top.
# The CLI is `cryopg` (alias `cryo`); set CRYO_BIN to use another path.

: "${CRYO_BIN:=cryopg}"

cryo_step() { "$CRYO_BIN" step "$@"; }                    # NAME [--label L] -- CMD...
cryo_sleep() { "$CRYO_BIN" sleep "$@"; }                  # DURATION (30s, 5m, 500ms)
cryo_annotate() { "$CRYO_BIN" annotate "$@"; }            # TEXT
cryo_wait_signal() { "$CRYO_BIN" wait-signal "$@"; }      # NAME [--timeout D]
cryo_wait_event() { "$CRYO_BIN" wait-event "$@"; }        # NAME [--timeout D] [--tainted]
cryo_emit() { "$CRYO_BIN" emit "$@"; }                    # NAME [PAYLOAD] [--public]
cryo_spawn() { "$CRYO_BIN" spawn "$@"; }                  # FILE [--input JSON]
cryo_activity_submit() { "$CRYO_BIN" activity-submit "$@"; }   # NAME [policy] -- CMD...
cryo_activity_collect() { "$CRYO_BIN" activity-collect "$@"; } # NAME
cryo_activity_wait_all() { "$CRYO_BIN" activity-wait-all "$@"; }
cryo_activity() { "$CRYO_BIN" activity "$@"; }            # NAME [policy] -- CMD...
cryo_output_set() { "$CRYO_BIN" output set "$@"; }        # KEY VALUE
cryo_call_graph() { "$CRYO_BIN" call-graph "$@"; }        # NAME [--input JSON]; prints JSON
cryo_call_node() { "$CRYO_BIN" call-node "$@"; }          # TYPE --config JSON [--input JSON]
cryo_state_get() { "$CRYO_BIN" state get "$@"; }          # KEY [--entity E] [--tainted]
cryo_state_version() { "$CRYO_BIN" state version "$@"; } # KEY [--entity E] [--tainted]
cryo_state_set() { "$CRYO_BIN" state set "$@"; }          # KEY VALUE [--entity E] [--public]
cryo_state_delete() { "$CRYO_BIN" state delete "$@"; }
cryo_state_list() { "$CRYO_BIN" state list "$@"; }        # [--entity E] [--tainted]
cryo_state_add() { "$CRYO_BIN" state add "$@"; }          # KEY [VALUE]; exit 3 when lost
cryo_state_cas() { "$CRYO_BIN" state cas "$@"; }          # KEY VALUE --expect V [--as N]
cryo_state_incr() { "$CRYO_BIN" state incr "$@"; }        # KEY [--by N] [--as N]
# The bare lease, held until the run ends (bash cannot scope it to a block).
cryo_lock() { "$CRYO_BIN" lock "$@"; }                    # GROUP

# cryo_input [KEY]: the run's input JSON, or one top-level field of it (strings bare,
# anything else as compact JSON). Uses python3, which every cryopg install has.
cryo_input() {
    if [ -z "${CRYO_INPUT_FILE:-}" ]; then
        echo "cryo_input: not inside a run (CRYO_INPUT_FILE is not set)" >&2
        return 2
    fi
    if [ $# -eq 0 ]; then
        cat "$CRYO_INPUT_FILE"
        return
    fi
    python3 -c '
import json, sys
with open(sys.argv[1]) as fh:
    data = json.load(fh)
value = data.get(sys.argv[2]) if isinstance(data, dict) else None
if value is None:
    sys.exit(1)
print(value if isinstance(value, str) else json.dumps(value, separators=(",", ":")))
' "$CRYO_INPUT_FILE" "$1"
}

# Artifacts (cryopg artifact …): files kept with the run, or cached under a key.
cryo_artifact_put() { "$CRYO_BIN" artifact put "$@"; }    # NAME PATH [--key K] [--public]
cryo_artifact_get() { "$CRYO_BIN" artifact get "$@"; }    # NAME [PATH] [--key K | --run R] [--tainted]
cryo_artifact_list() { "$CRYO_BIN" artifact list "$@"; }  # [RUN] [--cached] [--tainted] [--json]
