-- Where a workflow was stored from. A run an application starts from SQL
-- (cryo.submit_run) or a trigger starts has no shell to take a directory from, so it
-- runs in the one `cryopg workflow put` ran in: on a local dev agent, `./script.sh`
-- in a stored graph resolves as it did by hand. Deployed agents ignore it, as they
-- ignore runs.workdir.

ALTER TABLE cryo.workflows ADD COLUMN workdir text;

COMMENT ON COLUMN cryo.workflows.workdir IS
    'The absolute directory the workflow was stored from (NULL when not given); runs started from it by name (submit_run, schedules, webhooks, handlers) get it as runs.workdir.';
