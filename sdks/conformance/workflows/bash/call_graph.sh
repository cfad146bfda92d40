# Conformance: cryo_call_graph and cryo_call_node print the child graph's output, once.
source "$CRYO_PRELUDE"
total=$(cryo_call_graph conf-tally --input '{"by":21}')
echo "graph=$total"
node=$(cryo_call_node state --config '{"op":"incr","key":"by-node","entity":"conf-graph","by":2}')
echo "node=$(echo "$node" | python3 -c 'import json,sys; print(json.load(sys.stdin)["value"])')"
if cryo_call_node state --config '{"op":"incr","key":"bad","entity":"conf-graph","by":{"$expr":"input.by"}}' \
    --input '{"by":"lots"}' >/dev/null 2>&1; then echo "no failure"; else echo "failed $?"; fi
