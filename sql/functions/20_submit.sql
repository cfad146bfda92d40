-- Submit and admission: how runs come to exist, and how a concurrency group lets them
-- through one at a time.
--
-- A group (one per name per project) has at most one holder -- a run, never an agent --
-- and a FIFO of waiters. Submits with a group and scripts' `cryopg lock` share it.
-- Whatever ends a holder's lease (release_lease, or the run ending in any way) hands
-- the group to the oldest waiter in the same transaction; tick() reconciles groups such
-- a hook could have missed. The writes themselves are the lease transitions in
-- 10_transitions.sql (_take_lease, _queue_for_lease, _hand_on_lease, _release_lease),
-- beside the group's lock (_lock_group) and who holds it (_group_holder).

-- Submit-time admission, with the group already locked and the new run inserted.
-- Returns what the run does next: 'pending' (it holds the group) or 'queued'. A group
-- with room (fewer holders than its limit, cryo._group_full) takes the run at once.
CREATE OR REPLACE FUNCTION cryo._admit(
    p_run_id text, p_org text, p_project text, p_group text, p_policy text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text := cryo._group_holder(p_org, p_project, p_group);
    v_waiter record;
    v_limit integer;
BEGIN
    UPDATE cryo.runs SET concurrency_group = p_group WHERE id = p_run_id;
    IF NOT cryo._group_full(p_org, p_project, p_group) THEN
        PERFORM cryo._take_lease(p_org, p_project, p_group, p_run_id, 'admission', NULL, false);
        RETURN 'pending';
    END IF;
    IF p_policy = 'cancel-running' THEN
        -- Take the hold first, so the incumbent's ending hands nothing to its waiters.
        PERFORM cryo._take_lease(p_org, p_project, p_group, p_run_id, 'admission', NULL, false);
        PERFORM cryo._drop_lease(p_org, p_project, p_group, v_holder);
        PERFORM cryo.cancel_run(v_holder);
        RETURN 'pending';
    END IF;
    IF p_policy = 'cancel-queued' THEN
        FOR v_waiter IN SELECT w.run_id FROM cryo.lease_waiters w
                         WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
                         ORDER BY w.id LOOP
            PERFORM cryo.cancel_run(v_waiter.run_id);
        END LOOP;
    END IF;
    SELECT p.admission_queue_limit INTO v_limit FROM cryo.projects p
     WHERE p.org = p_org AND p.slug = p_project;
    IF (SELECT count(*) FROM cryo.lease_waiters w
         WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
           AND w.kind = 'admission') >= v_limit THEN
        RAISE EXCEPTION 'concurrency group % already has % queued runs (the limit); try later', p_group, v_limit
            USING ERRCODE = 'CR030';
    END IF;
    PERFORM cryo._queue_for_lease(p_org, p_project, p_group, p_run_id, 'admission', NULL, false);
    PERFORM cryo._hold_queued(p_run_id);
    PERFORM cryo._history(p_run_id, p_org, p_project, 'queued');
    RETURN 'queued';
END
$$;

-- The one submit. Source and input arrive sealed from the server, or the input in the
-- clear from SQL (see submit_run). With an idempotency key, a repeated submit returns
-- the first run and creates nothing. An untrusted run's claims carry no secrets.
CREATE OR REPLACE FUNCTION cryo.submit_script(
    p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea,
    p_input bytea DEFAULT NULL, p_idempotency_key text DEFAULT NULL,
    p_required_caps text[] DEFAULT '{shell}', p_workflow text DEFAULT NULL,
    p_input_clear jsonb DEFAULT NULL, p_concurrency text DEFAULT NULL,
    p_policy text DEFAULT NULL, p_untrusted boolean DEFAULT false,
    p_parent_run_id text DEFAULT NULL, p_workdir text DEFAULT NULL, p_graph jsonb DEFAULT NULL,
    p_timeout double precision DEFAULT NULL, p_priority integer DEFAULT NULL)
RETURNS TABLE (run_id text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
    v_policy text := coalesce(p_policy, 'queue');
    -- The submit's timeout, else its stored workflow's, else its graph document's own;
    -- its priority, else its workflow's, else its parent's (a node's job is claimed as
    -- its graph run would be).
    v_wf cryo.workflows;
    v_timeout double precision;
    v_priority integer;
BEGIN
    IF p_workflow IS NOT NULL AND (p_timeout IS NULL OR p_priority IS NULL) THEN
        SELECT * INTO v_wf FROM cryo.workflows w
         WHERE w.org = p_org AND w.project = p_project AND w.name = p_workflow;
    END IF;
    v_timeout := coalesce(p_timeout, v_wf.timeout_s, (p_graph ->> 'timeout')::float8);
    v_priority := coalesce(p_priority, v_wf.priority, CASE WHEN p_parent_run_id IS NOT NULL THEN
        (SELECT p.priority FROM cryo.runs p WHERE p.id = p_parent_run_id) END, 0);
    IF v_timeout IS NOT NULL AND (v_timeout <= 0 OR v_timeout > 31622400
                                  OR v_timeout = 'NaN'::float8) THEN
        RAISE EXCEPTION 'a timeout is between 0 and 366 days, not % s', v_timeout
            USING ERRCODE = 'CR004';
    END IF;
    IF v_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'a priority is an integer from -1000 to 1000, not %', v_priority
            USING ERRCODE = 'CR004';
    END IF;
    IF p_required_caps IS NULL THEN
        p_required_caps := cryo._required_caps(p_filename, p_interpreter);
    END IF;
    PERFORM cryo._require_project(p_org, p_project);
    IF coalesce(p_filename, '') = '' OR p_source IS NULL THEN
        RAISE EXCEPTION 'a run needs a filename and a source' USING ERRCODE = 'CR004';
    END IF;
    IF p_idempotency_key = '' THEN
        RAISE EXCEPTION 'an idempotency key cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    IF p_policy IS NOT NULL AND p_concurrency IS NULL THEN
        RAISE EXCEPTION 'a policy (%) needs a concurrency group to apply to', p_policy
            USING ERRCODE = 'CR004';
    END IF;
    IF p_workdir IS NOT NULL AND (p_workdir !~ '^/' OR length(p_workdir) > 4096
                                  OR p_workdir ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'a working directory must be an absolute path' USING ERRCODE = 'CR004';
    END IF;
    IF p_concurrency IS NOT NULL THEN
        PERFORM cryo._check_name('concurrency group', p_concurrency);
        IF v_policy NOT IN ('queue', 'cancel-running', 'cancel-queued', 'skip') THEN
            RAISE EXCEPTION 'policy must be queue, cancel-running, cancel-queued or skip, not %', v_policy
                USING ERRCODE = 'CR004';
        END IF;
        PERFORM cryo._lock_group(p_org, p_project, p_concurrency);
        IF p_graph IS NOT NULL THEN  -- a graph's own `concurrency: {group, limit, window}`
            PERFORM cryo._declare_group_limit(p_org, p_project, p_concurrency,
                                              (p_graph ->> 'concurrency_limit')::integer,
                                              (p_graph ->> 'concurrency_window')::float8);
        END IF;
        IF p_idempotency_key IS NOT NULL AND EXISTS (
                SELECT 1 FROM cryo.runs r WHERE r.org = p_org AND r.project = p_project
                   AND r.idempotency_key = p_idempotency_key) THEN
            NULL;  -- _create_run below finds the first run and returns it
        ELSIF v_policy = 'skip' AND cryo._group_full(p_org, p_project, p_concurrency) THEN
            RETURN QUERY SELECT NULL::text, false;  -- skip: no run at all
            RETURN;
        END IF;
    END IF;
    v_id := cryo._create_run(p_org, p_project, p_workflow, p_filename, p_interpreter, p_source,
                             p_input, p_input_clear, p_idempotency_key,
                             CASE WHEN p_graph IS NULL THEN p_required_caps ELSE '{graph}' END,
                             p_untrusted, p_parent_run_id, p_workdir, p_graph,
                             v_timeout, v_priority);
    IF v_id IS NULL THEN
        RETURN QUERY SELECT r.id, false FROM cryo.runs r
         WHERE r.org = p_org AND r.project = p_project AND r.idempotency_key = p_idempotency_key;
        RETURN;
    END IF;
    IF p_graph IS NOT NULL THEN
        PERFORM cryo._graph_init(v_id, p_org, p_project, p_graph);
    END IF;
    IF p_concurrency IS NULL OR cryo._admit(v_id, p_org, p_project, p_concurrency, v_policy) = 'pending' THEN
        PERFORM cryo._enqueue(v_id, p_org, p_project,
                              CASE WHEN p_graph IS NULL THEN p_required_caps ELSE '{graph}' END);
    END IF;
    RETURN QUERY SELECT v_id, true;
END
$$;
COMMENT ON FUNCTION cryo.submit_script(text, text, text, text, bytea, bytea, text, text[], text, jsonb, text, text, boolean, text, text, jsonb, double precision, integer) IS
    'Creates a run from a sealed source and input (or a clear jsonb input); with p_graph (a compiled graph structure) a graph run whose sealed source is its document, driven by the server''s interpreter; pending, or queued behind its concurrency group''s holder per p_policy (queue, cancel-running, cancel-queued, skip); p_required_caps NULL means what its filename and interpreter need; p_untrusted runs get no secret values; p_parent_run_id makes it a child run; p_workdir is the absolute directory it was submitted from (a child inherits its parent''s); p_timeout (seconds, else its stored workflow''s default, else the graph''s own timeout) fails it with exit code 124 that long after submit; p_priority (-1000..1000, else its workflow''s default, else its parent''s, else 0) orders pending claims, higher first. Returns (run_id, created): created false when the idempotency key already named a run, run_id NULL when skip found the group held. Raises CR005 for an unknown project, CR004 for a missing source, empty key, bad group name, unknown policy, a policy without a group, a relative working directory, a bad timeout or priority, CR030 when the group''s queue is full.';

-- Stores (or replaces) a named script so applications can submit it from SQL. p_workdir
-- is the directory it was stored from (`cryopg workflow put` sends its own): runs started
-- by name have no other, and a local agent runs them there. Each change of what is
-- stored is a new row of workflow_versions, with who (p_by) and when; p_digest (a keyed
-- hash of the clear source, from the server) tells an unchanged save, which adds none.
-- p_base_version is the version an editor started from (0: a new workflow): a save over
-- a later one is refused, so two people editing at once cannot lose each other's work.
CREATE OR REPLACE FUNCTION cryo.put_workflow(
    p_org text, p_project text, p_name text, p_filename text, p_interpreter text, p_source bytea,
    p_graph jsonb DEFAULT NULL, p_workdir text DEFAULT NULL, p_digest bytea DEFAULT NULL,
    p_by text DEFAULT NULL, p_base_version integer DEFAULT NULL,
    p_timeout double precision DEFAULT NULL, p_priority integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_cur cryo.workflows;
    v_version integer;
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    IF p_timeout IS NOT NULL AND NOT p_timeout BETWEEN 0.001 AND 31622400
       OR p_priority IS NOT NULL AND p_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'a timeout is between 0 and 366 days and a priority from -1000 to 1000'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION 'workflow name % must be letters, digits, _ . - (up to 128)', p_name
            USING ERRCODE = 'CR004';
    END IF;
    IF p_workdir IS NOT NULL AND (p_workdir !~ '^/' OR length(p_workdir) > 4096
                                  OR p_workdir ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'a working directory must be an absolute path' USING ERRCODE = 'CR004';
    END IF;
    SELECT * INTO v_cur FROM cryo.workflows
     WHERE org = p_org AND project = p_project AND name = p_name FOR UPDATE;
    IF p_base_version IS NOT NULL AND coalesce(v_cur.version, 0) <> p_base_version THEN
        RAISE EXCEPTION 'workflow % is at version %, not %: it changed since you opened it (reload and edit again)',
            p_name, coalesce(v_cur.version, 0), p_base_version USING ERRCODE = 'CR240';
    END IF;
    IF v_cur.name IS NOT NULL AND p_digest IS NOT NULL AND EXISTS (
        SELECT 1 FROM cryo.workflow_versions v
         WHERE v.org = p_org AND v.project = p_project AND v.workflow = p_name
           AND v.version = v_cur.version AND v.digest = p_digest
           AND v.filename = p_filename
           AND v.interpreter IS NOT DISTINCT FROM nullif(p_interpreter, '')
           AND v.workdir IS NOT DISTINCT FROM p_workdir)
       AND v_cur.timeout_s IS NOT DISTINCT FROM p_timeout
       AND v_cur.priority IS NOT DISTINCT FROM p_priority THEN
        RETURN v_cur.version;  -- the same definition again: no new version
    END IF;
    INSERT INTO cryo.workflows (org, project, name, filename, interpreter, source, kind, graph,
                                workdir, updated_at, version, timeout_s, priority)
    VALUES (p_org, p_project, p_name, p_filename, nullif(p_interpreter, ''), p_source,
            CASE WHEN p_graph IS NULL THEN 'script' ELSE 'graph' END, p_graph, p_workdir,
            cryo.now(), 1, p_timeout, p_priority)
    ON CONFLICT (org, project, name) DO UPDATE
       SET filename = excluded.filename, interpreter = excluded.interpreter,
           source = excluded.source, kind = excluded.kind, graph = excluded.graph,
           workdir = excluded.workdir, updated_at = excluded.updated_at,
           timeout_s = excluded.timeout_s, priority = excluded.priority,
           version = cryo.workflows.version + 1
    RETURNING version INTO v_version;
    IF p_base_version IS NOT NULL AND v_version <> p_base_version + 1 THEN
        -- Another first save of the same name committed while this one waited.
        RAISE EXCEPTION 'workflow % changed since you opened it (reload and edit again)', p_name
            USING ERRCODE = 'CR240';
    END IF;
    INSERT INTO cryo.workflow_versions (org, project, workflow, version, filename, interpreter,
                                        source, kind, graph, workdir, digest, created_by, created_at)
    VALUES (p_org, p_project, p_name, v_version, p_filename, nullif(p_interpreter, ''), p_source,
            CASE WHEN p_graph IS NULL THEN 'script' ELSE 'graph' END, p_graph, p_workdir,
            p_digest, p_by, cryo.now());
    -- Its on: schedule / event register schedules and handlers (85_triggers.sql).
    PERFORM cryo._register_workflow_triggers(p_org, p_project, p_name, p_graph);
    RETURN v_version;
END
$$;
COMMENT ON FUNCTION cryo.put_workflow(text, text, text, text, text, bytea, jsonb, text, bytea, text, integer, double precision, integer) IS
    'Stores a sealed script (or, with p_graph, a sealed graph document and its compiled structure) under a name in a project, replacing any earlier one and keeping it as a new version by p_by (unless p_digest, filename, interpreter, directory, timeout and priority equal the current version''s); p_workdir is the absolute directory it was stored from, which runs started by name get (a local agent runs them there); p_timeout (seconds) and p_priority are the defaults of its runs; the schedules and handlers its on names replace those its earlier version registered. Returns the current version number. Raises CR005 for an unknown project, CR004 for a bad name, a relative working directory, or a bad timeout or priority, CR240 when p_base_version is given and is not the current version (0: the workflow must not exist yet).';

-- The one rule for the agent capability a script needs (every submit that is given no
-- capabilities uses it): a shell for a script run by a shell, or with no interpreter a
-- file named .sh, .bash or without an extension; the polyglot runner for anything else.
CREATE OR REPLACE FUNCTION cryo._required_caps(p_filename text, p_interpreter text)
RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN btrim(coalesce(p_interpreter, '')) <> '' THEN
            CASE WHEN regexp_replace((regexp_split_to_array(btrim(p_interpreter), '\s+'))[1],
                                     '^.*/', '') IN ('bash', 'sh', 'dash', 'zsh')
                 THEN '{shell}'::text[] ELSE '{polyglot}'::text[] END
        WHEN regexp_replace(p_filename, '^.*/', '') ~ '(\.(sh|bash)$|^[^.]*$)' THEN '{shell}'::text[]
        ELSE '{polyglot}'::text[] END
$$;

-- An application stores a graph or YAML pipeline it compiled with `cryopg pipeline
-- compile --compiled FILE` (SQL holds no compiler and no key), then starts it with
-- submit_run like any stored workflow. The compiled document stays in the clear, as an
-- input given from SQL does: the application already held it in the clear. The server
-- reads a graph source that is not a sealed envelope as such a document.
CREATE OR REPLACE FUNCTION cryo.put_compiled_workflow(
    p_org text, p_project text, p_name text, p_compiled jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(p_compiled -> 'structure') IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_compiled #> '{structure,nodes}') IS DISTINCT FROM 'array'
       OR jsonb_typeof(p_compiled -> 'document') IS DISTINCT FROM 'object'
       OR jsonb_typeof(p_compiled #> '{document,configs}') IS DISTINCT FROM 'object'
       OR p_compiled #>> '{document,version}' IS DISTINCT FROM 'cryosleep-graph/v1' THEN
        RAISE EXCEPTION 'a compiled workflow is {filename, structure, document}, as `cryopg pipeline compile --compiled` prints it'
            USING ERRCODE = 'CR004';
    END IF;
    PERFORM cryo.put_workflow(p_org, p_project, p_name,
                              coalesce(nullif(p_compiled ->> 'filename', ''), p_name || '.json'),
                              NULL, convert_to((p_compiled -> 'document')::text, 'UTF8'),
                              p_compiled -> 'structure');
END
$$;
COMMENT ON FUNCTION cryo.put_compiled_workflow(text, text, text, jsonb) IS
    'Stores a graph or pipeline compiled by `cryopg pipeline compile --compiled` ({filename, structure, document}) under a name, its document in the clear, for cryo.submit_run. Returns nothing. Raises CR004 for a value of another shape or a bad name, CR005 for an unknown project.';

-- The application's submit: call it inside your own transaction and the run exists
-- only if that transaction commits. The input arrives in the clear (the application
-- already holds it); it is kept in runs.input_clear until the first claim, when the
-- server seals it and clears the column.
CREATE OR REPLACE FUNCTION cryo.submit_run(
    p_org text, p_project text, p_workflow text, p_input jsonb DEFAULT NULL,
    p_idempotency_key text DEFAULT NULL, p_concurrency text DEFAULT NULL,
    p_policy text DEFAULT NULL, p_timeout double precision DEFAULT NULL,
    p_priority integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_wf cryo.workflows;
    v_id text;
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    SELECT * INTO v_wf FROM cryo.workflows
     WHERE org = p_org AND project = p_project AND name = p_workflow;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_workflow, p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    IF v_wf.kind = 'graph' AND p_concurrency IS NULL AND v_wf.graph ? 'concurrency' THEN
        p_concurrency := cryo._eval(v_wf.graph -> 'concurrency',
                                    jsonb_build_object('input', coalesce(p_input, 'null'))) #>> '{}';
    END IF;
    SELECT s.run_id INTO v_id FROM cryo.submit_script(
        p_org, p_project, v_wf.filename, v_wf.interpreter, v_wf.source, NULL, p_idempotency_key,
        NULL,  -- the capabilities its filename and interpreter need (cryo._required_caps)
        p_workflow, p_input, p_concurrency, p_policy, p_workdir => v_wf.workdir,
        p_graph => v_wf.graph, p_timeout => p_timeout, p_priority => p_priority) s;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.submit_run(text, text, text, jsonb, text, text, text, double precision, integer) IS
    'Submits the stored workflow by name with a jsonb input, optionally under a concurrency group and policy, a timeout in seconds (else the graph''s own) and a claim priority, in the directory the workflow was stored from; returns the run id (the existing one for a repeated idempotency key, NULL when skip found the group held). Raises CR005 for an unknown workflow or project, CR004 for a bad policy, CR030 when the group''s queue is full, CR021 when the caller is an application role of another tenant (or of none).';

-- A child run or activity of an untrusted run is untrusted too, however it was started:
-- this trigger carries the mark across parent_run_id, so no path through a child can
-- reach the project's secrets.
CREATE OR REPLACE FUNCTION cryo._inherit_untrusted()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL AND NOT NEW.untrusted THEN
        NEW.untrusted := coalesce((SELECT r.untrusted FROM cryo.runs r WHERE r.id = NEW.parent_run_id), false);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS runs_inherit_untrusted ON cryo.runs;
CREATE TRIGGER runs_inherit_untrusted
    BEFORE INSERT OR UPDATE OF parent_run_id ON cryo.runs
    FOR EACH ROW EXECUTE FUNCTION cryo._inherit_untrusted();

CREATE OR REPLACE FUNCTION cryo.set_admission_queue_limit(p_org text, p_project text, p_limit integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'the queue limit must be at least 1' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.projects SET admission_queue_limit = p_limit WHERE org = p_org AND slug = p_project;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.set_admission_queue_limit(text, text, integer) IS
    'Sets how many runs may queue per concurrency group in a project (default 100). Returns nothing. Raises CR004 for a limit below 1, CR005 for an unknown project.';

-- A queued run's place in its concurrency group's FIFO. The engine's reads (get_run,
-- list_runs, the runs page) call this per queued row; applications call the checked
-- queue_position below.
CREATE OR REPLACE FUNCTION cryo._queue_position(p_run_id text)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM cryo.lease_waiters o
             WHERE o.org = w.org AND o.project = w.project AND o.grp = w.grp AND o.id <= w.id)::integer
      FROM cryo.lease_waiters w WHERE w.run_id = p_run_id AND w.kind = 'admission'
     ORDER BY w.id LIMIT 1
$$;

CREATE OR REPLACE FUNCTION cryo.queue_position(p_run_id text)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT cryo._app_run_check(p_run_id);
    SELECT cryo._queue_position(p_run_id)
$$;
COMMENT ON FUNCTION cryo.queue_position(text) IS
    'Returns a queued run''s 1-based position in its concurrency group''s queue, or NULL when it is not queued. Raises CR021 when the caller is an application role of another tenant (or of none).';

CREATE OR REPLACE FUNCTION cryo.get_workflow(p_org text, p_project text, p_name text)
RETURNS TABLE (filename text, interpreter text, source bytea, kind text, graph jsonb,
               workdir text, version integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT w.filename, w.interpreter, w.source, w.kind, w.graph, w.workdir, w.version
                   FROM cryo.workflows w
                  WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_workflow(text, text, text) IS
    'Returns a stored workflow: filename, interpreter, sealed source, kind (script or graph), for a graph its compiled structure, the directory it was stored from and its current version number. Raises CR005 for an unknown workflow.';
