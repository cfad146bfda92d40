-- Graph control flow (issue 39 item 7): result caching, loops and early stop.

-- A node's cached outputs: per project, and per trust, so an untrusted run never reads
-- or writes a trusted run's entries (docs/security/trust.md). The key is a keyed digest
-- of the rendered cache key (the server's, under the org's data key), the value sealed
-- as node outputs are (or in the clear when it holds no user data).
CREATE TABLE cryo.graph_cache (
    org text NOT NULL,
    project text NOT NULL,
    untrusted boolean NOT NULL,
    key_hash bytea NOT NULL,
    value bytea,
    value_clear jsonb,
    stored_at timestamptz NOT NULL,
    run_id text NOT NULL,
    node_id text NOT NULL,
    PRIMARY KEY (org, project, untrusted, key_hash)
);
COMMENT ON TABLE cryo.graph_cache IS
    'Cached node outputs (a node''s cache: {key, ttl}): per project and trust (untrusted), keyed by a keyed digest of the rendered key, the output sealed (value) or in the clear (value_clear, no user data); stored_at is when, run_id / node_id who stored it.';

-- An instance's cache: the key it stores its output under when it succeeds (its cache
-- missed), and whether its output came from the cache.
ALTER TABLE cryo.node_instances ADD COLUMN cache_key bytea;
ALTER TABLE cryo.node_instances ADD COLUMN cached boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN cryo.node_instances.cache_key IS
    'For a node with cache whose entry missed: the key its output is stored under when it succeeds.';
COMMENT ON COLUMN cryo.node_instances.cached IS
    'The instance ended at once with a cached output (its node''s cache: {key, ttl}).';

-- A node's stop_if is decided once, in the turn after the node succeeded.
ALTER TABLE cryo.node_states ADD COLUMN stop_checked boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN cryo.node_states.stop_checked IS
    'The node''s stop_if was decided (it ends the run early when it held).';

-- What a turn asks of the flow nodes of a run, without walking every node: the
-- succeeded nodes whose stop_if is not yet decided, and the loop nodes under way.
CREATE INDEX node_states_stop_if ON cryo.node_states (run_id)
    WHERE def ? 'stop_if' AND status = 'succeeded' AND NOT stop_checked;
CREATE INDEX node_states_loops ON cryo.node_states (run_id)
    WHERE def ? 'loop' AND status IN ('running', 'waiting');
