CREATE TABLE cryo.state_cells (
    org text NOT NULL,
    project text NOT NULL,
    scope text NOT NULL,
    entity text,
    run_id text REFERENCES cryo.runs (id) ON DELETE CASCADE,
    key text NOT NULL,
    value bytea,
    version bigint NOT NULL CHECK (version > 0),
    created_by_run text NOT NULL,
    updated_by_run text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (scope, key),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE,
    CHECK ((entity IS NULL) <> (run_id IS NULL))
);
CREATE INDEX state_cells_project ON cryo.state_cells (org, project);
CREATE INDEX state_cells_run ON cryo.state_cells (run_id) WHERE run_id IS NOT NULL;

COMMENT ON TABLE cryo.state_cells IS
    'Durable state cells: (scope, key) -> sealed JSON value and a version counted in the clear. scope is the run id for run scope, or {org}:{project}:entity:{name} for entity scope. A NULL value marks a deleted cell; its row keeps the version so a cell re-created later never repeats a version a cas could have read.';
COMMENT ON COLUMN cryo.state_cells.value IS 'Sealed JSON (AES-GCM under the org data key); NULL once deleted.';
COMMENT ON COLUMN cryo.state_cells.version IS 'Counts every write and delete of the cell, starting at 1; never reused.';
COMMENT ON COLUMN cryo.state_cells.created_by_run IS 'The run that created (or re-created after a delete) the cell; an add by that run still holds it.';
