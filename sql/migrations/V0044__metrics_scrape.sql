-- Bounded fold cost (issue 40): cryo.fold_metrics recounted the whole queue by state on
-- every tick (~200 ms a fold with 100,000 parked runs, against ~8 ms without); it now
-- recounts when the last count is older than its p_recount_after
-- (CRYOPG_METRICS_QUEUE_RECOUNT_SECONDS), noted here.
ALTER TABLE cryo.metric_fold ADD COLUMN queue_counted_at timestamptz;
COMMENT ON COLUMN cryo.metric_fold.queue_counted_at IS
    'When cryo.fold_metrics last recounted the queue''s depth by state (NULL: never).';

-- Wakes by cause, exactly: a history row cryo._wake writes (a parked run woken) is marked,
-- so the fold tells it from the same kind written when the answer was there at once (a
-- signal already sent, a lease free, an activity already ended), which woke nothing.
-- Nullable, no default: adding it rewrites nothing.
ALTER TABLE cryo.history ADD COLUMN woke boolean;
COMMENT ON COLUMN cryo.history.woke IS
    'true when this row woke a parked run (written by cryo._wake); NULL otherwise.';
