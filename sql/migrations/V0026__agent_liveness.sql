-- Agent liveness (issue 36): when an agent process was last known to be gone. Set when it
-- says goodbye on its way out, or when the server sees its claim long-poll closed from
-- the other end (a killed agent); cleared by its next refresh (cryo.register_agent).
-- cryo.list_agents shows such an agent as gone at once instead of two minutes later.
ALTER TABLE cryo.agents ADD COLUMN gone_at timestamptz;
