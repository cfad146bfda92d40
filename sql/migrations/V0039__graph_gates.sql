-- Graph gates (issue 39, item 7): approvals by N approvers, concurrency groups of N
-- holders with an optional window of starts.

-- Every answer an approval node got: who, when, which way. One per person and instance,
-- so that nobody counts twice.
CREATE TABLE cryo.node_approvals (
    run_id text NOT NULL REFERENCES cryo.runs (id) ON DELETE CASCADE,
    node_id text NOT NULL,
    item integer NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    approver text NOT NULL,
    answer text NOT NULL CHECK (answer IN ('approved', 'rejected')),
    answered_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, node_id, item, approver)
);
COMMENT ON TABLE cryo.node_approvals IS
    'Each answer given to an approval node instance: the member, approved or rejected, and when. One per member and instance.';

-- The OIDC groups a session's ID token named, for approvals restricted to a group.
ALTER TABLE cryo.sessions ADD COLUMN groups text[];
COMMENT ON COLUMN cryo.sessions.groups IS
    'The groups claim of the ID token the session was opened with (NULL: none); an approval restricted to a group reads it.';

-- A group may now have several holders (up to its limit): one row per holder and path.
ALTER TABLE cryo.leases DROP CONSTRAINT leases_pkey;
CREATE UNIQUE INDEX leases_hold ON cryo.leases (org, project, grp, holder_run_id, (coalesce(path, '')));

-- A group's declared limit: at most max_holders hold it at once, or, with a window, at
-- most max_holders take it within any window_seconds. No row: one holder, no window.
CREATE TABLE cryo.lease_limits (
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    max_holders integer NOT NULL CHECK (max_holders >= 1),
    window_seconds double precision CHECK (window_seconds > 0),
    PRIMARY KEY (org, project, grp),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);
COMMENT ON TABLE cryo.lease_limits IS
    'A concurrency group''s limit as its latest taker declared it: max_holders at once, or with window_seconds at most max_holders grants per window.';

-- When each grant of a windowed group was made (older than the window: pruned).
CREATE TABLE cryo.lease_starts (
    id bigserial PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    started_at timestamptz NOT NULL,
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);
CREATE INDEX lease_starts_group ON cryo.lease_starts (org, project, grp, started_at);
COMMENT ON TABLE cryo.lease_starts IS
    'The grants of a concurrency group with a window, one row each, kept while inside the window.';

-- A schedule's tick that did not fire because its input did not match the workflow's
-- input_schema: why (the schema's message).
ALTER TABLE cryo.schedules ADD COLUMN last_refusal text;
COMMENT ON COLUMN cryo.schedules.last_refusal IS
    'Why the latest due tick did not start a run (its input failed the workflow''s input_schema); NULL after a tick that fired.';
