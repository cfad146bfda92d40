CREATE SCHEMA IF NOT EXISTS cryo;

CREATE TABLE cryo.orgs (
    slug text PRIMARY KEY CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name text NOT NULL,
    key_id text,
    wrapped_key bytea,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cryo.projects (
    org text NOT NULL REFERENCES cryo.orgs (slug),
    slug text NOT NULL CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org, slug)
);

CREATE TABLE cryo.tokens (
    id text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('user', 'agent')),
    org text NOT NULL REFERENCES cryo.orgs (slug),
    name text NOT NULL,
    secret_hash bytea NOT NULL UNIQUE,
    capabilities text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    revoked_at timestamptz
);

CREATE TABLE cryo.workflows (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    filename text NOT NULL,
    interpreter text,
    source bytea NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug)
);

CREATE TABLE cryo.runs (
    id text PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    workflow text,
    filename text NOT NULL,
    interpreter text,
    source bytea NOT NULL,
    input bytea,
    input_clear jsonb,
    idempotency_key text,
    required_caps text[] NOT NULL DEFAULT '{shell}',
    status text NOT NULL DEFAULT 'pending' CHECK (status IN (
        'pending', 'running', 'parked', 'succeeded', 'failed', 'cancelled', 'unreadable')),
    substate text,
    attempt integer NOT NULL DEFAULT 0,
    exit_code integer,
    error text,
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    started_at timestamptz,
    finished_at timestamptz,
    updated_at timestamptz NOT NULL,
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug)
);
CREATE UNIQUE INDEX runs_idempotency_key ON cryo.runs (org, project, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_project_created ON cryo.runs (org, project, created_at DESC);
CREATE INDEX runs_id_prefix ON cryo.runs (id text_pattern_ops);

CREATE TABLE cryo.queue (
    run_id text PRIMARY KEY REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'claimed', 'parked')),
    required_caps text[] NOT NULL,
    enqueued_at timestamptz NOT NULL,
    wake_at timestamptz,
    park_reason text,
    park_path text,
    parked_at timestamptz,
    claim_token uuid,
    agent_id text,
    claimed_at timestamptz,
    lease_expires_at timestamptz
);
CREATE INDEX queue_pending ON cryo.queue (org, enqueued_at) WHERE state = 'pending';
CREATE INDEX queue_claimed_lease ON cryo.queue (lease_expires_at) WHERE state = 'claimed';
CREATE INDEX queue_parked_wake ON cryo.queue (wake_at) WHERE state = 'parked';

CREATE TABLE cryo.journal (
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    seq integer NOT NULL,
    path text NOT NULL,
    key_scope text NOT NULL,
    key_family text NOT NULL,
    key_name text NOT NULL,
    key_ordinal integer NOT NULL,
    label text,
    attempt integer NOT NULL,
    status text NOT NULL CHECK (status IN ('pending', 'done')),
    result bytea,
    exit_code integer,
    due_at timestamptz,
    created_at timestamptz NOT NULL,
    completed_at timestamptz,
    PRIMARY KEY (run_id, path),
    UNIQUE (run_id, seq)
);

CREATE TABLE cryo.history (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    kind text NOT NULL,
    key_scope text,
    key_family text,
    key_name text,
    key_ordinal integer,
    attempt integer,
    payload bytea,
    created_at timestamptz NOT NULL
);
CREATE INDEX history_run ON cryo.history (run_id, id);

CREATE TABLE cryo.logs (
    id bigserial PRIMARY KEY,
    run_id text NOT NULL REFERENCES cryo.runs (id),
    org text NOT NULL,
    project text NOT NULL,
    attempt integer NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX logs_run ON cryo.logs (run_id, id);

CREATE TABLE cryo.agents (
    id text PRIMARY KEY,
    org text NOT NULL REFERENCES cryo.orgs (slug),
    capabilities text[] NOT NULL,
    registered_at timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);

INSERT INTO cryo.orgs (slug, name) VALUES ('dev', 'Development');
INSERT INTO cryo.projects (org, slug, name) VALUES ('dev', 'default', 'Default');
