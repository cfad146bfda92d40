-- One word per idea: a claim is an agent's hold on a running run (token + expiry); a
-- lease is a run's hold on a concurrency group. The queue's expiry column and the
-- history kind of an expired claim said "lease"; they now say "claim".

ALTER TABLE cryo.queue RENAME COLUMN lease_expires_at TO claim_expires_at;
ALTER INDEX cryo.queue_claimed_lease RENAME TO queue_claimed_expiry;
UPDATE cryo.history SET kind = 'claim_expired' WHERE kind = 'lease_expired';

COMMENT ON COLUMN cryo.queue.claim_expires_at IS
    'When the agent''s claim on this running run expires unless renewed (every log flush renews it); tick() then re-pends the run.';
