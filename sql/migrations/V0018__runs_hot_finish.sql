-- A finish sets runs.finished_at, and runs_cancel_on named that column in its predicate,
-- so no finish could be a HOT update: every one wrote a new entry into each of the
-- table's indexes. The index now keys on the cancel_on graphs alone (few runs have one;
-- the query that uses it still filters on finished_at), and a run's claim and finish
-- touch no indexed column, so both may stay on their page (fillfactor 85, V0006).

DROP INDEX cryo.runs_cancel_on;
CREATE INDEX runs_cancel_on ON cryo.runs (org, project, (graph #>> '{cancel_on,event}'))
    WHERE graph ? 'cancel_on';

