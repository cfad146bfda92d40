-- Agents waiting on a long-poll, registered by the server holding them, so that a
-- submit can claim its new run for one of them in its own transaction (cryo._hand_off)
-- and tell that server on its own channel, instead of the server claiming after the
-- notify (a second round trip and commit between the enqueue and the start).
-- Unlogged: a registration lives as long as a long-poll and costs no WAL; after a crash
-- the table is empty, which is right (every long-poll it held is gone too).
CREATE UNLOGGED TABLE cryo.claim_waiters (
    waiter uuid PRIMARY KEY,
    org text NOT NULL,
    capabilities text[] NOT NULL,
    agent_id text NOT NULL,
    agent_token text,
    claim_token uuid NOT NULL,  -- as the queue row will hold it (bound, see _bind_claim)
    claim_seconds double precision NOT NULL,
    channel text NOT NULL,      -- the server's own LISTEN channel
    lock_key integer NOT NULL,  -- the advisory lock its server holds while it listens
    registered_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX claim_waiters_org ON cryo.claim_waiters (org, registered_at);
