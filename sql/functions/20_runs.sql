-- Runs: submitting, finishing, cancelling and reading them.

-- Moves a run to a terminal status and drops its queue row. Every way a run can end
-- (agent report, cancel, lease sweep) comes through here, so terminal work happens once.
CREATE OR REPLACE FUNCTION cryo._finalize_run(
    p_run_id text, p_status text, p_exit_code integer, p_error text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    UPDATE cryo.runs SET status = p_status, substate = NULL, exit_code = p_exit_code,
                         error = p_error, finished_at = cryo.now(), updated_at = cryo.now()
     WHERE id = p_run_id
    RETURNING * INTO v_run;
    DELETE FROM cryo.queue WHERE run_id = p_run_id;
    -- The history row is written here rather than through cryo._history: this is the
    -- hottest path, and a plain statement keeps its cached plan where a call to a SQL
    -- function is planned afresh each time.
    INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_status, v_run.attempt, cryo.now());
    IF v_run.watched THEN  -- see cryo._notify_run
        PERFORM pg_notify('cryo_run', p_run_id);
    END IF;
    PERFORM cryo._release_leases(p_run_id);  -- groups it held go to their next waiter
    IF v_run.parent_run_id IS NOT NULL THEN
        PERFORM cryo._wake_parent(p_run_id);  -- its parent may be waiting to collect it
    END IF;
END
$$;

-- The server's submit: source and input arrive sealed. With an idempotency key, a
-- repeated submit returns the first run and creates nothing.
CREATE OR REPLACE FUNCTION cryo.submit_script(
    p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea,
    p_input bytea DEFAULT NULL, p_idempotency_key text DEFAULT NULL,
    p_required_caps text[] DEFAULT '{shell}', p_workflow text DEFAULT NULL,
    p_input_clear jsonb DEFAULT NULL, p_concurrency text DEFAULT NULL,
    p_policy text DEFAULT NULL)
RETURNS TABLE (run_id text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
    v_now timestamptz := cryo.now();
    v_policy text := coalesce(p_policy, 'queue');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF coalesce(p_filename, '') = '' OR p_source IS NULL THEN
        RAISE EXCEPTION 'a run needs a filename and a source' USING ERRCODE = 'CR004';
    END IF;
    IF p_idempotency_key = '' THEN
        RAISE EXCEPTION 'an idempotency key cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    IF p_concurrency IS NOT NULL THEN
        PERFORM cryo._check_name('concurrency group', p_concurrency);
        IF v_policy NOT IN ('queue', 'cancel-running', 'cancel-queued', 'skip') THEN
            RAISE EXCEPTION 'policy must be queue, cancel-running, cancel-queued or skip, not %', v_policy
                USING ERRCODE = 'CR004';
        END IF;
        PERFORM cryo._lock_group(p_org, p_project, p_concurrency);
        IF p_idempotency_key IS NOT NULL AND EXISTS (
                SELECT 1 FROM cryo.runs r WHERE r.org = p_org AND r.project = p_project
                   AND r.idempotency_key = p_idempotency_key) THEN
            NULL;  -- the insert below finds the first run and returns it
        ELSIF v_policy = 'skip' AND cryo._group_holder(p_org, p_project, p_concurrency) IS NOT NULL THEN
            RETURN QUERY SELECT NULL::text, false;  -- skip: no run at all
            RETURN;
        END IF;
    END IF;
    INSERT INTO cryo.runs (id, org, project, workflow, filename, interpreter, source, input,
                           input_clear, idempotency_key, required_caps, created_at, updated_at)
    -- run-<12 hex: ms since 1970><8 random hex>: ids grow with time, so the b-trees keyed
    -- on them (runs, journal, history, logs) insert at their right edge instead of at a
    -- random page of a large index; the random part keeps ids unguessable.
    VALUES (p_org || ':' || p_project || ':run-'
            || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || left(replace(gen_random_uuid()::text, '-', ''), 8),
            p_org, p_project, p_workflow, p_filename, nullif(p_interpreter, ''), p_source, p_input,
            p_input_clear, p_idempotency_key, p_required_caps, v_now, v_now)
    ON CONFLICT (org, project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN QUERY SELECT r.id, false FROM cryo.runs r
         WHERE r.org = p_org AND r.project = p_project AND r.idempotency_key = p_idempotency_key;
        RETURN;
    END IF;
    PERFORM cryo._history(v_id, p_org, p_project, 'submitted');
    IF p_concurrency IS NULL OR cryo._admit(v_id, p_org, p_project, p_concurrency, v_policy) = 'pending' THEN
        INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at)
        VALUES (v_id, p_org, p_project, 'pending', p_required_caps, v_now);
        PERFORM pg_notify('cryo_work', '');
    END IF;
    RETURN QUERY SELECT v_id, true;
END
$$;
COMMENT ON FUNCTION cryo.submit_script(text, text, text, text, bytea, bytea, text, text[], text, jsonb, text, text) IS
    'Creates a run from a sealed source and input, pending, or queued behind its concurrency group''s holder per p_policy (queue, cancel-running, cancel-queued, skip); returns (run_id, created), created false when the idempotency key already named a run, run_id NULL when skip found the group held. Raises CR005 for an unknown project, CR004 for a missing source, empty key or unknown policy, CR030 when the group''s queue is full.';

-- Stores (or replaces) a named script so applications can submit it from SQL.
CREATE OR REPLACE FUNCTION cryo.put_workflow(
    p_org text, p_project text, p_name text, p_filename text, p_interpreter text, p_source bytea)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'workflow name % must be letters, digits, _ . - (up to 128)', p_name
            USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.workflows (org, project, name, filename, interpreter, source, updated_at)
    VALUES (p_org, p_project, p_name, p_filename, nullif(p_interpreter, ''), p_source, cryo.now())
    ON CONFLICT (org, project, name) DO UPDATE
       SET filename = excluded.filename, interpreter = excluded.interpreter,
           source = excluded.source, updated_at = excluded.updated_at;
END
$$;
COMMENT ON FUNCTION cryo.put_workflow(text, text, text, text, text, bytea) IS
    'Stores a sealed script under a name in a project, replacing any earlier one. Returns nothing. Raises CR005 for an unknown project, CR004 for a bad name.';

-- The application's submit: call it inside your own transaction and the run exists
-- only if that transaction commits. The input arrives in the clear (the application
-- already holds it); it is kept in runs.input_clear until the first claim, when the
-- server seals it and clears the column.
CREATE OR REPLACE FUNCTION cryo.submit_run(
    p_org text, p_project text, p_workflow text, p_input jsonb DEFAULT NULL,
    p_idempotency_key text DEFAULT NULL, p_concurrency text DEFAULT NULL,
    p_policy text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_wf cryo.workflows;
    v_id text;
BEGIN
    SELECT * INTO v_wf FROM cryo.workflows
     WHERE org = p_org AND project = p_project AND name = p_workflow;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_workflow, p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    SELECT s.run_id INTO v_id FROM cryo.submit_script(
        p_org, p_project, v_wf.filename, v_wf.interpreter, v_wf.source, NULL, p_idempotency_key,
        CASE WHEN v_wf.filename ~ '\.(sh|bash)$' OR v_wf.filename !~ '\.' THEN '{shell}'::text[]
             ELSE '{polyglot}'::text[] END,
        p_workflow, p_input, p_concurrency, p_policy) s;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.submit_run(text, text, text, jsonb, text, text, text) IS
    'Submits the stored workflow by name with a jsonb input, optionally under a concurrency group and policy; returns the run id (the existing one for a repeated idempotency key, NULL when skip found the group held). Raises CR005 for an unknown workflow or project, CR004 for a bad policy, CR030 when the group''s queue is full.';

-- The server seals a clear input it found at claim time, then drops the clear copy.
CREATE OR REPLACE FUNCTION cryo.seal_run_input(p_run_id text, p_token uuid, p_input bytea)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs SET input = p_input, input_clear = NULL
     WHERE id = p_run_id AND input_clear IS NOT NULL;
END
$$;
COMMENT ON FUNCTION cryo.seal_run_input(text, uuid, bytea) IS
    'Replaces a run''s clear input with its sealed form. Returns nothing. Raises CR002 for a stale claim token.';

-- Cancels a run: a queued or parked run ends at once; a running one is flagged and
-- its agent stops the script on its next log flush (or the lease sweep ends it).
CREATE OR REPLACE FUNCTION cryo.cancel_run(p_run_id text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
    v_child record;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
    IF v_run.status IN ('succeeded', 'failed', 'cancelled', 'unreadable') THEN
        RAISE EXCEPTION 'run % already finished (%)', p_run_id, v_run.status USING ERRCODE = 'CR006';
    END IF;
    -- Children go first, so a parent collecting them is not woken only to be cancelled.
    FOR v_child IN
        SELECT c.id FROM cryo.runs c
         WHERE c.parent_run_id = p_run_id
           AND c.status NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable')
    LOOP
        PERFORM cryo.cancel_run(v_child.id);
    END LOOP;
    IF v_run.status = 'running' THEN
        UPDATE cryo.runs SET cancel_requested = true, updated_at = cryo.now() WHERE id = p_run_id;
        PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'cancel_requested');
        PERFORM cryo._notify_run(p_run_id);
        RETURN 'cancelling';
    END IF;
    PERFORM cryo._finalize_run(p_run_id, 'cancelled', NULL, 'cancelled');
    RETURN 'cancelled';
END
$$;
COMMENT ON FUNCTION cryo.cancel_run(text) IS
    'Cancels a run and its unfinished children; returns ''cancelled'' when it ended at once or ''cancelling'' when its agent must stop it. Raises CR003 for an unknown run, CR006 for a finished one.';

-- A queued run's place in its concurrency group's FIFO (see 80_admission.sql).
CREATE OR REPLACE FUNCTION cryo.queue_position(p_run_id text)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM cryo.lease_waiters o
             WHERE o.org = w.org AND o.project = w.project AND o.grp = w.grp AND o.id <= w.id)::integer
      FROM cryo.lease_waiters w WHERE w.run_id = p_run_id AND w.kind = 'admission'
     ORDER BY w.id LIMIT 1
$$;
COMMENT ON FUNCTION cryo.queue_position(text) IS
    'Returns a queued run''s 1-based position in its concurrency group''s queue, or NULL when it is not queued. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.get_run(p_run_id text)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
               r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
               r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
               CASE WHEN r.status = 'queued' THEN cryo.queue_position(r.id) END
          FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
         WHERE r.id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_run(text) IS
    'Returns one run with its queue facts (wake time, agent). Raises CR003 for an unknown run.';

CREATE OR REPLACE FUNCTION cryo.list_runs(p_org text, p_project text, p_limit integer DEFAULT 50)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo.queue_position(r.id) END
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
     ORDER BY r.created_at DESC, r.id
     LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.list_runs(text, text, integer) IS
    'Returns a project''s newest runs first, at most p_limit. Raises nothing.';
