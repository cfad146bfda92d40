-- A graph run that is cancelled ends its unfinished nodes too: node states and node
-- instances gain the status 'cancelled' (as a run has), instead of staying 'running' or
-- 'waiting' forever on a finished run.

ALTER TABLE cryo.node_states DROP CONSTRAINT node_states_status_check;
ALTER TABLE cryo.node_states ADD CONSTRAINT node_states_status_check CHECK (status IN (
    'pending', 'running', 'waiting', 'succeeded', 'failed', 'skipped', 'seeded', 'cancelled'));

ALTER TABLE cryo.node_instances DROP CONSTRAINT node_instances_status_check;
ALTER TABLE cryo.node_instances ADD CONSTRAINT node_instances_status_check CHECK (status IN (
    'ready', 'running', 'waiting', 'retrying', 'succeeded', 'failed', 'seeded', 'cancelled'));

COMMENT ON TABLE cryo.node_states IS
    'One row per node of a graph run: status (pending, running, waiting, succeeded, failed, skipped, seeded, cancelled), fan-out size, sealed output.';
