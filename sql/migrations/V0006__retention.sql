-- Retention: terminal runs are collected after a per-project period, with everything
-- they own (journal, history, logs, signals, outputs, run-scoped cells).

ALTER TABLE cryo.projects ADD COLUMN run_retention interval NOT NULL DEFAULT interval '90 days'
    CHECK (run_retention > interval '0');

-- The sweeper walks each project's oldest terminal runs; live runs are never in it.
CREATE INDEX runs_terminal_finished ON cryo.runs (org, project, finished_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled', 'unreadable');
-- Collection deletes a run's signals, consumed ones included.
CREATE INDEX signals_run ON cryo.signals (run_id);

COMMENT ON COLUMN cryo.projects.run_retention IS
    'How long a terminal run (and all it owns) is kept after it finished; tick() collects it then.';
