-- One mover per log (issue 36). Before this, every replica's mover picked the same
-- finished runs, uploaded over each other's objects and trimmed each other's logs. Now a
-- mover first claims a run's log in cryo.log_moves (the run's row locked FOR NO KEY
-- UPDATE SKIP LOCKED while the lease row is written): the lease says which attempt holds
-- it, until when, and the object key that attempt alone writes. A lease that expires (its
-- replica died) is taken over by the next claim, which queues the dead attempt's key for
-- deletion. cryo.archive_run_log accepts only the live lease's attempt. An attempt that
-- fails gives its lease back (lapsed at once, its key queued and cleared), so the row
-- keeps counting the run's attempts until the log moves.
CREATE TABLE cryo.log_moves (
    run_id text PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    attempt_id text NOT NULL,
    holder text NOT NULL,
    object_key text,
    last_chunk_id bigint NOT NULL,
    attempts integer NOT NULL,
    claimed_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL
);
COMMENT ON TABLE cryo.log_moves IS
    'Leases on finished runs'' logs being moved to the object store: the attempt holding it, its replica, the key only it writes (NULL once given back and queued for deletion), the last chunk it covers, how many attempts the run has had, and when the lease lapses.';

-- What the verified object is (its size and SHA-256 as the mover read them back) and
-- which attempt wrote it; NULL for logs moved before this migration.
ALTER TABLE cryo.log_archives
    ADD COLUMN attempt_id text,
    ADD COLUMN object_bytes bigint,
    ADD COLUMN sha256 bytea,
    ADD COLUMN attempts integer;

-- A key queued at a takeover may still be completed by the slow attempt that wrote it,
-- within its old lease: its deletion waits until not_before (NULL: at once).
ALTER TABLE cryo.log_objects_to_delete ADD COLUMN not_before timestamptz;
