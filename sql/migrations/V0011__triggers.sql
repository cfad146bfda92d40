-- Triggers: the ways a run starts without a person typing submit. Schedules fire on a
-- cron or an interval, webhooks take signed deliveries from forges, event handlers start
-- a workflow for each event of a name on the project bus. Each of them starts runs
-- through the same submit function, in the transaction that fired it.

CREATE TABLE cryo.schedules (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    workflow text NOT NULL,
    cron text,
    timezone text NOT NULL DEFAULT 'UTC',
    every_seconds double precision,
    input bytea,
    paused boolean NOT NULL DEFAULT false,
    source_workflow text,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    last_run_id text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project, workflow) REFERENCES cryo.workflows (org, project, name)
        ON DELETE CASCADE,
    CHECK ((cron IS NULL) <> (every_seconds IS NULL)),
    CHECK (every_seconds IS NULL OR every_seconds >= 1)
);
-- Due schedules, across projects: what every server's scheduler reads each round.
CREATE INDEX schedules_due ON cryo.schedules (next_fire_at NULLS FIRST) WHERE NOT paused;

COMMENT ON TABLE cryo.schedules IS
    'Schedules: a stored workflow started on a cron expression (in a time zone) or every N seconds. next_fire_at is the tick not yet fired (NULL: the scheduler plans it on its next round); input is sealed.';
COMMENT ON COLUMN cryo.schedules.source_workflow IS
    'The workflow whose on.schedule registered this schedule (replaced when it is put again); NULL for one made with schedule create.';

CREATE TABLE cryo.webhooks (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    workflow text,
    secret bytea NOT NULL,
    status_url text,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);

COMMENT ON TABLE cryo.webhooks IS
    'Webhooks: a signing secret (sealed) for deliveries to /api/v1/hooks/{org}/{project}/{name}; with a workflow a delivery starts it, without one it is published on the bus as webhook.<event>. status_url receives the run''s outcome when it ends.';

CREATE TABLE cryo.webhook_deliveries (
    org text NOT NULL,
    project text NOT NULL,
    webhook text NOT NULL,
    body_hash bytea NOT NULL,
    event text NOT NULL,
    outcome text,
    run_id text,
    event_id bigint,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, webhook, body_hash),
    FOREIGN KEY (org, project, webhook) REFERENCES cryo.webhooks (org, project, name)
        ON DELETE CASCADE
);

COMMENT ON TABLE cryo.webhook_deliveries IS
    'One row per signed body a webhook accepted (SHA-256 of the raw body), so a redelivery creates nothing: outcome started | skipped (if was false) | ignored (event not in on.webhook) | published.';

CREATE TABLE cryo.status_posts (
    run_id text PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    webhook text NOT NULL,
    url text NOT NULL,
    sha text,
    state text NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'sending', 'sent', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    taken_at timestamptz,
    last_error text,
    created_at timestamptz NOT NULL,
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);
CREATE INDEX status_posts_open ON cryo.status_posts (created_at) WHERE state IN ('waiting', 'sending');

COMMENT ON TABLE cryo.status_posts IS
    'Outbound commit statuses: a webhook run''s outcome to POST to its webhook''s status_url when the run ends. The server sends them outside any engine transaction.';

CREATE TABLE cryo.event_handlers (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    event text NOT NULL,
    workflow text NOT NULL,
    source_workflow text,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project, workflow) REFERENCES cryo.workflows (org, project, name)
        ON DELETE CASCADE
);
CREATE INDEX event_handlers_event ON cryo.event_handlers (org, project, event);

COMMENT ON TABLE cryo.event_handlers IS
    'Event handlers: each event of that name published on the project bus starts one run of the workflow, in the publishing transaction.';

-- What started a run, in the clear: the trigger kind and name (a schedule, a webhook,
-- an event handler) and, for a handler run, how deep in a chain of handlers it is.
ALTER TABLE cryo.runs ADD COLUMN trigger_kind text;
ALTER TABLE cryo.runs ADD COLUMN trigger_name text;
ALTER TABLE cryo.runs ADD COLUMN trigger_depth integer;
-- Live graph runs that a bus event cancels (cancel_on), by event name.
CREATE INDEX runs_cancel_on ON cryo.runs (org, project, (graph #>> '{cancel_on,event}'))
    WHERE finished_at IS NULL AND graph ? 'cancel_on';

-- An event's place in a chain of handlers, whether it came from an untrusted run or
-- delivery (its handler runs are untrusted too), and why no handler run started.
ALTER TABLE cryo.events ADD COLUMN depth integer NOT NULL DEFAULT 0;
ALTER TABLE cryo.events ADD COLUMN untrusted boolean NOT NULL DEFAULT false;
ALTER TABLE cryo.events ADD COLUMN refused text;
