# Conformance: a step recorded before a sleep is replayed after it, not run again.
source "$CRYO_PRELUDE"
echo pass
value=$(cryo_step compute -- sh -c 'echo computing >&2; echo 41')
echo "value=$value"
cryo_sleep 1s
echo "after sleep value=$((value + 1))"
