-- Several server replicas on one database, and agents told apart by build.
--
-- history.replica: the server replica whose connection wrote the row. Each replica sets
-- the session setting cryo.replica_id on its pool's connections (CRYOPG_REPLICA_ID), so
-- the column default fills it without any function passing it along; rows written
-- outside a server (psql, an application's submit_run) leave it NULL.
ALTER TABLE cryo.history
    ADD COLUMN replica text DEFAULT nullif(current_setting('cryo.replica_id', true), '');

-- agents.build: what the agent reports (version + source digest); instance: a random id
-- per agent process, so a restarted agent is told from the one asked to drain before it.
-- drain_requested_at:
-- set by `cryopg agents drain`; a draining agent is given no new claim and exits once
-- its current run ends. last_claim_at: when the agent last received a run, as it reports
-- it on its periodic refresh.
ALTER TABLE cryo.agents ADD COLUMN build text;
ALTER TABLE cryo.agents ADD COLUMN instance text;
ALTER TABLE cryo.agents ADD COLUMN drain_requested_at timestamptz;
ALTER TABLE cryo.agents ADD COLUMN last_claim_at timestamptz;
CREATE INDEX agents_draining ON cryo.agents (org, id) WHERE drain_requested_at IS NOT NULL;

-- Logs in object storage (CRYOPG_LOGS_S3_*): once a finished run's log has moved to the
-- store, its chunks leave cryo.logs and this row says where the log is. No foreign key:
-- a run's rows are collected together (cryo._collect_runs), as for every run table.
CREATE TABLE cryo.log_archives (
    run_id text PRIMARY KEY,
    org text NOT NULL,
    project text NOT NULL,
    object_key text NOT NULL,
    last_chunk_id bigint NOT NULL,
    bytes bigint NOT NULL,
    archived_at timestamptz NOT NULL
);
COMMENT ON TABLE cryo.log_archives IS
    'Runs whose log moved to the object store: the object key (sealed, compressed chunks), the last chunk id it holds and its size in bytes.';

-- Objects of moved logs whose runs were collected (retention, project delete): the
-- collecting transaction queues their keys here, a replica's mover deletes the objects
-- and then the rows. One row per queuing (no unique key): a key queued again while a
-- mover deletes it (a late mover's put) keeps a row the mover did not list.
CREATE TABLE cryo.log_objects_to_delete (
    id bigserial PRIMARY KEY,
    object_key text NOT NULL,
    queued_at timestamptz NOT NULL
);
COMMENT ON TABLE cryo.log_objects_to_delete IS
    'Keys of moved-log objects whose runs are gone, waiting for a mover to delete them from the store.';
