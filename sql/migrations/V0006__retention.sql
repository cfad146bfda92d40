-- Retention: terminal runs are collected after a per-project period, with everything
-- they own (journal, history, logs, signals, outputs, run-scoped cells).

ALTER TABLE cryo.projects ADD COLUMN run_retention interval NOT NULL DEFAULT interval '90 days'
    CHECK (run_retention > interval '0');

-- No index on runs.status or finished_at: finishing a run would then update every index
-- of runs (no HOT update). The sweeper walks runs_project_created (created_at never
-- changes, and a run finishes after it was created) and skips the few old live runs.
-- Collection deletes a run's signals, consumed ones included.
CREATE INDEX signals_run ON cryo.signals (run_id);

-- Claims and finishes update a run in place; room on the page keeps those updates HOT
-- (no new index entries) also for rows that were inserted into full pages.
ALTER TABLE cryo.runs SET (fillfactor = 85);

COMMENT ON COLUMN cryo.projects.run_retention IS
    'How long a terminal run (and all it owns) is kept after it finished; tick() collects it then.';
