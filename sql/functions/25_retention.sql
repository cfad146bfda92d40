-- Retention and project removal: both delete whole runs through cryo._delete_runs, so a
-- run is either entirely present or entirely gone.

-- Deletes the runs and everything keyed by their ids. Children outside the set keep
-- running as top-level runs.
CREATE OR REPLACE FUNCTION cryo._delete_runs(p_ids text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    UPDATE cryo.runs SET parent_run_id = NULL
     WHERE parent_run_id = ANY (p_ids) AND NOT id = ANY (p_ids);
    DELETE FROM cryo.journal WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.history WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.logs WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.signals WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.run_outputs WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.state_cells WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.lease_waiters WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.leases WHERE holder_run_id = ANY (p_ids);
    DELETE FROM cryo.queue WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.runs WHERE id = ANY (p_ids);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Collects terminal runs past their project's retention, oldest first, at most p_batch.
-- A run created within the period cannot have finished before it, so the scan stays on
-- runs_project_created below the cut-off.
CREATE OR REPLACE FUNCTION cryo._collect_runs(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
BEGIN
    SELECT array_agg(old.id) INTO v_ids
      FROM (SELECT c.id
              FROM cryo.projects p
             CROSS JOIN LATERAL (
                   SELECT r.id FROM cryo.runs r
                    WHERE r.org = p.org AND r.project = p.slug
                      AND r.created_at < cryo.now() - p.run_retention
                      AND r.status IN ('succeeded', 'failed', 'cancelled', 'unreadable')
                      AND r.finished_at < cryo.now() - p.run_retention
                    ORDER BY r.created_at
                    LIMIT p_batch) c
             LIMIT p_batch) old;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    -- Lock in id order so two sweepers cannot deadlock; one that lost the race skips.
    SELECT array_agg(r.id) INTO v_ids
      FROM (SELECT id FROM cryo.runs WHERE id = ANY (v_ids) ORDER BY id
               FOR UPDATE SKIP LOCKED) r;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN cryo._delete_runs(v_ids);
END
$$;

-- Both periods in one place: a NULL leaves that period as it is.
CREATE OR REPLACE FUNCTION cryo.set_retention(
    p_org text, p_project text, p_runs interval DEFAULT NULL, p_events interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_runs IS NULL AND p_events IS NULL THEN
        RAISE EXCEPTION 'give a retention for runs, events or both' USING ERRCODE = 'CR004';
    END IF;
    IF p_runs <= interval '0' OR p_events <= interval '0' THEN
        RAISE EXCEPTION 'retention must be a positive interval' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.projects
       SET run_retention = coalesce(p_runs, run_retention),
           event_retention = coalesce(p_events, event_retention)
     WHERE org = p_org AND slug = p_project;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.set_retention(text, text, interval, interval) IS
    'Sets how long a project keeps terminal runs after they finish (p_runs, default 90 days) and bus events (p_events, default 30 days); NULL leaves one as it is. Returns nothing. Raises CR004 when both are NULL or one is not positive, CR005 for an unknown project.';

CREATE OR REPLACE FUNCTION cryo.get_retention(p_org text, p_project text)
RETURNS TABLE (runs interval, events interval)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT p.run_retention, p.event_retention FROM cryo.projects p
                  WHERE p.org = p_org AND p.slug = p_project;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_retention(text, text) IS
    'Returns how long a project keeps terminal runs and bus events. Raises CR005 for an unknown project.';

-- Removes a project and everything in it: runs (live ones too; their agents' next call
-- finds the claim gone), workflows, secrets, events, leases and cells of both scopes.
CREATE OR REPLACE FUNCTION cryo.delete_project(p_org text, p_project text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
BEGIN
    PERFORM 1 FROM cryo.projects WHERE org = p_org AND slug = p_project FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO v_ids
      FROM (SELECT id FROM cryo.runs WHERE org = p_org AND project = p_project
             ORDER BY id FOR UPDATE) r;
    PERFORM cryo._delete_runs(v_ids);  -- leases and their queues go with their runs
    DELETE FROM cryo.state_cells WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.events WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.secrets WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.workflows WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.projects WHERE org = p_org AND slug = p_project;
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION cryo.delete_project(text, text) IS
    'Deletes a project with all its runs (live ones included), journals, logs, cells of both scopes, events, leases, secrets and workflows, in one transaction; returns how many runs went. Raises CR005 for an unknown project.';
