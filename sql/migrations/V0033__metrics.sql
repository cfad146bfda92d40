-- Metrics for operators (issue 40). Counters every replica must agree on (runs
-- submitted and finished, queue depth, claims lapsed, wakes, latencies of the queue)
-- are kept in the database by triggers of sql/functions/97_metrics.sql, so a scrape of
-- any replica reads the same numbers, in one statement whose cost does not grow with
-- the runs table.
--
-- metric_deltas: one row per counted change, appended by the triggers (an insert takes
-- no lock another transaction waits on, so counting never serialises two transitions).
-- metric_counts: the deltas folded, one row per series, by cryo.fold_metrics on every
-- replica's tick. A read sums both, so it is exact whether or not a fold ran.
CREATE TABLE cryo.metric_counts (
    metric text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    label text NOT NULL DEFAULT '',
    label2 text NOT NULL DEFAULT '',
    n bigint NOT NULL,
    total double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (metric, org, project, label, label2)
);
COMMENT ON TABLE cryo.metric_counts IS
    'Engine counters and gauges by series (metric, org, project, label, label2): n counts, total sums what a histogram observed. Written only by cryo.fold_metrics.';

CREATE TABLE cryo.metric_deltas (
    metric text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    label text NOT NULL DEFAULT '',
    label2 text NOT NULL DEFAULT '',
    n bigint NOT NULL,
    total double precision NOT NULL DEFAULT 0
);
COMMENT ON TABLE cryo.metric_deltas IS
    'Changes to engine counters not yet folded into cryo.metric_counts, appended by the metrics triggers.';

-- The replica an agent last claimed through, as that replica reported it.
ALTER TABLE cryo.agents ADD COLUMN replica text;

-- The W3C trace context (traceparent) of the trace a run belongs to, set by the server
-- that submitted it when tracing is on (a child run takes its parent's), so every replica
-- and agent that works on the run continues the same trace.
ALTER TABLE cryo.runs ADD COLUMN traceparent text;
