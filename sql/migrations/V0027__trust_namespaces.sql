-- Trust as a property of data. A row an untrusted run wrote is tainted, and the flag is
-- part of the key of the shared scopes, so a tainted write lands beside a trusted row of
-- the same name and can never replace it. A trusted writer may publish a row (or an
-- event) to untrusted readers. The rules that read these columns live in
-- functions/70_state.sql, 50_waits.sql, 78_artifacts.sql and 85_triggers.sql;
-- docs/security/trust.md is the reference.
ALTER TABLE cryo.state_cells
    ADD COLUMN tainted boolean NOT NULL DEFAULT false,
    ADD COLUMN published boolean NOT NULL DEFAULT false;
ALTER TABLE cryo.state_cells DROP CONSTRAINT state_cells_pkey;
ALTER TABLE cryo.state_cells ADD CONSTRAINT state_cells_pkey PRIMARY KEY (scope, key, tainted);

ALTER TABLE cryo.artifacts
    ADD COLUMN tainted boolean NOT NULL DEFAULT false,
    ADD COLUMN published boolean NOT NULL DEFAULT false;
ALTER TABLE cryo.artifacts DROP CONSTRAINT artifacts_pkey;
ALTER TABLE cryo.artifacts ADD CONSTRAINT artifacts_pkey PRIMARY KEY (scope, name, tainted);

-- events.untrusted already marks a tainted event; a trusted one may be published.
ALTER TABLE cryo.events ADD COLUMN published boolean NOT NULL DEFAULT false;

-- A trusted run's wait on the tainted namespace is journalled under family
-- event.tainted; publish finds those waiters by the same index as the others.
DROP INDEX cryo.journal_event_waiters;
CREATE INDEX journal_event_waiters ON cryo.journal (org, project, key_name)
    WHERE status = 'pending' AND key_family IN ('event', 'event.tainted');

COMMENT ON COLUMN cryo.state_cells.tainted IS 'Written by an untrusted run: the tainted namespace, which trusted runs read only when they ask for it (--tainted).';
COMMENT ON COLUMN cryo.state_cells.published IS 'A trusted cell its last set published (--public): untrusted runs may read it.';
COMMENT ON COLUMN cryo.artifacts.tainted IS 'Put by an untrusted run: the tainted namespace, which trusted runs read only when they ask for it (--tainted).';
COMMENT ON COLUMN cryo.artifacts.published IS 'A trusted artifact its put published (--public): untrusted runs may read it.';
COMMENT ON COLUMN cryo.events.published IS 'A trusted event its emitter published (--public): untrusted runs waiting on the name hear it too.';
