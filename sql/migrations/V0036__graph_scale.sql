-- Graphs at any size (issue 39): a node counts its instances that have succeeded, so
-- recording one of a 20,000-item fan-out reads one row, not a count(*) of its instances.
ALTER TABLE cryo.node_states ADD COLUMN items_done integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN cryo.node_states.items_done IS
    'How many of the node''s instances have succeeded (cryo._instance_ended keeps it): the node succeeds when it reaches items (1 without a fan-out).';
