-- The graph tier. A graph run is a run of kind 'graph': its document is pinned sealed in
-- runs.source (node configs may hold anything), and its clear structure -- node ids,
-- types, edges and the compiled expressions the interpreter decides with -- in
-- runs.graph. node_states holds each node's state, node_instances each instance of a node
-- (one, or one per fan-out item); an agent-bound instance runs as a child run
-- (runs.graph_node / graph_item say which).

ALTER TABLE cryo.runs ADD COLUMN kind text NOT NULL DEFAULT 'script'
    CHECK (kind IN ('script', 'graph'));
ALTER TABLE cryo.runs ADD COLUMN graph jsonb;
ALTER TABLE cryo.runs ADD COLUMN graph_node text;
ALTER TABLE cryo.runs ADD COLUMN graph_item integer;

ALTER TABLE cryo.workflows ADD COLUMN kind text NOT NULL DEFAULT 'script'
    CHECK (kind IN ('script', 'graph'));
ALTER TABLE cryo.workflows ADD COLUMN graph jsonb;

CREATE TABLE cryo.node_states (
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    node_id text NOT NULL,
    type text NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN (
        'pending', 'running', 'waiting', 'succeeded', 'failed', 'skipped', 'seeded')),
    items integer,
    output bytea,
    error text,
    started_at timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (run_id, node_id)
);

CREATE TABLE cryo.node_instances (
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    node_id text NOT NULL,
    item integer NOT NULL,
    status text NOT NULL CHECK (status IN (
        'ready', 'running', 'waiting', 'retrying', 'succeeded', 'failed', 'seeded')),
    attempt integer NOT NULL DEFAULT 1,
    output bytea,
    error text,
    job_run_id text,
    wait_kind text,
    wait_name text,
    due_at timestamptz,
    lease_group text,
    started_at timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (run_id, node_id, item)
);
CREATE INDEX node_instances_job ON cryo.node_instances (job_run_id) WHERE job_run_id IS NOT NULL;

-- Graph runs needing a step forward are claimed by server drivers across orgs.
CREATE INDEX queue_graph_pending ON cryo.queue (enqueued_at)
    WHERE state = 'pending' AND required_caps = '{graph}';

COMMENT ON COLUMN cryo.runs.graph IS
    'A graph run''s clear structure: node ids, types, edges, compiled if/fan_out/concurrency/output expressions. Node configs stay sealed in source.';
COMMENT ON TABLE cryo.node_states IS
    'One row per node of a graph run: status (pending, running, waiting, succeeded, failed, skipped, seeded), fan-out size, sealed output.';
COMMENT ON TABLE cryo.node_instances IS
    'One row per started instance of a graph node (one, or one per fan-out item): attempt, the child run doing it, what it waits on, sealed output.';

-- A graph node's concurrency group is held by its run, one lease per node instance.
ALTER TABLE cryo.leases DROP CONSTRAINT leases_kind_check;
ALTER TABLE cryo.leases ADD CONSTRAINT leases_kind_check CHECK (kind IN ('admission', 'script', 'graph'));
ALTER TABLE cryo.lease_waiters DROP CONSTRAINT lease_waiters_kind_check;
ALTER TABLE cryo.lease_waiters ADD CONSTRAINT lease_waiters_kind_check
    CHECK (kind IN ('admission', 'script', 'graph'));

CREATE INDEX node_instances_event_waiters ON cryo.node_instances (org, project, wait_name)
    WHERE status = 'waiting' AND wait_kind = 'event';
