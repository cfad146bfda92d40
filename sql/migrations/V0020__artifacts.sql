-- Artifacts: named files a run (or anyone holding a member token) keeps beside the
-- engine. The bytes live outside PostgreSQL (a directory or an S3 bucket), addressed by
-- their SHA-256 under the project; these tables are the index.

CREATE TABLE cryo.artifact_blobs (
    org text NOT NULL,
    project text NOT NULL,
    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size bigint NOT NULL CHECK (size >= 0),
    created_at timestamptz NOT NULL,
    touched_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, sha256),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);
-- The collector looks for blobs nobody has touched lately.
CREATE INDEX artifact_blobs_touched ON cryo.artifact_blobs (touched_at);

CREATE TABLE cryo.artifacts (
    org text NOT NULL,
    project text NOT NULL,
    scope text NOT NULL,
    run_id text REFERENCES cryo.runs (id) ON DELETE CASCADE,
    cache_key text,
    name text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL CHECK (size >= 0),
    created_by_run text,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (scope, name),
    -- A deleted project's names go with it (and its blobs by their own key; the bytes
    -- are then unknown to the index and the store sweep removes them).
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE,
    FOREIGN KEY (org, project, sha256) REFERENCES cryo.artifact_blobs (org, project, sha256),
    CHECK ((run_id IS NULL) <> (cache_key IS NULL))
);
CREATE INDEX artifacts_blob ON cryo.artifacts (org, project, sha256);
CREATE INDEX artifacts_cached ON cryo.artifacts (created_at) WHERE cache_key IS NOT NULL;

COMMENT ON TABLE cryo.artifact_blobs IS
    'One row per distinct artifact content of a project (its SHA-256 and size); the project''s artifact bytes are the sum of these sizes, each counted once however many names point at it.';
COMMENT ON COLUMN cryo.artifact_blobs.touched_at IS
    'The last time a put pointed a name at this blob; the collector removes only blobs no name points at and nobody touched within its grace period.';
COMMENT ON TABLE cryo.artifacts IS
    'Artifact names: (scope, name) -> blob. scope is the run id for a run''s artifact (collected with the run), or {org}:{project}:key:{cache key} for a cached artifact (kept for CRYOPG_RETENTION_ARTIFACTS after it was put).';
-- A run's artifacts go when the run is collected (the foreign key cascades).
CREATE INDEX artifacts_run ON cryo.artifacts (run_id) WHERE run_id IS NOT NULL;
