-- Timeouts and priority. A run's deadline (runs.deadline_at, from its timeout counted
-- from submit) is copied onto its queue row, which only live runs have, so the sweep
-- that fails runs past their deadline reads a small partial index however many runs
-- have ended. Priority orders the pending claim: higher first, then oldest.
ALTER TABLE cryo.runs ADD COLUMN timeout_s double precision,
                      ADD COLUMN deadline_at timestamptz,
                      ADD COLUMN priority integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN cryo.runs.timeout_s IS
    'The run''s timeout in seconds (submit --timeout, its graph''s timeout, or its node''s), NULL for none.';
COMMENT ON COLUMN cryo.runs.deadline_at IS
    'When the run fails with exit code 124 unless it has ended: its submit plus timeout_s (wall time, parked or not).';
COMMENT ON COLUMN cryo.runs.priority IS
    'Claim priority: among pending runs an agent may take, higher first, then oldest. Default 0.';

ALTER TABLE cryo.queue ADD COLUMN deadline_at timestamptz,
                       ADD COLUMN priority integer NOT NULL DEFAULT 0;
CREATE INDEX queue_deadline ON cryo.queue (deadline_at) WHERE deadline_at IS NOT NULL;
-- The claim's order; queue_pending (org, enqueued_at) stays for the oldest-pending reads.
CREATE INDEX queue_pending_priority ON cryo.queue (org, priority DESC, enqueued_at)
    WHERE state = 'pending';

-- Facts about an event that hold no user data, in the clear: a node retry's delay.
ALTER TABLE cryo.history ADD COLUMN detail jsonb;
COMMENT ON COLUMN cryo.history.detail IS
    'Clear facts about the event that hold no user data: node_retry_scheduled has {"delay": seconds}.';

-- A stored workflow's defaults for the runs started by name (`cryopg workflow put
-- --timeout --priority`); a graph's own `timeout` is in its structure.
ALTER TABLE cryo.workflows ADD COLUMN timeout_s double precision,
                           ADD COLUMN priority integer;
COMMENT ON COLUMN cryo.workflows.timeout_s IS
    'The default timeout (seconds) of runs of this workflow; a submit''s own wins. NULL: the graph''s own, or none.';
COMMENT ON COLUMN cryo.workflows.priority IS
    'The default claim priority of runs of this workflow; a submit''s own wins. NULL: 0.';
