ALTER TABLE cryo.queue ADD COLUMN park_name text;

ALTER TABLE cryo.journal ADD COLUMN answer_clear jsonb;
ALTER TABLE cryo.journal ADD COLUMN ref_run_id text;
CREATE INDEX journal_event_waiters ON cryo.journal (org, project, key_name)
    WHERE status = 'pending' AND key_family = 'event';

ALTER TABLE cryo.runs ADD COLUMN parent_run_id text REFERENCES cryo.runs (id);
ALTER TABLE cryo.runs ADD COLUMN activity_name text;
ALTER TABLE cryo.runs ADD COLUMN retries_left integer NOT NULL DEFAULT 0;
ALTER TABLE cryo.runs ADD COLUMN retry_backoff double precision NOT NULL DEFAULT 0;
ALTER TABLE cryo.runs ADD COLUMN retry_on integer[];
CREATE INDEX runs_parent ON cryo.runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE UNIQUE INDEX runs_activity_name ON cryo.runs (parent_run_id, activity_name)
    WHERE activity_name IS NOT NULL;

ALTER TABLE cryo.projects ADD COLUMN event_retention interval NOT NULL DEFAULT interval '30 days';

CREATE TABLE cryo.signals (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    payload bytea,
    payload_clear jsonb,
    sent_at timestamptz NOT NULL,
    consumed_at timestamptz,
    consumed_path text
);
CREATE INDEX signals_unconsumed ON cryo.signals (run_id, name, id) WHERE consumed_at IS NULL;

CREATE TABLE cryo.events (
    id bigserial PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    payload bytea,
    payload_clear jsonb,
    emitted_by_run text,
    created_at timestamptz NOT NULL
);
CREATE INDEX events_project_name ON cryo.events (org, project, name, id);
CREATE INDEX events_created ON cryo.events (created_at);

CREATE TABLE cryo.run_outputs (
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);
