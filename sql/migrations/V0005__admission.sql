ALTER TABLE cryo.runs DROP CONSTRAINT runs_status_check;
ALTER TABLE cryo.runs ADD CONSTRAINT runs_status_check CHECK (status IN (
    'queued', 'pending', 'running', 'parked', 'succeeded', 'failed', 'cancelled', 'unreadable'));
ALTER TABLE cryo.runs ADD COLUMN concurrency_group text;
-- Set once someone follows the run; only then do its changes NOTIFY (see _notify_run).
ALTER TABLE cryo.runs ADD COLUMN watched boolean NOT NULL DEFAULT false;

ALTER TABLE cryo.projects ADD COLUMN admission_queue_limit integer NOT NULL DEFAULT 100
    CHECK (admission_queue_limit > 0);

CREATE TABLE cryo.leases (
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    holder_run_id text NOT NULL REFERENCES cryo.runs (id),
    kind text NOT NULL CHECK (kind IN ('admission', 'script')),
    scoped boolean NOT NULL DEFAULT false,
    path text,
    acquired_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, grp)
);
CREATE INDEX leases_holder ON cryo.leases (holder_run_id);

CREATE TABLE cryo.lease_waiters (
    id bigserial PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    run_id text NOT NULL REFERENCES cryo.runs (id),
    kind text NOT NULL CHECK (kind IN ('admission', 'script')),
    scoped boolean NOT NULL DEFAULT false,
    path text,
    enqueued_at timestamptz NOT NULL
);
CREATE INDEX lease_waiters_group ON cryo.lease_waiters (org, project, grp, id);
CREATE INDEX lease_waiters_run ON cryo.lease_waiters (run_id);
