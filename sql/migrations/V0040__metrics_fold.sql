-- Metrics folded from history (issue 40): the row triggers that appended a delta per
-- change to cryo.runs, cryo.queue and cryo.history cost a run about 0.5-0.9 ms of the
-- database's CPU (+25-35%). Their counters are now folded from the history rows the
-- transitions write anyway, in batches, by every replica's tick (cryo.fold_metrics, one
-- replica at a time); the queue's depth is counted there too. The artifact blobs'
-- trigger stays (blobs are few and not on a run's path), so cryo.metric_deltas stays for it.
DROP TRIGGER IF EXISTS runs_submitted_count ON cryo.runs;
DROP TRIGGER IF EXISTS runs_finished_count ON cryo.runs;
DROP TRIGGER IF EXISTS queue_count_insert ON cryo.queue;
DROP TRIGGER IF EXISTS queue_count_delete ON cryo.queue;
DROP TRIGGER IF EXISTS queue_count_state ON cryo.queue;
DROP TRIGGER IF EXISTS history_count ON cryo.history;

-- The fold's place in history, one row. Every history id <= folded_through is counted
-- (or was never committed). History ids are taken before their transaction commits, so
-- a row can become visible below the highest id already seen: an id is folded only once
-- every transaction that could still hold a lower one has ended. seen_through is the
-- highest id one fold saw, seen_xmax the snapshot xmax a later fold took for it; once
-- the oldest running transaction is at or past seen_xmax, ids <= seen_through are final.
-- next_through is the highest id the last fold saw, waiting for its xmax.
CREATE TABLE cryo.metric_fold (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    folded_through bigint NOT NULL,
    seen_through bigint,
    seen_xmax xid8,
    next_through bigint,
    folded_at timestamptz
);
COMMENT ON TABLE cryo.metric_fold IS
    'Where cryo.fold_metrics is in cryo.history (one row, locked by the replica folding): ids up to folded_through are counted in cryo.metric_counts.';

-- What the triggers counted up to now stays counted: their deltas are folded here, and
-- the fold starts after the last history id. (The triggers' tables are locked by the DROPs
-- above, so no transition is half-counted across this line.)
INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
SELECT d.metric, d.org, d.project, d.label, d.label2, sum(d.n), sum(d.total)
  FROM cryo.metric_deltas d GROUP BY 1, 2, 3, 4, 5
ON CONFLICT (metric, org, project, label, label2)
DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total;
DELETE FROM cryo.metric_deltas;
INSERT INTO cryo.metric_fold (folded_through) SELECT coalesce(max(h.id), 0) FROM cryo.history h;

COMMENT ON TABLE cryo.metric_deltas IS
    'Changes to artifact bytes not yet folded into cryo.metric_counts, appended by the artifact_blobs trigger.';
