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
