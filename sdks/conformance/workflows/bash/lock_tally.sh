# Conformance: a read-modify-write of an entity cell under the bare lease (held to the
# end of the run: bash cannot scope a lease to a block).
source "$CRYO_PRELUDE"
cryo_lock conf-tally
n=$(cryo_state_get total --entity conf-tally)
sleep 0.2
cryo_state_set total "$(( ${n:-0} + 1 ))" --entity conf-tally
echo done
