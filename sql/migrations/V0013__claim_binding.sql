-- Claims bound to the agent token that took them, and agents scoped by org.
--
-- queue.claim_agent_token names the agent token (its id) whose claim the row holds; the
-- claim token stored beside it is bound to that token (see cryo._bind_claim), so a claim
-- token presented with any other agent token is not the live claim.
--
-- Agent ids were global: an agent of one org registering an id another org uses moved
-- that row to its own org. They are now keyed by (org, id), and bounded.

ALTER TABLE cryo.queue ADD COLUMN claim_agent_token text;

ALTER TABLE cryo.agents DROP CONSTRAINT agents_pkey;
ALTER TABLE cryo.agents ADD PRIMARY KEY (org, id);
ALTER TABLE cryo.agents ADD CONSTRAINT agents_id_shape
    CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$') NOT VALID;
