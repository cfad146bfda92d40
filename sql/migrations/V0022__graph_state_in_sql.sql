-- Constant state nodes run inside the database. A state node whose config holds no
-- expression is known in full before the run starts; the driver (which holds the key)
-- hands SQL, once per run, its clear call (op, key, entity, expected) and the sealed
-- value it writes, and cryo.graph_plan then executes it itself, through the same state
-- functions a script's verbs use, in the same turn -- no Python round per node.
-- Outputs that carry no user data (set {version}, delete {deleted}, add {claimed}, cas
-- {swapped}) are kept in the clear, so SQL can both write and read them, and a run whose
-- default output is made only of such outputs is settled without a Python round.

ALTER TABLE cryo.node_states ADD COLUMN state_call jsonb;
ALTER TABLE cryo.node_states ADD COLUMN state_value bytea;
ALTER TABLE cryo.node_states ADD COLUMN output_clear jsonb;
ALTER TABLE cryo.node_instances ADD COLUMN output_clear jsonb;

-- A run output in the clear (a graph's default output made of clear node outputs, as
-- {"answer": v}); value stays the sealed form, one of the two is set.
ALTER TABLE cryo.run_outputs ALTER COLUMN value DROP NOT NULL;
ALTER TABLE cryo.run_outputs ADD COLUMN value_clear jsonb;

COMMENT ON COLUMN cryo.node_states.state_call IS
    'For a constant state node: its clear call {op, key, entity, expected}, run by cryo.graph_plan.';
COMMENT ON COLUMN cryo.node_states.state_value IS
    'For a constant set, add or cas node: the sealed value it writes.';
COMMENT ON COLUMN cryo.node_states.output_clear IS
    'A node output holding no user data (state set/delete/add/cas), in the clear; output is NULL then.';
COMMENT ON COLUMN cryo.node_instances.output_clear IS
    'An instance output holding no user data, in the clear; output is NULL then.';
COMMENT ON COLUMN cryo.run_outputs.value_clear IS
    'An output holding no user data, as {"answer": v}, in the clear; value is NULL then.';

-- A turn that runs many nodes in one transaction reads the run's ready, live and failed
-- nodes again after each: partial indexes holding only those rows keep each read to
-- what it asks for, whatever the planner guesses about a brand-new run (with one index
-- over every node of the run, a generic plan filtered them all by run alone).
CREATE INDEX node_states_ready ON cryo.node_states (run_id, ord)
    WHERE status = 'pending' AND open_deps = 0;
CREATE INDEX node_states_live ON cryo.node_states (run_id, ord)
    WHERE status IN ('running', 'waiting');
CREATE INDEX node_states_failing ON cryo.node_states (run_id)
    WHERE status = 'failed' AND NOT tolerated;
