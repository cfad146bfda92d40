-- The webhooks page reads a project's latest deliveries; the primary key orders them by
-- body hash, so without this a project's whole delivery history is sorted per read.
CREATE INDEX webhook_deliveries_recent ON cryo.webhook_deliveries (org, project, created_at DESC);
