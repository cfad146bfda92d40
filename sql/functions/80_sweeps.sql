-- Sweeps: the poll behind every push, retention, and removing a project. All are safe
-- to run from every server replica at once (SKIP LOCKED, or locks in id order).

-- The poll backstop behind every push: re-pends runs whose claim expired (or ends them,
-- when a cancel was asked for), wakes parked runs that are due, purges old bus events,
-- collects runs past retention and hands on concurrency groups a hook missed.
CREATE OR REPLACE FUNCTION cryo.tick(p_batch integer DEFAULT 1000)
RETURNS TABLE (expired integer, woken integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_cancel record;
    v_ids text[];
    v_sleeps text[];
    v_waits text[];
    v_retries text[];
BEGIN
    -- Runs past their deadline fail (79_timeouts.sql), before an expired claim of one
    -- could hand it to another agent.
    PERFORM cryo._expire_deadlines(p_batch);
    -- Expired claims of runs asked to cancel simply end.
    FOR v_cancel IN
        SELECT q.run_id FROM cryo.queue q JOIN cryo.runs r ON r.id = q.run_id
         WHERE q.state = 'claimed' AND q.claim_expires_at < v_now AND r.cancel_requested
         LIMIT p_batch
           FOR UPDATE OF q SKIP LOCKED
    LOOP
        PERFORM cryo._finalize(v_cancel.run_id, 'cancelled', NULL, 'cancelled');
    END LOOP;

    SELECT array_agg(x.run_id) INTO v_ids FROM (
        SELECT q.run_id FROM cryo.queue q
         WHERE q.state = 'claimed' AND q.claim_expires_at < v_now
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED) x;
    expired := coalesce(cryo._release(v_ids, 'claim_expired'), 0);

    -- Due parked rows: a sleep is over, a bounded wait timed out (its memo records exit
    -- code 124, so replay takes the same branch), or a retry's backoff has passed.
    -- A graph run's substate sums up all its nodes, so its wake is named by the node
    -- whose timer is due (cryo._graph_due_kind): a sleep node is not a timed-out wait.
    SELECT array_agg(d.run_id) FILTER (WHERE d.kind = 'timer_fired'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'retry_due'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'wait_timed_out')
      INTO v_sleeps, v_retries, v_waits
      FROM (SELECT q.run_id,
                   CASE WHEN q.required_caps = '{graph}' THEN cryo._graph_due_kind(q.run_id)
                        WHEN q.park_reason = 'sleeping' THEN 'timer_fired'
                        WHEN q.park_reason = 'retry-backoff' THEN 'retry_due'
                        ELSE 'wait_timed_out' END AS kind
              FROM cryo.queue q
             WHERE q.state = 'parked' AND q.wake_at <= v_now
             ORDER BY q.wake_at
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) d;
    woken := coalesce(cryo._wake(v_sleeps, 'timer_fired', NULL, NULL, 0), 0)
           + coalesce(cryo._wake(v_retries, 'retry_due'), 0)
           + coalesce(cryo._wake(v_waits, 'wait_timed_out', NULL, NULL, 124), 0);

    -- The backstop behind a node job's wake: a graph run parked while one of its node
    -- jobs has already ended is woken, so no lost wake leaves a graph waiting.
    SELECT array_agg(g.run_id) INTO v_ids FROM (
        SELECT q.run_id FROM cryo.queue q
         WHERE q.state = 'parked' AND q.required_caps = '{graph}'
           AND EXISTS (SELECT 1 FROM cryo.node_instances i JOIN cryo.runs c ON c.id = i.job_run_id
                        WHERE i.run_id = q.run_id AND i.status = 'running'
                          AND cryo.is_terminal(c.status))
         LIMIT p_batch
           FOR UPDATE OF q SKIP LOCKED) g;
    woken := woken + coalesce(cryo._wake(v_ids, 'node_job_ended'), 0);

    PERFORM cryo._purge_events(p_batch);
    PERFORM cryo._collect_runs(p_batch);
    PERFORM cryo._reconcile_admission(p_batch);
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION cryo.tick(integer) IS
    'Fails live runs past their deadline (exit code 124), re-pends runs whose claim expired, ends expired runs that were asked to cancel, wakes due parked runs (sleeps, timed-out waits, retry backoffs), purges bus events and collects terminal runs past retention, and hands on concurrency groups whose holder ended unnoticed, at most p_batch of each; returns (expired, woken). Raises nothing of its own.';

-- Deletes bus events older than their project's retention, a batch at a time.
CREATE OR REPLACE FUNCTION cryo._purge_events(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.events e WHERE e.id IN (
        SELECT e2.id FROM cryo.events e2 JOIN cryo.projects p ON p.org = e2.org AND p.slug = e2.project
         WHERE e2.created_at < cryo.now() - p.event_retention
         ORDER BY e2.created_at LIMIT p_batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- The reconcile sweep: groups held by a run that already ended, and queues whose group
-- has room (no holder, fewer than its limit, or its window moved on), are handed on.
-- Safe to race with the terminal hook: both take the group lock.
CREATE OR REPLACE FUNCTION cryo._reconcile_admission(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_g record;
    v_n integer := 0;
BEGIN
    FOR v_g IN
        SELECT l.org, l.project, l.grp FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
         WHERE cryo.is_terminal(r.status)
        UNION
        SELECT g.org, g.project, g.grp
          FROM (SELECT DISTINCT w.org, w.project, w.grp FROM cryo.lease_waiters w) g
         WHERE NOT cryo._group_full(g.org, g.project, g.grp)
        LIMIT p_batch
    LOOP
        PERFORM cryo._lock_group(v_g.org, v_g.project, v_g.grp);
        IF cryo._hand_on_lease(v_g.org, v_g.project, v_g.grp) IS NOT NULL THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;


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
    DELETE FROM cryo.node_instances WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.node_states WHERE run_id = ANY (p_ids);
    PERFORM cryo._count_history_of(p_ids);  -- metrics: fold before delete
    DELETE FROM cryo.history WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.logs WHERE run_id = ANY (p_ids);
    WITH moved AS (DELETE FROM cryo.log_archives WHERE run_id = ANY (p_ids) RETURNING object_key)
    INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)  -- the movers delete them
    SELECT object_key, cryo.now() FROM moved;
    DELETE FROM cryo.signals WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.run_outputs WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.state_cells WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.lease_waiters WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.leases WHERE holder_run_id = ANY (p_ids);
    DELETE FROM cryo.queue WHERE run_id = ANY (p_ids);
    DELETE FROM cryo.runs WHERE id = ANY (p_ids);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    -- After the runs (a mover's claim locks a run's row, then its lease): a log being
    -- moved loses its lease, and the object its attempt may have written is queued.
    WITH moving AS (DELETE FROM cryo.log_moves WHERE run_id = ANY (p_ids) RETURNING object_key)
    INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
    SELECT object_key, cryo.now() FROM moving WHERE object_key IS NOT NULL;
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
                      AND cryo.is_terminal(r.status)
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
    DELETE FROM cryo.graph_cache WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.events WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.secrets WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.workflows WHERE org = p_org AND project = p_project;
    DELETE FROM cryo.projects WHERE org = p_org AND slug = p_project;
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION cryo.delete_project(text, text) IS
    'Deletes a project with all its runs (live ones included), journals, logs (moved ones queued for the movers to delete), cells of both scopes, cached node outputs, events, leases, secrets and workflows, in one transaction; returns how many runs went. Raises CR005 for an unknown project.';
