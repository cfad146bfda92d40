"""Conformance: call_graph and call_node return the child graph's output, once."""

from cryosleep import script
from cryosleep.script import ScriptError

total = script.call_graph("conf-tally", {"by": 21})
print(f"graph={total}")
node = script.call_node("state", {"op": "incr", "key": "by-node", "entity": "conf-graph", "by": 2})
print(f"node={node['value']}")
try:
    script.call_node("state", {"op": "incr", "key": "bad", "entity": "conf-graph",
                               "by": {"$expr": "input.by"}}, {"by": "lots"})
    print("no failure")
except ScriptError as e:
    print(f"failed {e.code}")
