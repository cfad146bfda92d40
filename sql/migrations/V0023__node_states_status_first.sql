-- A lookup of one node by (run, node) must take the primary key. With the run first in
-- node_states_by_status, a generic plan made while the table was young took that index
-- for such lookups too and filtered the run's every node row by node id (O(n) per node
-- looked up, so a turn of a chain whose nodes read each other cost the graph's size
-- squared). Status first, it serves only the reads that name a status, as it was made
-- for, and the primary key is the one index a keyed lookup can use.
DROP INDEX cryo.node_states_by_status;
CREATE INDEX node_states_by_status ON cryo.node_states (status, run_id, open_deps, ord);
