CREATE SCHEMA cryo;

CREATE FUNCTION cryo._add_counts(p_ids bigint[]) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
    SELECT x.metric, x.org, x.project, x.label, x.label2, x.n, x.total
      FROM cryo._history_counts(p_ids) x ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (metric, org, project, label, label2)
    DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total
$$;

CREATE FUNCTION cryo._admit(p_run_id text, p_org text, p_project text, p_group text, p_policy text) RETURNS text
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION cryo._app_run_check(p_run_id text) RETURNS void
    LANGUAGE sql STABLE
    AS $$
    SELECT cryo._app_tenant_check(cryo._run_org(p_run_id), cryo._run_project(p_run_id))
$$;

CREATE FUNCTION cryo._app_tenant() RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
DECLARE
    v_caller text := cryo._caller();
    v_bound cryo.app_roles;
BEGIN
    IF v_caller = current_user OR pg_has_role(v_caller, current_user, 'MEMBER') THEN
        RETURN '%';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cryo_app')
       OR NOT pg_has_role(v_caller, 'cryo_app', 'MEMBER') THEN
        RETURN '%';
    END IF;
    SELECT * INTO v_bound FROM cryo.app_roles b WHERE b.role = v_caller;
    IF NOT FOUND THEN
        RETURN '';
    END IF;
    RETURN v_bound.org || ':' || coalesce(v_bound.project || ':', '%');
END
$$;

CREATE FUNCTION cryo._app_tenant_check(p_org text, p_project text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_tenant text;
BEGIN
    IF cryo._caller() = current_user THEN
        RETURN;
    END IF;
    v_tenant := cryo._app_tenant();
    IF p_org || ':' || p_project || ':' LIKE v_tenant THEN
        RETURN;
    END IF;
    IF v_tenant = '' THEN
        RAISE EXCEPTION 'database role % is not bound to a tenant (see cryopg app-role create)',
            cryo._caller() USING ERRCODE = 'CR021';
    END IF;
    RAISE EXCEPTION 'database role % may not act on %/%', cryo._caller(),
        coalesce(p_org, ''), coalesce(p_project, '') USING ERRCODE = 'CR021';
END
$$;

CREATE TABLE cryo.runs (
    id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    workflow text,
    filename text NOT NULL,
    interpreter text,
    source bytea NOT NULL,
    input bytea,
    input_clear jsonb,
    idempotency_key text,
    required_caps text[] DEFAULT '{shell}'::text[] NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    substate text,
    attempt integer DEFAULT 0 NOT NULL,
    exit_code integer,
    error text,
    cancel_requested boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    updated_at timestamp with time zone NOT NULL,
    parent_run_id text,
    activity_name text,
    retries_left integer DEFAULT 0 NOT NULL,
    retry_backoff double precision DEFAULT 0 NOT NULL,
    retry_on integer[],
    untrusted boolean DEFAULT false NOT NULL,
    concurrency_group text,
    watched boolean DEFAULT false NOT NULL,
    kind text DEFAULT 'script'::text NOT NULL,
    graph jsonb,
    graph_node text,
    graph_item integer,
    workdir text,
    trigger_kind text,
    trigger_name text,
    trigger_depth integer,
    drive_failures integer DEFAULT 0 NOT NULL,
    log_context bytea,
    log_claim uuid,
    log_end bigint DEFAULT 0 NOT NULL,
    traceparent text,
    timeout_s double precision,
    deadline_at timestamp with time zone,
    priority integer DEFAULT 0 NOT NULL,
    input_hashes bytea[],
    CONSTRAINT runs_kind_check CHECK ((kind = ANY (ARRAY['script'::text, 'graph'::text]))),
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'pending'::text, 'running'::text, 'parked'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text, 'unreadable'::text])))
)
WITH (fillfactor='85');

COMMENT ON COLUMN cryo.runs.untrusted IS 'Submitted as untrusted: its claims carry no secrets, and a step that needs one fails.';

COMMENT ON COLUMN cryo.runs.graph IS 'A graph run''s clear structure: node ids, types, edges, compiled if/fan_out/concurrency/output expressions. Node configs stay sealed in source.';

COMMENT ON COLUMN cryo.runs.workdir IS 'The directory the run was submitted from (absolute; NULL when not given). Agents for local work run the script there; others run it in a scratch directory.';

COMMENT ON COLUMN cryo.runs.drive_failures IS 'For a graph run: how many driver turns in a row failed (each backs off longer).';

COMMENT ON COLUMN cryo.runs.log_context IS 'Sealed: the last bytes of the run''s log when they may begin a secret, for the next pass''s log masker. NULL when there are none.';

COMMENT ON COLUMN cryo.runs.log_claim IS 'The claim (token) whose pass log_end counts: a chunk posted under another claim starts a new pass at byte 0.';

COMMENT ON COLUMN cryo.runs.log_end IS 'How many (plain) log bytes the pass of log_claim has stored with an offset: the only offset the next chunk may start at (cryo._log_take).';

COMMENT ON COLUMN cryo.runs.timeout_s IS 'The run''s timeout in seconds (submit --timeout, its graph''s timeout, or its node''s), NULL for none.';

COMMENT ON COLUMN cryo.runs.deadline_at IS 'When the run fails with exit code 124 unless it has ended: its submit plus timeout_s (wall time, parked or not).';

COMMENT ON COLUMN cryo.runs.priority IS 'Claim priority: among pending runs an agent may take, higher first, then oldest. Default 0.';

CREATE FUNCTION cryo._approvable(p_run_id text) RETURNS cryo.runs
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs := cryo._run_row(p_run_id, true);
BEGIN
    PERFORM 1 FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    RETURN v_run;
END
$$;

CREATE FUNCTION cryo._approval_record(p_run cryo.runs, p_node text, p_by text, p_auth text, p_answer text, p_item integer DEFAULT NULL::integer) RETURNS TABLE(approvals integer, needed integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_policy jsonb;
    v_items integer[];
BEGIN
    SELECT array_agg(i.item ORDER BY i.item) INTO v_items FROM cryo.node_instances i
     WHERE i.run_id = p_run.id AND i.node_id = p_node AND i.status = 'waiting'
       AND i.wait_kind = 'approval' AND i.output IS NULL
       AND (p_item IS NULL OR i.item = p_item);
    IF v_items IS NULL THEN
        RETURN;
    END IF;
    SELECT coalesce(n.def -> 'approval', '{}') INTO v_policy FROM cryo.node_states n
     WHERE n.run_id = p_run.id AND n.node_id = p_node;
    PERFORM cryo._approver_check(p_run.org, p_by, p_auth, v_policy);
    IF EXISTS (SELECT 1 FROM cryo.node_approvals a WHERE a.run_id = p_run.id
                  AND a.node_id = p_node AND a.item = ANY (v_items) AND a.approver = p_by) THEN
        RAISE EXCEPTION '% already answered approval % of run %; it takes % different approvers',
            p_by, p_node, p_run.id, coalesce(v_policy ->> 'approvers', '1') USING ERRCODE = 'CR225';
    END IF;
    INSERT INTO cryo.node_approvals (run_id, node_id, item, org, project, approver, answer, answered_at)
    SELECT p_run.id, p_node, x, p_run.org, p_run.project, p_by, p_answer, cryo.now()
      FROM unnest(v_items) x;
    needed := coalesce((v_policy ->> 'approvers')::integer, 1);
    SELECT min(c) INTO approvals FROM (
        SELECT count(a.approver) FILTER (WHERE a.answer = 'approved')::integer AS c
          FROM unnest(v_items) x
          LEFT JOIN cryo.node_approvals a ON a.run_id = p_run.id AND a.node_id = p_node AND a.item = x
         GROUP BY x) per;
    RETURN NEXT;
END
$$;

CREATE FUNCTION cryo._approver_check(p_org text, p_by text, p_auth text, p_policy jsonb) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_role text;
    v_groups text[];
    v_ranks constant text[] := '{viewer,member,admin,owner}';
BEGIN
    IF p_policy ? 'role' THEN
        SELECT m.role INTO v_role FROM cryo.members m WHERE m.org = p_org AND m.login = p_by;
        IF coalesce(array_position(v_ranks, v_role), 0)
           < coalesce(array_position(v_ranks, p_policy ->> 'role'), 99) THEN
            RAISE EXCEPTION '% may not answer this approval: it needs role % (% has %)', p_by,
                p_policy ->> 'role', p_by, coalesce(v_role, 'none') USING ERRCODE = 'CR226';
        END IF;
    END IF;
    IF p_policy ? 'group' THEN
        SELECT s.groups INTO v_groups FROM cryo.sessions s WHERE s.id = p_auth AND s.org = p_org;
        IF NOT coalesce(v_groups @> ARRAY[p_policy ->> 'group'], false) THEN
            RAISE EXCEPTION '% may not answer this approval: it needs group % (signed in through the issuer)',
                p_by, p_policy ->> 'group' USING ERRCODE = 'CR226';
        END IF;
    END IF;
END
$$;

CREATE FUNCTION cryo._bind_claim(p_token uuid, p_agent_token text) RETURNS uuid
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN CASE WHEN p_agent_token IS NULL THEN p_token
                ELSE encode(substring(sha256(convert_to(p_agent_token || '/' || p_token::text,
                                                        'UTF8')) FROM 1 FOR 16), 'hex')::uuid
           END;
END
$$;

CREATE FUNCTION cryo._caller() RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user::text
                ELSE pg_catalog.current_setting('role') END
$$;

CREATE FUNCTION cryo._check_artifact_room(p_org text, p_project text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_untrusted boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_used bigint;
BEGIN
    IF p_max_bytes IS NULL OR EXISTS (
        SELECT 1 FROM cryo.artifacts a
         WHERE a.org = p_org AND a.project = p_project AND a.sha256 = p_sha256
           AND (NOT p_untrusted OR EXISTS (
                SELECT 1 FROM cryo.artifact_blobs b
                 WHERE b.org = a.org AND b.project = a.project AND b.sha256 = a.sha256
                   AND b.untrusted_known))) THEN
        RETURN;
    END IF;
    v_used := cryo.artifact_usage(p_org, p_project);
    IF v_used + p_size > p_max_bytes THEN
        RAISE EXCEPTION 'project %/% would hold % bytes of artifacts, over its bound of % (CRYOPG_ARTIFACTS_MAX_BYTES); % bytes are in use',
            p_org, p_project, v_used + p_size, p_max_bytes, v_used USING ERRCODE = 'CR075';
    END IF;
END
$$;

CREATE FUNCTION cryo._check_name(p_what text, p_name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 200 OR p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% name must be 1 to 200 printable characters', p_what USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE FUNCTION cryo._check_not_owned(p_what text, p_name text, p_source text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_source IS NOT NULL THEN
        RAISE EXCEPTION '% % is registered by workflow %''s on:; change that workflow instead',
            p_what, p_name, p_source USING ERRCODE = 'CR242';
    END IF;
END
$$;

CREATE FUNCTION cryo._check_outcome(p_outcome text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_outcome IS NULL OR NOT cryo.is_terminal(p_outcome) THEN
        RAISE EXCEPTION 'outcome must be succeeded, failed, cancelled or unreadable, not %', p_outcome
            USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE FUNCTION cryo._check_run_order(p_order text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_order IS NOT NULL AND ltrim(p_order, '-') NOT IN ('started', 'ended', 'duration', 'status', 'workflow')
       OR p_order LIKE '--%' THEN
        RAISE EXCEPTION 'unknown runs order %: use started, ended, duration, status or workflow, with a leading - for descending', p_order
            USING ERRCODE = 'CR236';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo._check_run_order(p_order text) IS 'Checks a runs-list order. Raises CR236 unless it is NULL or one of started, ended, duration, status, workflow with an optional leading -.';

CREATE FUNCTION cryo._check_sha256(p_sha256 text, p_size bigint) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
BEGIN
    IF p_sha256 IS NULL OR p_sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'sha256 must be 64 lower-case hex digits' USING ERRCODE = 'CR004';
    END IF;
    IF p_size IS NULL OR p_size < 0 THEN
        RAISE EXCEPTION 'size must be a non-negative number of bytes' USING ERRCODE = 'CR004';
    END IF;
END
$_$;

CREATE FUNCTION cryo._check_timeout(p_timeout double precision) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_timeout IS NOT NULL AND (p_timeout < 0 OR p_timeout = 'infinity'::float8
                                  OR p_timeout = 'NaN'::float8) THEN
        RAISE EXCEPTION 'a timeout must be a finite number of seconds >= 0' USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE FUNCTION cryo._check_trigger_name(p_what text, p_name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
BEGIN
    -- No ':' in a name given by hand: names a workflow's `on:` registers are W:n.
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION '% name % must be letters, digits, _ . - (up to 128)', p_what,
            coalesce(p_name, '') USING ERRCODE = 'CR004';
    END IF;
END
$_$;

CREATE FUNCTION cryo._claim(p_org text, p_agent_id text, p_capabilities text[], p_seconds double precision, p_limit integer, p_agent_ids text[] DEFAULT NULL::text[], p_agent_tokens text[] DEFAULT NULL::text[]) RETURNS TABLE(run_id text, claim_token uuid, attempt integer, filename text, interpreter text, source bytea, input bytea, input_clear jsonb, workdir text, agent_id text, agent_token text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_token uuid;
    v_run text;
BEGIN
    IF p_agent_ids IS NOT NULL THEN
        p_limit := cardinality(p_agent_ids);
    END IF;
    IF p_limit = 1 THEN
        -- One job (an agent's claim): two point updates by key instead of the joins
        -- below, the cheapest form of the hottest call.
        v_token := gen_random_uuid();
        UPDATE cryo.queue q
           SET state = 'claimed', claim_token = cryo._bind_claim(v_token, p_agent_tokens[1]),
               claim_agent_token = p_agent_tokens[1],
               agent_id = coalesce(p_agent_ids[1], p_agent_id),
               claimed_at = v_now, claim_expires_at = v_now + make_interval(secs => p_seconds)
         WHERE q.run_id = (SELECT c.run_id FROM cryo.queue c
                            WHERE c.org = p_org AND c.state = 'pending'
                              AND c.required_caps <@ p_capabilities
                            ORDER BY c.priority DESC, c.enqueued_at
                            LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING q.run_id INTO v_run;
        IF v_run IS NOT NULL THEN
            RETURN QUERY
                UPDATE cryo.runs r
                   SET status = 'running', substate = NULL, attempt = r.attempt + 1,
                       started_at = coalesce(r.started_at, v_now), updated_at = v_now
                 WHERE r.id = v_run
                RETURNING r.id, v_token, r.attempt, r.filename, r.interpreter, r.source,
                          r.input, r.input_clear, r.workdir, coalesce(p_agent_ids[1], p_agent_id),
                          p_agent_tokens[1];
        END IF;
        RETURN;
    END IF;
    RETURN QUERY
    WITH locked AS (
        SELECT c.run_id FROM cryo.queue c
         WHERE c.org = p_org AND c.state = 'pending'
           AND c.required_caps <@ p_capabilities
         ORDER BY c.priority DESC, c.enqueued_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT l.run_id, row_number() OVER () AS n, gen_random_uuid() AS handed FROM locked l
    ), claimed AS (
        UPDATE cryo.queue q
           SET state = 'claimed',
               claim_token = cryo._bind_claim(picked.handed, p_agent_tokens[picked.n]),
               claim_agent_token = p_agent_tokens[picked.n],
               agent_id = coalesce(p_agent_ids[picked.n], p_agent_id),
               claimed_at = v_now, claim_expires_at = v_now + make_interval(secs => p_seconds)
          FROM picked WHERE q.run_id = picked.run_id
        RETURNING q.run_id, picked.handed, q.agent_id, q.claim_agent_token
    ), started AS (
        UPDATE cryo.runs r
           SET status = 'running', substate = NULL, attempt = r.attempt + 1,
               started_at = coalesce(r.started_at, v_now), updated_at = v_now
          FROM claimed WHERE r.id = claimed.run_id
        RETURNING r.id, claimed.handed, r.attempt, r.filename, r.interpreter,
                  r.source, r.input, r.input_clear, r.workdir, claimed.agent_id,
                  claimed.claim_agent_token
    )
    SELECT * FROM started;
END
$$;

CREATE TABLE cryo.queue (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    state text NOT NULL,
    required_caps text[] NOT NULL,
    enqueued_at timestamp with time zone NOT NULL,
    wake_at timestamp with time zone,
    park_reason text,
    park_path text,
    parked_at timestamp with time zone,
    claim_token uuid,
    agent_id text,
    claimed_at timestamp with time zone,
    claim_expires_at timestamp with time zone,
    park_name text,
    claim_agent_token text,
    deadline_at timestamp with time zone,
    priority integer DEFAULT 0 NOT NULL,
    CONSTRAINT queue_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'claimed'::text, 'parked'::text])))
);

COMMENT ON COLUMN cryo.queue.claim_expires_at IS 'When the agent''s claim on this running run expires unless renewed (every log flush renews it); tick() then re-pends the run.';

CREATE FUNCTION cryo._claimed_row(p_run_id text, p_token uuid) RETURNS cryo.queue
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_row cryo.queue;
BEGIN
    SELECT * INTO v_row FROM cryo.queue
     WHERE run_id = p_run_id AND state = 'claimed' AND claim_token = p_token
       AND claim_expires_at > cryo.now()
       FOR UPDATE;
    IF NOT FOUND THEN
        -- A run the sweep failed at its deadline says so: its agent stops the job's
        -- whole tree (TERM, then KILL) rather than treat it as a lost claim.
        IF EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = p_run_id AND r.status = 'failed'
                      AND r.exit_code = 124 AND r.deadline_at <= r.finished_at) THEN
            RAISE EXCEPTION 'run % timed out', p_run_id USING ERRCODE = 'CR215';
        END IF;
        RAISE EXCEPTION 'claim token is not the live claim of run %', p_run_id
            USING ERRCODE = 'CR002';
    END IF;
    RETURN v_row;
END
$$;

CREATE FUNCTION cryo._collect_runs(p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION cryo._connection_check(p_name text, p_base_url text, p_auth text, p_secret text, p_username text, p_header text, p_headers jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    v_key text;
    v_value jsonb;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'connection name % must be lower-case letters, digits, _ and - (at most 63, starting with a letter or digit)', coalesce(p_name, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    -- No user:password@ (the credential belongs in a secret), no query or fragment (a
    -- node adds its own), no space or control character.
    IF p_base_url IS NULL OR length(p_base_url) > 2000
       OR p_base_url !~ '^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[^[:space:][:cntrl:]?#]*)?$'
       AND p_base_url !~ '^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?(/[^[:space:][:cntrl:]?#]*)?$' THEN
        RAISE EXCEPTION 'base URL % must be http(s)://host[:port][/path], without credentials, query or fragment', coalesce(p_base_url, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    IF p_auth IS NULL OR p_auth NOT IN ('none', 'bearer', 'basic', 'header') THEN
        RAISE EXCEPTION 'auth must be none, bearer, basic or header, not %', coalesce(p_auth, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'none') <> (p_secret IS NULL) THEN
        RAISE EXCEPTION 'auth % %', p_auth,
            CASE WHEN p_auth = 'none' THEN 'takes no secret' ELSE 'needs a secret (the project secret holding the credential)' END
            USING ERRCODE = 'CR004';
    END IF;
    IF p_secret IS NOT NULL AND NOT cryo._secret_name_ok(p_secret) THEN
        RAISE EXCEPTION 'secret name % must be an environment variable name (letters, digits, _), not reserved', p_secret
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'basic') <> (p_username IS NOT NULL)
       OR (p_username IS NOT NULL AND (p_username = '' OR p_username ~ '[:[:cntrl:]]' OR length(p_username) > 200)) THEN
        RAISE EXCEPTION 'a user name (without : or control characters) goes with auth basic, and only with it'
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'header') <> (p_header IS NOT NULL)
       OR (p_header IS NOT NULL AND p_header !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,64}$') THEN
        RAISE EXCEPTION 'a header name (a token such as X-Api-Key) goes with auth header, and only with it'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be an object of names to strings' USING ERRCODE = 'CR004';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(p_headers)) > 20 THEN
        RAISE EXCEPTION 'a connection has at most 20 default headers' USING ERRCODE = 'CR004';
    END IF;
    -- A default header is stored in the clear: a credential belongs in a secret.
    IF EXISTS (SELECT 1 FROM jsonb_object_keys(p_headers) k
                WHERE lower(k) IN ('authorization', 'proxy-authorization', 'cookie')
                   OR lower(k) = lower(p_header)) THEN
        RAISE EXCEPTION 'a default header may not carry a credential (Authorization, Cookie or the auth header): name a secret with auth instead'
            USING ERRCODE = 'CR004';
    END IF;
    FOR v_key, v_value IN SELECT * FROM jsonb_each(p_headers) LOOP
        IF v_key !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,64}$' OR jsonb_typeof(v_value) <> 'string'
           OR v_value #>> '{}' ~ '[[:cntrl:]]' OR length(v_value #>> '{}') > 4096 THEN
            RAISE EXCEPTION 'header % must be a token name with a string value of at most 4096 characters, without control characters', v_key
                USING ERRCODE = 'CR004';
        END IF;
    END LOOP;
END
$_$;

CREATE FUNCTION cryo._connection_secret_check(p_org text, p_project text, p_name text, p_secret text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF p_secret IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM cryo.secrets s
             WHERE s.org = p_org AND s.project = p_project AND s.name = p_secret) THEN
        RAISE EXCEPTION 'connection % uses secret %, which project %/% does not have (cryopg secret set %)',
            p_name, p_secret, p_org, p_project, p_secret USING ERRCODE = 'CR207';
    END IF;
END
$$;

CREATE FUNCTION cryo._count_blobs() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cryo.metric_deltas (metric, org, project, n)
        VALUES ('artifact_bytes', NEW.org, NEW.project, NEW.size);
    ELSE
        INSERT INTO cryo.metric_deltas (metric, org, project, n)
        VALUES ('artifact_bytes', OLD.org, OLD.project, -OLD.size);
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION cryo._count_history_of(p_run_ids text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_through bigint;
BEGIN
    SELECT f.folded_through INTO v_through FROM cryo.metric_fold f FOR UPDATE;
    IF FOUND THEN
        PERFORM cryo._add_counts(ARRAY(SELECT h.id FROM cryo.history h
                                        WHERE h.run_id = ANY (p_run_ids) AND h.id > v_through));
    END IF;
END
$$;

CREATE FUNCTION cryo._create_run(p_org text, p_project text, p_workflow text, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_input_clear jsonb, p_idempotency_key text, p_required_caps text[], p_untrusted boolean, p_parent_run_id text, p_workdir text DEFAULT NULL::text, p_graph jsonb DEFAULT NULL::jsonb, p_timeout double precision DEFAULT NULL::double precision, p_priority integer DEFAULT 0) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_id text;
BEGIN
    INSERT INTO cryo.runs (id, org, project, workflow, filename, interpreter, source, input,
                           input_clear, idempotency_key, required_caps, untrusted, parent_run_id,
                           workdir, kind, graph, created_at, updated_at,
                           timeout_s, deadline_at, priority)
    -- run-<12 hex: ms since 1970><8 random hex>: ids grow with time, so the b-trees keyed
    -- on them (runs, journal, history, logs) insert at their right edge instead of at a
    -- random page of a large index; the random part keeps ids unguessable.
    VALUES (p_org || ':' || p_project || ':run-'
            || lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
            || left(replace(gen_random_uuid()::text, '-', ''), 8),
            p_org, p_project, p_workflow, p_filename, nullif(p_interpreter, ''), p_source, p_input,
            p_input_clear, p_idempotency_key, p_required_caps, coalesce(p_untrusted, false),
            p_parent_run_id,
            -- a child runs where its parent does
            coalesce(p_workdir, (SELECT p.workdir FROM cryo.runs p WHERE p.id = p_parent_run_id)),
            CASE WHEN p_graph IS NULL THEN 'script' ELSE 'graph' END, p_graph,
            v_now, v_now,
            -- a timeout counts wall time from submit, parked or not (see 79_timeouts.sql)
            p_timeout, v_now + make_interval(secs => p_timeout), coalesce(p_priority, 0))
    ON CONFLICT (org, project, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NOT NULL THEN
        PERFORM cryo._history(v_id, p_org, p_project, 'submitted');
    END IF;
    RETURN v_id;
END
$$;

CREATE FUNCTION cryo._declare_group_limit(p_org text, p_project text, p_group text, p_limit integer, p_window double precision) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_limit IS NULL AND p_window IS NULL THEN
        RETURN;
    END IF;
    IF coalesce(p_limit, 1) < 1 OR p_window <= 0 THEN
        RAISE EXCEPTION 'a concurrency limit is at least 1 and a window longer than 0 (got % and %)',
            p_limit, p_window USING ERRCODE = 'CR228';
    END IF;
    IF coalesce(p_limit, 1) = 1 AND p_window IS NULL THEN
        DELETE FROM cryo.lease_limits WHERE org = p_org AND project = p_project AND grp = p_group;
        RETURN;
    END IF;
    INSERT INTO cryo.lease_limits (org, project, grp, max_holders, window_seconds)
    VALUES (p_org, p_project, p_group, coalesce(p_limit, 1), p_window)
    ON CONFLICT (org, project, grp) DO UPDATE
       SET max_holders = excluded.max_holders, window_seconds = excluded.window_seconds;
END
$$;

CREATE FUNCTION cryo._delete_runs(p_ids text[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION cryo._digest(p_value jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_value IS NULL OR jsonb_typeof(p_value) = 'null' THEN ''
                ELSE 'h_' || left(encode(sha256(convert_to('cryopg-digest/v1|' ||
                    CASE jsonb_typeof(p_value) WHEN 'string' THEN p_value #>> '{}'
                                               ELSE p_value::text END, 'UTF8')), 'hex'), 24)
           END
$$;

CREATE TABLE cryo.journal (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    seq integer NOT NULL,
    path text NOT NULL,
    key_scope text NOT NULL,
    key_family text NOT NULL,
    key_name text NOT NULL,
    key_ordinal integer NOT NULL,
    label text,
    attempt integer NOT NULL,
    status text NOT NULL,
    result bytea,
    exit_code integer,
    due_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    completed_at timestamp with time zone,
    answer_clear jsonb,
    ref_run_id text,
    CONSTRAINT journal_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'done'::text])))
);

CREATE FUNCTION cryo._done_memo(p_run_id text, p_path text) RETURNS cryo.journal
    LANGUAGE sql STABLE
    AS $$
    SELECT * FROM cryo.journal WHERE run_id = p_run_id AND path = p_path AND status = 'done'
$$;

CREATE FUNCTION cryo._drive(p_driver text, p_limit integer) RETURNS TABLE(run_id text, claim_token uuid)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    RETURN QUERY
    WITH picked AS (
        SELECT c.run_id FROM cryo.queue c
         WHERE c.state = 'pending' AND c.required_caps = '{graph}'
         ORDER BY c.enqueued_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE cryo.queue q
           SET state = 'claimed', claim_token = gen_random_uuid(), agent_id = p_driver,
               claimed_at = v_now, claim_expires_at = v_now + interval '1 hour'
          FROM picked WHERE q.run_id = picked.run_id
        RETURNING q.run_id, q.claim_token
    ), started AS (
        UPDATE cryo.runs r
           SET status = 'running', substate = NULL, attempt = greatest(r.attempt, 1),
               started_at = coalesce(r.started_at, v_now), updated_at = v_now
          FROM claimed WHERE r.id = claimed.run_id
        RETURNING r.id, claimed.claim_token
    )
    SELECT * FROM started;
END
$$;

CREATE FUNCTION cryo._drive_run(p_driver text, p_run_id text) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_token uuid;
BEGIN
    UPDATE cryo.queue q
       SET state = 'claimed', claim_token = gen_random_uuid(), agent_id = p_driver,
           claimed_at = v_now, claim_expires_at = v_now + interval '1 hour'
     WHERE q.run_id = p_run_id AND q.state = 'pending' AND q.required_caps = '{graph}'
    RETURNING q.claim_token INTO v_token;
    IF v_token IS NOT NULL THEN
        UPDATE cryo.runs r
           SET status = 'running', substate = NULL, attempt = greatest(r.attempt, 1),
               started_at = coalesce(r.started_at, v_now), updated_at = v_now
         WHERE r.id = p_run_id;
    END IF;
    RETURN v_token;
END
$$;

CREATE FUNCTION cryo._drop_lease(p_org text, p_project text, p_group text, p_run_id text) RETURNS void
    LANGUAGE sql
    AS $$
    DELETE FROM cryo.leases
     WHERE org = p_org AND project = p_project AND grp = p_group AND holder_run_id = p_run_id
$$;

CREATE FUNCTION cryo._duration_text(p_seconds double precision) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN p_seconds IS NULL THEN NULL
        WHEN p_seconds <> trunc(p_seconds) OR p_seconds < 60 THEN
            trim(trailing '.' FROM trim(trailing '0' FROM round(p_seconds::numeric, 3)::text)) || 's'
        ELSE concat_ws('',
            nullif(floor(p_seconds / 86400)::bigint, 0) || 'd',
            nullif(floor(p_seconds::bigint % 86400 / 3600), 0) || 'h',
            nullif(floor(p_seconds::bigint % 3600 / 60), 0) || 'm',
            nullif(p_seconds::bigint % 60, 0) || 's')
    END
$$;

CREATE FUNCTION cryo._enqueue(p_run_id text, p_org text, p_project text, p_required_caps text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.runs SET status = 'pending', updated_at = cryo.now()
     WHERE id = p_run_id AND status = 'queued';
    INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at,
                            deadline_at, priority)
    SELECT p_run_id, p_org, p_project, 'pending',
           CASE WHEN r.untrusted AND p_required_caps <> '{graph}'
                 AND NOT 'isolated' = ANY (p_required_caps)
                THEN p_required_caps || '{isolated}'::text[] ELSE p_required_caps END,
           cryo.now(), r.deadline_at, r.priority
      FROM cryo.runs r WHERE r.id = p_run_id;
    -- Graph runs have their own channel: only the servers' graph drivers take them.
    IF p_required_caps = '{graph}' THEN
        -- (not when cryo.submit_graph drives the run in this same transaction: the
        -- drivers would wake to find it taken or already ended)
        IF current_setting('cryo.graph_self_driven', true) IS DISTINCT FROM 'on' THEN
            PERFORM pg_notify('cryo_graph', '');
        END IF;
    ELSE
        PERFORM pg_notify('cryo_work', '');
    END IF;
END
$$;

CREATE FUNCTION cryo._eval(p_expr jsonb, p_scope jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v_a jsonb;
    v_b jsonb;
    v_op text := p_expr ->> 'op';
    v_part jsonb;
    v_text text := '';
BEGIN
    IF p_expr ? 'lit' THEN
        RETURN p_expr -> 'lit';
    ELSIF p_expr ? 'path' THEN
        v_a := p_scope #> ARRAY(SELECT jsonb_array_elements_text(p_expr -> 'path'));
        -- A triggered run's input carries its trigger: `trigger.x` in a node's template
        -- reads `input.trigger.x` when the scope has no trigger of its own (a driver's).
        IF v_a IS NULL AND p_expr #>> '{path,0}' = 'trigger' AND NOT p_scope ? 'trigger' THEN
            v_a := p_scope #> (ARRAY['input'] ||
                               ARRAY(SELECT jsonb_array_elements_text(p_expr -> 'path')));
        END IF;
        -- The driver leaves out the nodes it reads that have not started (they would make
        -- every turn's scope the graph's size): one missing reads as pending.
        IF v_a IS NULL AND p_expr #>> '{path,0}' = 'nodes' AND p_expr #>> '{path,2}' = 'status'
           AND NOT coalesce((p_scope -> 'nodes') ? (p_expr #>> '{path,1}'), false) THEN
            RETURN '"pending"'::jsonb;
        END IF;
        RETURN coalesce(v_a, 'null'::jsonb);
    ELSIF p_expr ? 'tpl' THEN
        FOR v_part IN SELECT * FROM jsonb_array_elements(p_expr -> 'tpl') LOOP
            IF jsonb_typeof(v_part) = 'string' THEN
                v_text := v_text || (v_part #>> '{}');
            ELSE
                v_a := cryo._eval(v_part, p_scope);
                v_text := v_text || CASE jsonb_typeof(v_a) WHEN 'string' THEN v_a #>> '{}'
                                                            WHEN 'null' THEN ''
                                                            ELSE v_a::text END;
            END IF;
        END LOOP;
        RETURN to_jsonb(v_text);
    END IF;
    v_a := cryo._eval(p_expr -> 'a', p_scope);
    IF v_op = 'digest' THEN
        RETURN to_jsonb(cryo._digest(v_a));
    ELSIF v_op = 'not' THEN
        RETURN to_jsonb(NOT cryo._truthy(v_a));
    ELSIF v_op = 'and' THEN
        RETURN to_jsonb(cryo._truthy(v_a) AND cryo._truthy(cryo._eval(p_expr -> 'b', p_scope)));
    ELSIF v_op = 'or' THEN
        RETURN to_jsonb(cryo._truthy(v_a) OR cryo._truthy(cryo._eval(p_expr -> 'b', p_scope)));
    END IF;
    v_b := cryo._eval(p_expr -> 'b', p_scope);
    IF v_op = '==' THEN
        RETURN to_jsonb(v_a = v_b);
    ELSIF v_op = '!=' THEN
        RETURN to_jsonb(v_a <> v_b);
    END IF;
    -- Ordering compares numbers with numbers and strings with strings; else false.
    IF jsonb_typeof(v_a) = 'number' AND jsonb_typeof(v_b) = 'number' THEN
        RETURN to_jsonb(CASE v_op WHEN '<' THEN v_a::numeric < v_b::numeric
                                  WHEN '<=' THEN v_a::numeric <= v_b::numeric
                                  WHEN '>' THEN v_a::numeric > v_b::numeric
                                  WHEN '>=' THEN v_a::numeric >= v_b::numeric END);
    ELSIF jsonb_typeof(v_a) = 'string' AND jsonb_typeof(v_b) = 'string' THEN
        RETURN to_jsonb(CASE v_op WHEN '<' THEN (v_a #>> '{}') < (v_b #>> '{}')
                                  WHEN '<=' THEN (v_a #>> '{}') <= (v_b #>> '{}')
                                  WHEN '>' THEN (v_a #>> '{}') > (v_b #>> '{}')
                                  WHEN '>=' THEN (v_a #>> '{}') >= (v_b #>> '{}') END);
    END IF;
    RETURN 'false'::jsonb;
END
$$;

CREATE FUNCTION cryo._expire_deadlines(p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_id text;
    v_n integer := 0;
BEGIN
    FOR v_id IN SELECT q.run_id FROM cryo.queue q
                 WHERE q.deadline_at IS NOT NULL AND q.deadline_at <= cryo.now()
                 ORDER BY q.deadline_at
                 LIMIT p_batch
                   FOR UPDATE SKIP LOCKED LOOP
        PERFORM cryo._time_out_run(v_id);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;

CREATE FUNCTION cryo._extend_claim(p_run_id text, p_seconds double precision) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.queue SET claim_expires_at = cryo.now() + make_interval(secs => p_seconds)
     WHERE run_id = p_run_id;
END
$$;

CREATE FUNCTION cryo._finalize(p_run_id text, p_status text, p_exit_code integer, p_error text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    UPDATE cryo.runs SET status = p_status, substate = NULL, exit_code = p_exit_code,
                         error = p_error, finished_at = cryo.now(), updated_at = cryo.now()
     WHERE id = p_run_id
    RETURNING * INTO v_run;
    DELETE FROM cryo.queue WHERE run_id = p_run_id;
    -- A plain statement rather than cryo._history: this is the hottest path, and a
    -- plain statement keeps its cached plan where a call to a SQL function is planned
    -- afresh each time.
    INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_status, v_run.attempt, cryo.now());
    IF v_run.watched THEN  -- see cryo._notify_run
        PERFORM pg_notify('cryo_run', p_run_id);
    END IF;
    PERFORM cryo._release_leases(p_run_id);
    IF v_run.kind = 'graph' AND p_status = 'cancelled' THEN  -- its nodes end with it
        PERFORM cryo._graph_cancel_nodes(p_run_id, false);
    END IF;
    IF v_run.parent_run_id IS NOT NULL THEN
        PERFORM cryo._wake_parent(p_run_id);
    END IF;
END
$$;

CREATE FUNCTION cryo._forget(p_run_id text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.journal WHERE run_id = p_run_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

CREATE FUNCTION cryo._grant_extras(p_run_id text) RETURNS TABLE(journal jsonb, secrets jsonb, untrusted boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT (SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'seq', j.seq, 'path', j.path, 'family', j.key_family,
                       'name', j.key_name, 'ordinal', j.key_ordinal, 'status', j.status,
                       'result', encode(j.result, 'base64'), 'exit_code', j.exit_code,
                       'answer_clear', j.answer_clear, 'ref_run_id', j.ref_run_id)
                       ORDER BY j.seq), '[]'::jsonb)
              FROM cryo.journal j WHERE j.run_id = r.id),
           (SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'name', s.name, 'value', encode(s.value, 'base64'),
                       'withheld', s.withheld) ORDER BY s.name), '[]'::jsonb)
              FROM cryo._grant_run_secrets(r.id, r.org, r.project, r.untrusted) s),
           r.untrusted
      FROM cryo.runs r WHERE r.id = p_run_id
$$;

CREATE FUNCTION cryo._grant_run_secrets(p_run_id text, p_org text, p_project text, p_untrusted boolean) RETURNS TABLE(name text, value bytea, withheld boolean)
    LANGUAGE sql STABLE
    AS $$
    WITH node AS (
        SELECT CASE WHEN n.type = 'connector' THEN ARRAY(SELECT k.secret FROM cryo.connections k
                     WHERE k.org = c.org AND k.project = c.project AND k.name = n.def ->> 'connection')
               ELSE ARRAY(SELECT jsonb_array_elements_text(coalesce(n.def -> 'secrets', '[]'))) END AS names
          FROM cryo.runs c
          JOIN cryo.node_states n ON n.run_id = c.parent_run_id AND n.node_id = c.graph_node
         WHERE c.id = p_run_id AND n.type IN ('http', 'connector')
    )
    SELECT s.name, s.value, s.withheld FROM cryo._grant_secrets(p_org, p_project, p_untrusted) s
     WHERE NOT EXISTS (SELECT 1 FROM node)
        OR EXISTS (SELECT 1 FROM node WHERE s.name = ANY (node.names))
$$;

CREATE FUNCTION cryo._grant_secrets(p_org text, p_project text, p_untrusted boolean) RETURNS TABLE(name text, value bytea, withheld boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.name, CASE WHEN p_untrusted THEN NULL ELSE s.value END, p_untrusted
      FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;

CREATE FUNCTION cryo._graph_cache_keep(p_run_id text, p_node text, p_item integer, p_output bytea, p_output_clear jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO cryo.graph_cache (org, project, untrusted, key_hash, value, value_clear,
                                  stored_at, run_id, node_id)
    SELECT i.org, i.project, cryo._graph_cache_trust(p_run_id), i.cache_key, p_output,
           CASE WHEN p_output IS NULL THEN p_output_clear END, cryo.now(), p_run_id, p_node
      FROM cryo.node_instances i
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item
       AND i.cache_key IS NOT NULL
    ON CONFLICT (org, project, untrusted, key_hash) DO UPDATE
       SET value = excluded.value, value_clear = excluded.value_clear,
           stored_at = excluded.stored_at, run_id = excluded.run_id, node_id = excluded.node_id;
END
$$;

CREATE FUNCTION cryo._graph_cache_trust(p_run_id text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT cryo._run_untrusted(p_run_id)
$$;

CREATE FUNCTION cryo._graph_call_memo(p_child_id text) RETURNS TABLE(result bytea, answer jsonb, exit_code integer)
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN c.status = 'succeeded' THEN
                (SELECT o.value FROM cryo.run_outputs o WHERE o.run_id = c.id AND o.key = 'output') END,
           jsonb_build_object('run_id', c.id, 'status', c.status, 'error', c.error),
           cryo._outcome_code(c.status, c.exit_code)
      FROM cryo.runs c WHERE c.id = p_child_id
$$;

CREATE FUNCTION cryo._graph_cancel_nodes(p_run_id text, p_started_only boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'cancelled', finished_at = cryo.now(), wait_kind = NULL
     WHERE i.run_id = p_run_id AND cryo._node_status_in(i.status, 'instance live');
    WITH ended AS (
        UPDATE cryo.node_states n SET status = 'cancelled', finished_at = cryo.now()
         WHERE n.run_id = p_run_id
           AND (cryo._node_status_in(n.status, 'under way')
                OR (n.status = 'pending' AND NOT p_started_only))
        RETURNING n.run_id, n.org, n.project, n.node_id, n.started_at
    )
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT e.run_id, e.org, e.project, 'node_cancelled', 'run', 'node', e.node_id, 0, cryo.now()
      FROM ended e WHERE e.started_at IS NOT NULL;
END
$$;

CREATE FUNCTION cryo._graph_check_call(p_run_id text, p_call jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._state_key(p_call ->> 'key', true);
    PERFORM cryo.state_scope(cryo._run_org(p_run_id), cryo._run_project(p_run_id), p_run_id,
                             p_call ->> 'entity');
    IF p_call ->> 'op' = 'set' AND p_call ->> 'value' IS NULL THEN
        RAISE EXCEPTION 'a state value cannot be NULL (use state_delete)' USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE FUNCTION cryo._graph_checked_calls(p_run_id text, p_calls jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_checked text[] := '{}';
    v_c record;
BEGIN
    BEGIN
        FOR v_c IN SELECT c.key AS node_id, c.value AS call FROM jsonb_each(p_calls) c
                    WHERE c.value ->> 'op' IN ('set', 'delete') LOOP
            PERFORM cryo._graph_check_call(p_run_id, v_c.call);
            v_checked := v_checked || v_c.node_id;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE NOT LIKE 'CR%' THEN
            RAISE;
        END IF;
        v_checked := '{}';
        FOR v_c IN SELECT c.key AS node_id, c.value AS call FROM jsonb_each(p_calls) c
                    WHERE c.value ->> 'op' IN ('set', 'delete') LOOP
            BEGIN
                PERFORM cryo._graph_check_call(p_run_id, v_c.call);
                v_checked := v_checked || v_c.node_id;
            EXCEPTION WHEN OTHERS THEN
                IF SQLSTATE NOT LIKE 'CR%' THEN
                    RAISE;
                END IF;
            END;
        END LOOP;
    END;
    RETURN (SELECT coalesce(jsonb_object_agg(c.key, (c.value - 'checked')
                                || CASE WHEN c.key = ANY (v_checked)
                                        THEN '{"checked": true}'::jsonb ELSE '{}'::jsonb END), '{}')
              FROM jsonb_each(p_calls) c);
END
$$;

CREATE FUNCTION cryo._graph_default_output(p_run_id text, OUT answer jsonb, OUT sealed boolean) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $_$
BEGIN
    SELECT coalesce(jsonb_object_agg(n.node_id, CASE
               WHEN n.items IS NULL THEN CASE WHEN cryo._node_status_in(n.status, 'done')
                                              THEN cryo._graph_output(n.output, n.output_clear)
                                              ELSE 'null' END
               ELSE (SELECT coalesce(jsonb_agg(CASE WHEN cryo._node_status_in(i.status, 'done')
                                                    THEN cryo._graph_output(i.output, i.output_clear)
                                                    ELSE 'null' END ORDER BY g.k), '[]')
                       FROM generate_series(0, n.items - 1) AS g(k)
                       LEFT JOIN cryo.node_instances i
                              ON i.run_id = n.run_id AND i.node_id = n.node_id AND i.item = g.k)
               END), '{}')
      INTO answer
      FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND cardinality(n.dependents) = 0;
    sealed := jsonb_path_exists(answer, 'lax $.**."$sealed"');
END
$_$;

CREATE FUNCTION cryo._graph_due_kind(p_run_id text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce((
        SELECT CASE WHEN i.status = 'retrying' THEN 'retry_due'
                    WHEN i.wait_kind = 'sleep' THEN 'timer_fired'
                    ELSE 'wait_timed_out' END
          FROM cryo.node_instances i
         WHERE i.run_id = p_run_id AND cryo._node_status_in(i.status, 'instance timed')
           AND i.due_at IS NOT NULL
         ORDER BY i.due_at LIMIT 1), 'wait_timed_out')
$$;

CREATE FUNCTION cryo._graph_failing(p_run_id text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.status = 'failed'
                      AND NOT n.tolerated);
END
$$;

CREATE FUNCTION cryo._graph_fan_out_max() RETURNS integer
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('cryo.graph_fan_out_max', true), '')::integer, 10000)
$$;

CREATE FUNCTION cryo._graph_flow(p_q cryo.queue, p_scope jsonb) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_node cryo.node_states;
    v_last cryo.node_instances;
    v_changed boolean := false;
    v_loop jsonb;
    v_scope jsonb;
    v_again boolean;
    v_max integer;
BEGIN
    FOR v_node IN SELECT * FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.def ? 'stop_if' AND n.status = 'succeeded'
                     AND NOT n.stop_checked
                   ORDER BY n.ord LOOP
        PERFORM cryo._node_stop_checked(p_q.run_id, v_node.node_id);
        CONTINUE WHEN cryo._graph_failing(p_q.run_id) OR NOT cryo._truthy(cryo._eval(
            v_node.def -> 'stop_if', p_scope || jsonb_build_object('node', jsonb_build_object(
                'id', v_node.node_id))));
        PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'graph_stopped', 'node',
                              v_node.node_id, 0);
        PERFORM cryo._nodes_skip_unstarted(p_q, 'stopped early: the stop_if of '
                                                || v_node.node_id || ' held');
        v_changed := true;
    END LOOP;
    FOR v_node IN SELECT * FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.def ? 'loop'
                     AND cryo._node_status_in(n.status, 'under way')
                   ORDER BY n.ord LOOP
        SELECT * INTO v_last FROM cryo.node_instances i
         WHERE i.run_id = p_q.run_id AND i.node_id = v_node.node_id
         ORDER BY i.item DESC LIMIT 1;
        -- (A failed iteration ended its node; one under way is not decided yet.)
        CONTINUE WHEN v_last.item IS NULL OR NOT cryo._node_status_in(v_last.status, 'done');
        v_loop := v_node.def -> 'loop';
        v_max := (v_loop ->> 'max_iterations')::integer;
        v_scope := p_scope || jsonb_build_object('node', jsonb_build_object(
            'id', v_node.node_id, 'iteration', v_last.item));
        v_again := cryo._truthy(cryo._eval(coalesce(v_loop -> 'while', v_loop -> 'until'), v_scope));
        IF v_loop ? 'until' THEN
            v_again := NOT v_again;
        END IF;
        v_changed := true;
        IF v_again AND v_last.item + 1 < v_max THEN
            PERFORM cryo._instance_open(p_q, v_node.node_id, v_last.item + 1);
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_iteration', 'node',
                                  v_node.node_id, v_last.item + 1);
            CONTINUE;
        ELSIF v_again THEN
            PERFORM cryo._node_end(p_q.run_id, v_node.node_id, 'failed',
                format('loop reached max_iterations (%s) and its condition still asked for more',
                       v_max));
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                  v_node.node_id, v_last.item);
        ELSE
            PERFORM cryo._node_end(p_q.run_id, v_node.node_id, 'succeeded', NULL, v_last.output,
                                   v_last.output_clear);
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_completed', 'node',
                                  v_node.node_id, v_last.item, v_last.attempt, v_last.output);
        END IF;
        IF p_scope -> 'nodes' ? v_node.node_id THEN  -- an expression after it reads it
            p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id, 'status'],
                                 to_jsonb(CASE WHEN v_again THEN 'failed' ELSE 'succeeded' END));
        END IF;
    END LOOP;
    RETURN CASE WHEN v_changed THEN p_scope END;
END
$$;

CREATE FUNCTION cryo._graph_flow_due(p_run_id text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM cryo.node_states n
                    WHERE n.run_id = p_run_id AND n.def ? 'stop_if' AND n.status = 'succeeded'
                      AND NOT n.stop_checked)
        OR EXISTS (SELECT 1 FROM cryo.node_states n
                    WHERE n.run_id = p_run_id AND n.def ? 'loop'
                      AND cryo._node_status_in(n.status, 'under way'))
$$;

CREATE FUNCTION cryo._graph_init(p_run_id text, p_org text, p_project text, p_graph jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF jsonb_typeof(p_graph -> 'nodes') IS DISTINCT FROM 'array'
       OR jsonb_array_length(p_graph -> 'nodes') = 0 THEN
        RAISE EXCEPTION 'a graph needs at least one node' USING ERRCODE = 'CR004';
    END IF;
    -- Each node carries its definition, edges both ways and a count of predecessors
    -- still open, so a turn finds what is ready by key (V0017).
    WITH defs AS (
        SELECT d.ord, d.node_id, d.type, d.def, ARRAY(SELECT DISTINCT x FROM unnest(d.deps) x) AS deps
          FROM cryo._graph_node_defs(p_graph) d
    ), back AS (
        SELECT x.dep, array_agg(e.node_id ORDER BY e.ord) AS dependents
          FROM defs e, unnest(e.deps) AS x(dep) GROUP BY x.dep
    )
    INSERT INTO cryo.node_states (run_id, org, project, node_id, type, ord, def, deps,
                                  dependents, open_deps)
    SELECT p_run_id, p_org, p_project, d.node_id, d.type, d.ord, d.def, d.deps,
           coalesce(b.dependents, '{}'), cardinality(d.deps)
      FROM defs d LEFT JOIN back b ON b.dep = d.node_id;
END
$$;

CREATE FUNCTION cryo._graph_key(p_run_id text, p_node text, p_item integer, p_fan_out boolean) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN left(encode(sha256(convert_to(p_run_id || '/node/' || p_node
                                         || CASE WHEN p_fan_out THEN '/' || p_item ELSE '' END,
                                         'UTF8')), 'hex'), 32);
END
$$;

CREATE FUNCTION cryo._graph_node_defs(p_graph jsonb) RETURNS TABLE(ord bigint, node_id text, type text, deps text[], def jsonb)
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT n.ord, n.def ->> 'id', n.def ->> 'type',
           ARRAY(SELECT jsonb_array_elements_text(coalesce(n.def -> 'deps', '[]'))), n.def
      FROM jsonb_array_elements(p_graph -> 'nodes') WITH ORDINALITY AS n(def, ord)
$$;

CREATE FUNCTION cryo._graph_node_ended(p_run_id text, p_node text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_next text[] := (SELECT e.dependents FROM cryo.node_states e
                       WHERE e.run_id = p_run_id AND e.node_id = p_node);
    v_id text;
BEGIN
    -- One row by its whole primary key at a time: `node_id = ANY (...)` let a generic
    -- plan read every node of the run and filter.
    FOREACH v_id IN ARRAY coalesce(v_next, '{}') LOOP
        UPDATE cryo.node_states n SET open_deps = n.open_deps - 1
         WHERE n.run_id = p_run_id AND n.node_id = v_id;
    END LOOP;
END
$$;

CREATE FUNCTION cryo._graph_output(p_sealed bytea, p_clear jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT CASE WHEN p_sealed IS NOT NULL THEN jsonb_build_object('$sealed', encode(p_sealed, 'hex'))
                ELSE coalesce(p_clear, 'null') END
$_$;

CREATE FUNCTION cryo._graph_poke(p_run_id text, p_kind text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_state text;
BEGIN
    SELECT q.state INTO v_state FROM cryo.queue q
     WHERE q.run_id = p_run_id AND q.required_caps = '{graph}' FOR UPDATE;
    IF v_state = 'parked' THEN
        PERFORM cryo._wake(ARRAY[p_run_id], p_kind);
    END IF;
END
$$;

CREATE FUNCTION cryo._graph_runs_itself(p_graph jsonb, p_calls jsonb) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN p_calls IS NOT NULL AND jsonb_typeof(p_graph -> 'nodes') = 'array'
       AND NOT p_graph ? 'output' AND NOT p_graph ? 'concurrency'
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_graph -> 'nodes') d
                        WHERE NOT p_calls ? (d ->> 'id') OR d ? 'if' OR d ? 'fan_out'
                           OR d ? 'concurrency' OR d ->> 'type' IS DISTINCT FROM 'state');
END
$$;

CREATE FUNCTION cryo._graph_runs_on_failure(p_def jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT coalesce((p_def ->> 'always')::boolean, false) OR coalesce((p_def ->> 'on_failure')::boolean, false)
$$;

CREATE FUNCTION cryo._graph_schedule(p_q cryo.queue, p_scope jsonb, p_failing boolean, p_budget integer DEFAULT NULL::integer) RETURNS TABLE(action text, node_id text, output jsonb, is_read boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
DECLARE
    v_run_id text := p_q.run_id;
    v_node cryo.node_states;
    v_dep_status text[];
    v_scope jsonb;
    v_items jsonb;
    v_n integer;
    v_changed boolean := true;
    v_handler boolean;
    v_why text;
    v_failed_here boolean := false;
    -- Whether any node of the run was skipped: only then can a node's predecessors all
    -- have been, and only then are they read (each ready node otherwise costs a query).
    v_any_skipped boolean := EXISTS (SELECT 1 FROM cryo.node_states n
                                      WHERE n.run_id = p_q.run_id AND n.status = 'skipped');
BEGIN
    WHILE v_changed LOOP
        -- A node failing in this loop (a fan-out that is not a list) fails the run.
        IF v_failed_here THEN
            p_failing := p_failing OR cryo._graph_failing(v_run_id);
            v_failed_here := false;
        END IF;
        -- A failing run with no always node or failure branch left decides nothing more
        -- (what had not started stays pending, as the run ends).
        IF p_failing AND NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = v_run_id
                                        AND n.status = 'pending'
                                        AND cryo._graph_runs_on_failure(n.def)) THEN
            RETURN;
        END IF;
        v_changed := false;
        FOR v_node IN SELECT * FROM cryo.node_states n
                       WHERE n.run_id = v_run_id AND n.status = 'pending' AND n.open_deps = 0
                       ORDER BY n.ord LOOP
            v_handler := cryo._graph_runs_on_failure(v_node.def);
            IF NOT p_failing AND coalesce((v_node.def ->> 'on_failure')::boolean, false) THEN
                CONTINUE;  -- the failure branch waits for a failure (skipped at the end)
            END IF;
            -- Why the node is skipped, if it is: the run is failing (what is not an always
            -- node or the failure branch will not run, and its skip lets those after it be
            -- decided), its predecessors were all skipped, or its `if` is false.
            v_why := CASE WHEN p_failing AND NOT v_handler THEN 'the run failed' END;
            -- Each predecessor by its primary key (see _graph_node_ended).
            IF v_why IS NULL AND v_any_skipped AND cardinality(v_node.deps) > 0
               AND NOT v_handler THEN
                v_dep_status := ARRAY(SELECT (SELECT n.status FROM cryo.node_states n
                                               WHERE n.run_id = v_run_id AND n.node_id = d)
                                        FROM unnest(v_node.deps) AS d);
                -- (A failed predecessor here failed with continue_on_error: it ended.)
                IF NOT EXISTS (SELECT 1 FROM unnest(v_dep_status) s WHERE s <> 'skipped') THEN
                    v_why := 'its predecessors were all skipped';
                END IF;
            END IF;
            -- (Only an `if` and a fan-out read the node's scope.) A scope that names the
            -- nodes it covers (`$for`) holds only what those read: another node is asked
            -- for, and decided in the driver's next round with its entries.
            IF v_why IS NULL AND (v_node.def ? 'if' OR v_node.def ? 'fan_out')
               AND NOT cryo._graph_scope_covers(p_scope, v_node.node_id) THEN
                action := 'config'; node_id := v_node.node_id; output := NULL; is_read := NULL;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF v_why IS NULL AND (v_node.def ? 'if' OR v_node.def ? 'fan_out') THEN
                v_scope := p_scope || jsonb_build_object('node', jsonb_build_object(
                    'id', v_node.node_id,
                    'idempotency_key', cryo._graph_key(v_run_id, v_node.node_id, 0, false)));
                IF v_node.def ? 'if'
                   AND NOT cryo._truthy(cryo._eval(v_node.def -> 'if', v_scope)) THEN
                    v_why := 'if was false';
                END IF;
            END IF;
            IF v_why IS NOT NULL THEN
                v_any_skipped := true;
                PERFORM cryo._graph_skip(p_q, v_node.node_id, v_why);
                action := 'skip'; node_id := v_node.node_id; output := NULL; is_read := NULL;
                RETURN NEXT;
                v_changed := true;
                CONTINUE;
            END IF;
            v_n := NULL;
            IF v_node.def ? 'fan_out' THEN
                v_items := cryo._eval(v_node.def -> 'fan_out', v_scope);
                IF jsonb_typeof(v_items) <> 'array' THEN
                    PERFORM cryo._node_end(v_run_id, v_node.node_id, 'failed',
                                           'fan_out items is not a list');
                    PERFORM cryo._history(v_run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                          v_node.node_id, 0);
                    v_changed := true;
                    v_failed_here := true;
                    CONTINUE;
                END IF;
                v_n := jsonb_array_length(v_items);
                IF v_n > cryo._graph_fan_out_max() THEN  -- the deployment's bound
                    PERFORM cryo._node_end(v_run_id, v_node.node_id, 'failed',
                        format('fan_out has %s items, over the limit of %s (CRYOPG_GRAPH_FAN_OUT_MAX)',
                               v_n, cryo._graph_fan_out_max()));
                    PERFORM cryo._history(v_run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                          v_node.node_id, 0);
                    v_changed := true;
                    v_failed_here := true;
                    CONTINUE;
                END IF;
            END IF;
            IF v_node.state_call IS NOT NULL AND NOT v_node.def ? 'concurrency' THEN
                output := cryo._graph_state_now(p_q, v_node);
                IF output IS NOT NULL THEN
                    action := 'done'; node_id := v_node.node_id;
                    is_read := coalesce((v_node.state_call ->> 'read')::boolean, false);
                    IF is_read THEN  -- a later `if` in this call reads it
                        p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id],
                            jsonb_build_object('status', 'succeeded', 'output', output));
                    END IF;
                    RETURN NEXT;
                    v_changed := true;
                    p_budget := p_budget - 1;
                    IF p_budget <= 0 THEN
                        RETURN;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;
            IF cryo._node_start(p_q, v_node.node_id, v_n) THEN  -- an empty fan-out
                v_changed := true;
            END IF;
        END LOOP;
    END LOOP;
END
$_$;

CREATE FUNCTION cryo._graph_scope_covers(p_scope jsonb, p_node text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT NOT p_scope ? '$for' OR (p_scope -> '$for') ? p_node
$_$;

CREATE FUNCTION cryo._graph_set_calls(p_run_id text, p_calls jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_states n
       SET state_call = c.call - 'value',
           state_value = CASE WHEN c.call ? 'value' THEN decode(c.call ->> 'value', 'hex') END
      FROM jsonb_each(p_calls) AS c(node_id, call)
     WHERE n.run_id = p_run_id AND n.node_id = c.node_id AND n.type = 'state'
       AND n.status = 'pending';
END
$$;

CREATE FUNCTION cryo._graph_skip(p_q cryo.queue, p_node text, p_why text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._node_end(p_q.run_id, p_node, 'skipped', p_why);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_skipped', 'node', p_node, 0);
END
$$;

CREATE FUNCTION cryo._graph_slice() RETURNS integer
    LANGUAGE sql STABLE
    AS $$
    SELECT greatest(coalesce(nullif(current_setting('cryo.graph_slice_size', true), '')::integer,
                             200), 1)
$$;

CREATE TABLE cryo.node_states (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    node_id text NOT NULL,
    type text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    items integer,
    output bytea,
    error text,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    ord integer,
    def jsonb,
    deps text[],
    dependents text[],
    open_deps integer DEFAULT 0 NOT NULL,
    tolerated boolean DEFAULT false NOT NULL,
    state_call jsonb,
    state_value bytea,
    output_clear jsonb,
    items_done integer DEFAULT 0 NOT NULL,
    stop_checked boolean DEFAULT false NOT NULL,
    CONSTRAINT node_states_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'waiting'::text, 'succeeded'::text, 'failed'::text, 'skipped'::text, 'seeded'::text, 'cancelled'::text])))
);

COMMENT ON TABLE cryo.node_states IS 'One row per node of a graph run: status (pending, running, waiting, succeeded, failed, skipped, seeded, cancelled), fan-out size, sealed output.';

COMMENT ON COLUMN cryo.node_states.open_deps IS 'How many of the node''s predecessors have not ended; pending with 0 means ready.';

COMMENT ON COLUMN cryo.node_states.tolerated IS 'A failed node whose continue_on_error let the run go on (its successors run).';

COMMENT ON COLUMN cryo.node_states.state_call IS 'For a constant state node: its clear call {op, key, entity, expected}, run by cryo.graph_plan.';

COMMENT ON COLUMN cryo.node_states.state_value IS 'For a constant set, add or cas node: the sealed value it writes.';

COMMENT ON COLUMN cryo.node_states.output_clear IS 'A node output holding no user data (state set/delete/add/cas), in the clear; output is NULL then.';

COMMENT ON COLUMN cryo.node_states.items_done IS 'How many of the node''s instances have succeeded (cryo._instance_ended keeps it): the node succeeds when it reaches items (1 without a fan-out).';

COMMENT ON COLUMN cryo.node_states.stop_checked IS 'The node''s stop_if was decided (it ends the run early when it held).';

CREATE FUNCTION cryo._graph_start_instances(p_q cryo.queue, p_node cryo.node_states, p_configs jsonb, p_scope jsonb, p_budget integer DEFAULT NULL::integer) RETURNS TABLE(item integer, attempt integer, config jsonb, item_value jsonb, idempotency_key text)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
DECLARE
    v_run_id text := p_q.run_id;
    v_node text := p_node.node_id;
    v_max integer := nullif(p_node.def ->> 'max_parallel', '')::integer;
    v_fan boolean := p_node.items IS NOT NULL;
    -- A loop's iterations are its items: each its own key, and node.iteration to read.
    v_loop boolean := p_node.def ? 'loop';
    v_items jsonb;
    v_active integer;
    v_next integer;
    v_n integer;
    v_scope jsonb;
    v_inst cryo.node_instances;
    v_group text;
    v_holder text;
    v_path text;
    v_base jsonb := p_scope;
BEGIN
    IF v_fan THEN
        v_items := cryo._eval(p_node.def -> 'fan_out', p_scope || jsonb_build_object(
            'node', jsonb_build_object('id', v_node)));
        -- Each item's scope is a copy: without the input when nothing rendered per item
        -- reads it (a fan-out over a large input copied all of it for every item).
        IF NOT jsonb_path_exists(jsonb_build_array(p_configs -> v_node, p_node.def -> 'concurrency'),
                                 'strict $.**.path ? (@[0] == "input")') THEN
            v_base := p_scope - 'input';
        END IF;
    END IF;
    SELECT count(*) INTO v_active FROM cryo.node_instances i
     WHERE i.run_id = v_run_id AND i.node_id = v_node
       AND cryo._node_status_in(i.status, 'instance active');
    v_next := coalesce((SELECT i.item + 1 FROM cryo.node_instances i
                         WHERE i.run_id = v_run_id AND i.node_id = v_node
                         ORDER BY i.item DESC LIMIT 1), 0);
    FOR v_n IN
        SELECT i.item FROM cryo.node_instances i
         WHERE i.run_id = v_run_id AND i.node_id = v_node
           AND (i.status = 'ready' OR (i.status = 'retrying' AND i.due_at <= cryo.now()))
        UNION ALL
        SELECT g FROM generate_series(v_next, coalesce(p_node.items, 1) - 1) g
        ORDER BY 1
    LOOP
        EXIT WHEN v_max IS NOT NULL AND v_active >= v_max;
        EXIT WHEN p_budget IS NOT NULL AND p_budget <= 0;  -- the rest in the next slice
        p_budget := p_budget - 1;
        v_path := 'node/' || v_node || '/' || v_n;
        v_scope := v_base || jsonb_build_object('node', jsonb_build_object(
            'id', v_node, 'idempotency_key', cryo._graph_key(v_run_id, v_node, v_n, v_fan OR v_loop))
            || CASE WHEN v_loop THEN jsonb_build_object('iteration', v_n) ELSE '{}' END);
        IF v_fan THEN
            v_scope := v_scope || jsonb_build_object('item', v_items -> v_n, 'item_index', v_n);
        END IF;
        PERFORM cryo._instance_open(p_q, v_node, v_n);
        v_group := NULL;
        -- A node's concurrency group is the same project lease scripts and submits use,
        -- held by this run for as long as the instance runs. When the run was admitted
        -- through that very group it holds it already (no other run is in it), and the
        -- instance runs under the run's lease instead of waiting behind its own run.
        IF p_node.def ? 'concurrency' THEN
            v_group := cryo._eval(p_node.def -> 'concurrency', v_scope) #>> '{}';
            BEGIN
                PERFORM cryo._check_name('concurrency group', v_group);
            EXCEPTION WHEN SQLSTATE 'CR004' THEN
                -- A group that renders to nothing fails this node, not the driver's turn.
                PERFORM cryo.graph_record_item(v_run_id, p_q.claim_token, v_node, v_n, 'failed',
                                               NULL, 'concurrency group ' || SQLERRM);
                CONTINUE;
            END;
            PERFORM cryo._lock_group(p_q.org, p_q.project, v_group);
            PERFORM cryo._declare_group_limit(p_q.org, p_q.project, v_group,
                                              (p_node.def ->> 'concurrency_limit')::integer,
                                              (p_node.def ->> 'concurrency_window')::float8);
            v_holder := cryo._group_holder(p_q.org, p_q.project, v_group);
            IF v_holder IS NOT NULL AND EXISTS (
                    SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                       AND l.grp = v_group AND l.holder_run_id = v_run_id
                       AND l.kind = 'admission') THEN
                NULL;  -- the run's own admission lease covers the instance
            ELSIF cryo._group_full(p_q.org, p_q.project, v_group) AND NOT EXISTS (
                    SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                       AND l.grp = v_group AND l.holder_run_id = v_run_id AND l.path = v_path) THEN
                IF NOT EXISTS (SELECT 1 FROM cryo.lease_waiters w
                                WHERE w.run_id = v_run_id AND w.grp = v_group AND w.path = v_path) THEN
                    PERFORM cryo._queue_for_lease(p_q.org, p_q.project, v_group, v_run_id,
                                                  'graph', v_path, true);
                END IF;
                PERFORM cryo._instance_await_lease(v_run_id, v_node, v_n, v_group);
                CONTINUE;  -- waits in the group's FIFO; a grant wakes the run
            END IF;
            IF NOT EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                              AND l.grp = v_group AND l.holder_run_id = v_run_id AND l.path = v_path) THEN
                PERFORM cryo._take_lease(p_q.org, p_q.project, v_group, v_run_id, 'graph', v_path, true);
            END IF;
        END IF;
        v_inst := cryo._instance_run(v_run_id, v_node, v_n, v_group);
        v_active := v_active + 1;
        item := v_n;
        attempt := v_inst.attempt;
        config := CASE WHEN p_configs ? v_node THEN cryo._render(p_configs -> v_node, v_scope)
                       ELSE '{}'::jsonb END;
        item_value := CASE WHEN v_fan THEN v_items -> v_n END;
        idempotency_key := v_scope #>> '{node,idempotency_key}';
        RETURN NEXT;
    END LOOP;
END
$_$;

CREATE FUNCTION cryo._graph_state_batch(p_q cryo.queue, p_calls jsonb) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run_id text := p_q.run_id;
    v_order text[];
    v_outs jsonb[] := '{}';
    v_node cryo.node_states;
    v_call jsonb;
    v_calls jsonb[];
    v_distinct boolean;
    v_set_at integer[];
    v_entities text[];
    v_keys text[];
    v_values bytea[];
    v_versions bigint[];
BEGIN
    IF NOT coalesce((SELECT bool_and(coalesce(
                   n.status = 'pending' AND n.type = 'state'
                   AND (p_calls -> n.node_id ->> 'checked') = 'true'
                   AND p_calls -> n.node_id ->> 'op' IN ('set', 'delete')
                   AND NOT (n.def ? 'if' OR n.def ? 'fan_out' OR n.def ? 'concurrency')
                   AND NOT coalesce((n.def ->> 'on_failure')::boolean, false), false))
              FROM cryo.node_states n WHERE n.run_id = v_run_id), false) THEN
        RETURN false;
    END IF;
    v_order := cryo._graph_wave_order(v_run_id);
    IF v_order IS NULL THEN
        RETURN false;
    END IF;
    SELECT array_agg(x.c ORDER BY o.i),
           count(DISTINCT (cryo.state_scope(p_q.org, p_q.project, v_run_id, x.c ->> 'entity'),
                           x.c ->> 'key')) = count(*)
      INTO v_calls, v_distinct
      FROM unnest(v_order) WITH ORDINALITY AS o(id, i), LATERAL (SELECT p_calls -> o.id) x(c);
    IF v_distinct THEN
        -- No two nodes touch one cell, so none sees another's write and the order within
        -- the run cannot matter: every set in one write, each delete as its own call.
        SELECT array_agg(u.i ORDER BY u.i), array_agg(u.c ->> 'entity' ORDER BY u.i),
               array_agg(u.c ->> 'key' ORDER BY u.i),
               array_agg(decode(u.c ->> 'value', 'hex') ORDER BY u.i)
          INTO v_set_at, v_entities, v_keys, v_values
          FROM unnest(v_calls) WITH ORDINALITY AS u(c, i) WHERE u.c ->> 'op' = 'set';
        IF v_set_at IS NOT NULL THEN
            v_versions := cryo._state_set_cells(p_q, v_entities, v_keys, v_values);
        END IF;
        v_outs := array_fill(NULL::jsonb, ARRAY[cardinality(v_calls)]);
        FOR i IN 1 .. coalesce(cardinality(v_set_at), 0) LOOP
            v_outs[v_set_at[i]] := jsonb_build_object('version', v_versions[i]);
        END LOOP;
        FOR i IN 1 .. cardinality(v_calls) LOOP
            IF v_calls[i] ->> 'op' = 'delete' THEN
                v_outs[i] := jsonb_build_object('deleted', cryo._state_delete(
                    p_q, v_calls[i] ->> 'entity', v_calls[i] ->> 'key'));
            END IF;
        END LOOP;
    ELSE
        FOR v_node IN SELECT n.* FROM unnest(v_order) WITH ORDINALITY AS o(id, i)
                        JOIN cryo.node_states n ON n.run_id = v_run_id AND n.node_id = o.id
                       ORDER BY o.i LOOP
            -- The call as _graph_set_calls would have stored it on the node (written below).
            v_call := p_calls -> v_node.node_id;
            v_node.state_call := v_call - 'value';
            v_node.state_value := decode(v_call ->> 'value', 'hex');
            v_outs := v_outs || cryo._graph_state_call(p_q, v_node, 0, 1);
        END LOOP;
    END IF;
    PERFORM cryo._nodes_ran_now(p_q, v_order, v_outs, p_calls);
    RETURN true;
END
$$;

CREATE FUNCTION cryo._graph_state_call(p_q cryo.queue, p_node cryo.node_states, p_item integer, p_attempt integer) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_call jsonb := p_node.state_call;
    v_entity text := v_call ->> 'entity';
    v_key text := v_call ->> 'key';
    v_name text := 'node:' || p_node.node_id || '#' || p_item || '#' || p_attempt;
BEGIN
    CASE v_call ->> 'op'
    WHEN 'set' THEN
        RETURN jsonb_build_object('version', cryo._state_set(p_q, v_entity, v_key,
                                                             p_node.state_value));
    WHEN 'delete' THEN
        RETURN jsonb_build_object('deleted', cryo._state_delete(p_q, v_entity, v_key));
    WHEN 'add' THEN
        RETURN (SELECT jsonb_build_object('claimed', a.claimed)
                  FROM cryo.state_add(p_q.run_id, p_q.claim_token, v_entity, v_key,
                                      p_node.state_value, NULL, v_name, 0) a);
    WHEN 'cas' THEN
        RETURN (SELECT jsonb_build_object('swapped', a.swapped)
                  FROM cryo.state_cas(p_q.run_id, p_q.claim_token, v_entity, v_key,
                                      p_node.state_value, (v_call ->> 'expected')::bigint,
                                      NULL, v_name, 0) a);
    ELSE
        RAISE EXCEPTION 'a state node the database runs is set, delete, add or cas, not %',
            v_call ->> 'op' USING ERRCODE = 'CR004';
    END CASE;
END
$$;

CREATE FUNCTION cryo._graph_state_now(p_q cryo.queue, p_node cryo.node_states) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_out jsonb;
BEGIN
    IF (p_node.state_call ->> 'checked') = 'true' THEN
        v_out := cryo._graph_state_call(p_q, p_node, 0, 1);
    ELSE
        BEGIN
            v_out := cryo._graph_state_call(p_q, p_node, 0, 1);
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE NOT LIKE 'CR%' OR SQLSTATE = 'CR002' THEN
                RAISE;
            END IF;
            RETURN NULL;
        END;
    END IF;
    PERFORM cryo._node_ran_now(p_q, p_node, v_out);
    RETURN v_out;
END
$$;

CREATE FUNCTION cryo._graph_wave_order(p_run_id text) RETURNS text[]
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_ids text[];     -- node id by ord
    v_open int[];     -- predecessors not yet run, by ord
    v_n int;
    v_src int[];      -- edges (from, to) as ords, sorted by from
    v_dst int[];
    v_start int[];    -- v_dst[v_start[u] .. v_end[u]]: the nodes after u
    v_end int[];
    v_front int[];
    v_next int[];
    v_order text[] := '{}';
    v_dense boolean;
    u int;
    v int;
    i int;
BEGIN
    SELECT array_agg(n.node_id ORDER BY n.ord), array_agg(n.open_deps ORDER BY n.ord),
           count(*), bool_and(n.ord IS NOT NULL) AND max(n.ord) = count(*) AND min(n.ord) = 1
      INTO v_ids, v_open, v_n, v_dense
      FROM cryo.node_states n WHERE n.run_id = p_run_id;
    IF v_n = 0 OR NOT coalesce(v_dense, false) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.ord ORDER BY n.ord, m.ord), array_agg(m.ord ORDER BY n.ord, m.ord)
      INTO v_src, v_dst
      FROM cryo.node_states n
     CROSS JOIN unnest(n.dependents) AS d(id)
      JOIN cryo.node_states m ON m.run_id = p_run_id AND m.node_id = d.id
     WHERE n.run_id = p_run_id;
    v_start := array_fill(NULL::int, ARRAY[v_n]);
    v_end := array_fill(NULL::int, ARRAY[v_n]);
    FOR i IN 1 .. coalesce(cardinality(v_src), 0) LOOP
        u := v_src[i];
        IF v_start[u] IS NULL THEN
            v_start[u] := i;
        END IF;
        v_end[u] := i;
    END LOOP;
    v_front := '{}';
    FOR u IN 1 .. v_n LOOP
        IF v_open[u] = 0 THEN
            v_front := v_front || u;
        END IF;
    END LOOP;
    WHILE cardinality(v_front) > 0 LOOP
        v_next := '{}';
        FOREACH u IN ARRAY v_front LOOP
            v_order := v_order || v_ids[u];
            FOR i IN coalesce(v_start[u], 1) .. coalesce(v_end[u], 0) LOOP
                v := v_dst[i];
                v_open[v] := v_open[v] - 1;
                IF v_open[v] = 0 THEN
                    v_next := v_next || v;
                END IF;
            END LOOP;
        END LOOP;
        -- Each wave in document order (a chain's waves are one node: nothing to sort).
        v_front := CASE WHEN cardinality(v_next) > 1
                        THEN ARRAY(SELECT k FROM unnest(v_next) k ORDER BY k) ELSE v_next END;
    END LOOP;
    RETURN v_order;
END
$$;

CREATE FUNCTION cryo._group_full(p_org text, p_project text, p_group text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_lim cryo.lease_limits;
BEGIN
    SELECT * INTO v_lim FROM cryo.lease_limits m
     WHERE m.org = p_org AND m.project = p_project AND m.grp = p_group;
    IF v_lim.window_seconds IS NOT NULL THEN
        RETURN (SELECT count(*) FROM cryo.lease_starts s
                 WHERE s.org = p_org AND s.project = p_project AND s.grp = p_group
                   AND s.started_at > cryo.now() - make_interval(secs => v_lim.window_seconds))
               >= v_lim.max_holders;
    END IF;
    -- holders, not holds: a run holding the group and a node of it holding it too is one
    RETURN (SELECT count(DISTINCT l.holder_run_id) FROM cryo.leases l
              JOIN cryo.runs r ON r.id = l.holder_run_id
             WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
               AND NOT cryo.is_terminal(r.status)) >= coalesce(v_lim.max_holders, 1);
END
$$;

CREATE FUNCTION cryo._group_holder(p_org text, p_project text, p_group text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT l.holder_run_id FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
     WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
       AND NOT cryo.is_terminal(r.status)
     ORDER BY l.acquired_at LIMIT 1
$$;

CREATE FUNCTION cryo._hand_on_lease(p_org text, p_project text, p_group text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_w cryo.lease_waiters;
    v_run cryo.runs;
    v_got text;
BEGIN
    WHILE NOT cryo._group_full(p_org, p_project, p_group) LOOP
        DELETE FROM cryo.lease_waiters WHERE id = (
            SELECT w.id FROM cryo.lease_waiters w
             WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
             ORDER BY w.id LIMIT 1)
        RETURNING * INTO v_w;
        IF NOT FOUND THEN
            DELETE FROM cryo.leases l WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
               AND EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = l.holder_run_id
                              AND cryo.is_terminal(r.status));
            RETURN v_got;
        END IF;
        IF v_w.kind = 'graph' THEN
            -- A graph node instance waits: the run's driver starts it on its next turn.
            PERFORM cryo._take_lease(p_org, p_project, p_group, v_w.run_id, v_w.kind, v_w.path, v_w.scoped);
            PERFORM cryo._graph_poke(v_w.run_id, 'lease_granted');
            v_got := v_w.run_id;
        ELSIF v_w.kind = 'admission' THEN
            SELECT * INTO v_run FROM cryo.runs WHERE id = v_w.run_id AND status = 'queued' FOR UPDATE;
            IF FOUND THEN
                PERFORM cryo._take_lease(p_org, p_project, p_group, v_w.run_id, v_w.kind, v_w.path, v_w.scoped);
                PERFORM cryo._enqueue(v_run.id, v_run.org, v_run.project, v_run.required_caps);
                PERFORM cryo._history(v_run.id, p_org, p_project, 'admitted');
                PERFORM cryo._notify_run(v_run.id);
                v_got := v_run.id;
            END IF;
        ELSIF EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = v_w.run_id AND NOT cryo.is_terminal(r.status)) THEN
            PERFORM cryo._take_lease(p_org, p_project, p_group, v_w.run_id, v_w.kind, v_w.path, v_w.scoped);
            IF cryo._wake(ARRAY[v_w.run_id], 'lease_granted', NULL,
                          jsonb_build_object('group', p_group), 0) > 0 THEN
                v_got := v_w.run_id;
            ELSE  -- not parked on it after all: the place goes to the next waiter
                DELETE FROM cryo.leases l WHERE l.org = p_org AND l.project = p_project
                   AND l.grp = p_group AND l.holder_run_id = v_w.run_id
                   AND coalesce(l.path, '') = coalesce(v_w.path, '');
            END IF;
        END IF;
        -- A waiter gone (ended meanwhile) took nothing: the next one is tried.
    END LOOP;
    RETURN v_got;
END
$$;

CREATE FUNCTION cryo._handler_depth_limit() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT 5
$$;

CREATE FUNCTION cryo._history(p_run_id text, p_org text, p_project text, p_kind text, p_family text DEFAULT NULL::text, p_name text DEFAULT NULL::text, p_ordinal integer DEFAULT NULL::integer, p_attempt integer DEFAULT NULL::integer, p_payload bytea DEFAULT NULL::bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, attempt, payload, created_at)
    VALUES (p_run_id, p_org, p_project, p_kind,
            CASE WHEN p_family IS NULL THEN NULL ELSE 'run' END,
            p_family, p_name, p_ordinal, p_attempt, p_payload, cryo.now());
END
$$;

CREATE FUNCTION cryo._history_counts(p_ids bigint[]) RETURNS TABLE(metric text, org text, project text, label text, label2 text, n bigint, total double precision)
    LANGUAGE sql STABLE
    AS $$
    WITH h AS MATERIALIZED (
        SELECT h.run_id, h.org, h.project, h.kind, h.woke FROM cryo.history h
         WHERE h.id = ANY (p_ids)
           AND (h.kind IN ('submitted', 'claim_expired') OR cryo.is_terminal(h.kind)
                OR h.woke)
    ), r AS MATERIALIZED (
        SELECT h.org, h.project, h.kind AS event, cryo._metric_kind(r.kind, r.graph) AS kind,
               CASE WHEN r.kind = 'graph' THEN 'graph' ELSE 'job' END AS claim_kind,
               extract(epoch FROM r.started_at - r.created_at)::double precision AS waited,
               extract(epoch FROM r.finished_at - r.started_at)::double precision AS claimed
          FROM h JOIN cryo.runs r ON r.id = h.run_id
         WHERE h.kind = 'submitted' OR cryo.is_terminal(h.kind)
    )
    SELECT x.metric, x.org, x.project, x.label, x.label2, count(*), sum(x.total)
      FROM (SELECT 'runs_submitted' AS metric, r.org, r.project, r.kind AS label,
                   '' AS label2, 0::double precision AS total
              FROM r WHERE r.event = 'submitted'
            UNION ALL
            SELECT 'runs_finished', r.org, r.project, r.kind, r.event, 0
              FROM r WHERE r.event <> 'submitted'
            UNION ALL
            SELECT 'queue_wait_seconds', r.org, r.project, r.claim_kind,
                   cryo._metric_bucket(r.waited), greatest(r.waited, 0)
              FROM r WHERE r.event <> 'submitted' AND r.waited IS NOT NULL
            UNION ALL
            SELECT 'claim_seconds', r.org, r.project, r.claim_kind,
                   cryo._metric_bucket(r.claimed), greatest(r.claimed, 0)
              FROM r WHERE r.event <> 'submitted' AND r.claimed IS NOT NULL
            UNION ALL
            SELECT CASE WHEN h.kind = 'claim_expired' THEN 'claims_lapsed' ELSE 'wakes' END,
                   h.org, h.project, CASE WHEN h.kind = 'claim_expired' THEN '' ELSE h.kind END,
                   '', 0
              FROM h WHERE h.kind = 'claim_expired' OR h.woke) x
     GROUP BY 1, 2, 3, 4, 5
$$;

CREATE FUNCTION cryo._hold_queued(p_run_id text) RETURNS void
    LANGUAGE sql
    AS $$
    UPDATE cryo.runs SET status = 'queued', updated_at = cryo.now() WHERE id = p_run_id
$$;

CREATE FUNCTION cryo._inherit_traceparent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.traceparent := (SELECT p.traceparent FROM cryo.runs p WHERE p.id = NEW.parent_run_id);
    RETURN NEW;
END
$$;

CREATE FUNCTION cryo._inherit_untrusted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL AND NOT NEW.untrusted THEN
        NEW.untrusted := coalesce((SELECT r.untrusted FROM cryo.runs r WHERE r.id = NEW.parent_run_id), false);
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION cryo._instance_answer(p_run_id text, p_node text, p_answer bytea, p_by text, p_item integer DEFAULT NULL::integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- p_item: that item of a fanned-out node only; NULL: every waiting one.
    UPDATE cryo.node_instances i SET output = p_answer, wait_name = p_by
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.status = 'waiting'
       AND i.wait_kind = 'approval' AND i.output IS NULL
       AND (p_item IS NULL OR i.item = p_item);
    RETURN FOUND;
END
$$;

CREATE FUNCTION cryo._instance_await_lease(p_run_id text, p_node text, p_item integer, p_group text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_instances i SET lease_group = p_group, wait_kind = 'lease'
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
    PERFORM cryo._node_waits(p_run_id, p_node);
END
$$;

CREATE FUNCTION cryo._instance_cache(p_run_id text, p_node text, p_item integer, p_key bytea, p_cached boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_instances i SET cache_key = p_key, cached = p_cached
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
END
$$;

CREATE FUNCTION cryo._instance_ended(p_run_id text, p_org text, p_project text, p_node text, p_item integer, p_outcome text, p_output bytea, p_error text, p_exit_code integer, p_output_clear jsonb, p_retry boolean DEFAULT true, p_event text DEFAULT NULL::text, p_payload bytea DEFAULT NULL::bytea) RETURNS text
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_def jsonb;
    v_inst cryo.node_instances;
    v_node cryo.node_states;
    v_retry jsonb;
    v_delay double precision;
    v_status text;
BEGIN
    IF p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'an instance ends succeeded or failed, not %', p_outcome USING ERRCODE = 'CR004';
    END IF;
    SELECT n.def INTO v_def FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = p_node;
    SELECT * INTO v_inst FROM cryo.node_instances i
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item FOR UPDATE;
    IF NOT FOUND OR v_def IS NULL THEN
        RAISE EXCEPTION 'run % has no started instance %/%', p_run_id, p_node, p_item USING ERRCODE = 'CR005';
    END IF;
    IF NOT cryo._node_status_in(v_inst.status, 'instance live') THEN
        RETURN v_inst.status;  -- recorded already
    END IF;
    v_retry := v_def -> 'retry';
    IF p_outcome = 'failed' AND p_retry AND v_retry IS NOT NULL
       AND v_inst.attempt < coalesce((v_retry ->> 'attempts')::integer, 1)
       AND (v_retry -> 'on_exit' IS NULL OR p_exit_code IS NULL
            OR v_retry -> 'on_exit' @> to_jsonb(p_exit_code)) THEN
        -- backoff is the first wait; an exponential retry (factor) multiplies it by the
        -- factor for each attempt already failed, up to max_delay.
        v_delay := least(coalesce((v_retry ->> 'max_delay')::float8, 'infinity'),
                         coalesce((v_retry ->> 'backoff')::float8, 0)
                         * power(coalesce((v_retry ->> 'factor')::float8, 1), v_inst.attempt - 1));
        UPDATE cryo.node_instances i
           SET status = 'retrying', attempt = i.attempt + 1, error = p_error, job_run_id = NULL,
               due_at = cryo.now() + make_interval(secs => v_delay)
         WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
        PERFORM cryo._release_leases(p_run_id, 'node/' || p_node || '/' || p_item);
        INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                                  key_ordinal, attempt, detail, created_at)
        VALUES (p_run_id, p_org, p_project, 'node_retry_scheduled', 'run', 'node', p_node, p_item,
                v_inst.attempt, jsonb_build_object('delay', v_delay), cryo.now());
        RETURN 'retrying';
    END IF;
    UPDATE cryo.node_instances i
       SET status = p_outcome, output = p_output, output_clear = p_output_clear, error = p_error,
           finished_at = cryo.now(), wait_kind = NULL
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
    IF v_inst.lease_group IS NOT NULL THEN  -- only an instance with a group holds or waits
        PERFORM cryo._release_leases(p_run_id, 'node/' || p_node || '/' || p_item);
    END IF;
    SELECT * INTO v_node FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = p_node
       FOR UPDATE;
    IF p_outcome = 'failed' THEN
        v_status := 'failed';
    -- A loop's iteration that succeeded leaves its node running: the next turn decides
    -- whether another iteration opens or the node ends (cryo._graph_loops).
    ELSIF NOT v_def ? 'loop' THEN
        -- a count kept on the node: a count(*) of its instances made a fan-out quadratic
        UPDATE cryo.node_states n SET items_done = n.items_done + 1
         WHERE n.run_id = p_run_id AND n.node_id = p_node
        RETURNING n.items_done INTO v_node.items_done;
        IF v_node.items_done >= coalesce(v_node.items, 1) THEN
            v_status := 'succeeded';
        END IF;
    END IF;
    IF v_status IS NOT NULL THEN
        PERFORM cryo._node_end(p_run_id, p_node, v_status, p_error, p_output, p_output_clear);
        PERFORM cryo._history(p_run_id, p_org, p_project,
                              coalesce(p_event, CASE v_status WHEN 'failed' THEN 'node_failed'
                                                              ELSE 'node_completed' END),
                              'node', p_node, p_item, v_inst.attempt, coalesce(p_payload, p_output));
    ELSE
        PERFORM cryo._node_waits(p_run_id, p_node);
    END IF;
    RETURN p_outcome;
END
$$;

CREATE FUNCTION cryo._instance_job(p_run_id text, p_node text, p_item integer, p_child text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_instances i SET job_run_id = p_child, status = 'running'
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
END
$$;

CREATE FUNCTION cryo._instance_open(p_q cryo.queue, p_node text, p_item integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, started_at)
    VALUES (p_q.run_id, p_q.org, p_q.project, p_node, p_item, 'ready', cryo.now())
    ON CONFLICT ON CONSTRAINT node_instances_pkey DO NOTHING;
END
$$;

CREATE FUNCTION cryo._instance_reject(p_run_id text, p_org text, p_project text, p_node text, p_by text, p_payload bytea, p_item integer DEFAULT NULL::integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_item integer;
    v_found boolean := false;
BEGIN
    FOR v_item IN UPDATE cryo.node_instances i SET wait_name = p_by
                   WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.status = 'waiting'
                     AND i.wait_kind = 'approval' AND i.output IS NULL
                     AND (p_item IS NULL OR i.item = p_item)
                  RETURNING i.item LOOP
        PERFORM cryo._instance_ended(p_run_id, p_org, p_project, p_node, v_item, 'failed', NULL,
                                     left('rejected by ' || p_by, 200), NULL, NULL, false,
                                     'node_rejected', p_payload);
        v_found := true;
    END LOOP;
    RETURN v_found;
END
$$;

CREATE TABLE cryo.node_instances (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    node_id text NOT NULL,
    item integer NOT NULL,
    status text NOT NULL,
    attempt integer DEFAULT 1 NOT NULL,
    output bytea,
    error text,
    job_run_id text,
    wait_kind text,
    wait_name text,
    due_at timestamp with time zone,
    lease_group text,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    output_clear jsonb,
    cache_key bytea,
    cached boolean DEFAULT false NOT NULL,
    CONSTRAINT node_instances_status_check CHECK ((status = ANY (ARRAY['ready'::text, 'running'::text, 'waiting'::text, 'retrying'::text, 'succeeded'::text, 'failed'::text, 'seeded'::text, 'cancelled'::text])))
);

COMMENT ON TABLE cryo.node_instances IS 'One row per started instance of a graph node (one, or one per fan-out item): attempt, the child run doing it, what it waits on, sealed output.';

COMMENT ON COLUMN cryo.node_instances.output_clear IS 'An instance output holding no user data, in the clear; output is NULL then.';

COMMENT ON COLUMN cryo.node_instances.cache_key IS 'For a node with cache whose entry missed: the key its output is stored under when it succeeds.';

COMMENT ON COLUMN cryo.node_instances.cached IS 'The instance ended at once with a cached output (its node''s cache: {key, ttl}).';

CREATE FUNCTION cryo._instance_run(p_run_id text, p_node text, p_item integer, p_group text) RETURNS cryo.node_instances
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_inst cryo.node_instances;
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'running', lease_group = p_group, job_run_id = NULL, wait_kind = NULL,
           started_at = CASE WHEN i.status = 'ready' THEN cryo.now() ELSE i.started_at END
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item
    RETURNING * INTO v_inst;
    UPDATE cryo.node_states n SET status = 'running'
     WHERE n.run_id = p_run_id AND n.node_id = p_node AND n.status = 'waiting';
    RETURN v_inst;
END
$$;

CREATE FUNCTION cryo._instance_wait(p_q cryo.queue, p_node text, p_item integer, p_kind text, p_name text, p_seconds double precision) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'waiting', wait_kind = p_kind, wait_name = p_name,
           due_at = cryo.now() + make_interval(secs => p_seconds)
     WHERE i.run_id = p_q.run_id AND i.node_id = p_node AND i.item = p_item;
    PERFORM cryo._node_waits(p_q.run_id, p_node);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_waiting', 'node', p_node, p_item);
END
$$;

CREATE FUNCTION cryo._leave_lease_queues(p_run_id text, p_path text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.lease_waiters WHERE run_id = p_run_id AND (p_path IS NULL OR path = p_path);
END
$$;

CREATE FUNCTION cryo._lock_group(p_org text, p_project text, p_group text) RETURNS void
    LANGUAGE sql
    AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('lease/' || p_org || '/' || p_project || '/' || p_group, 0))
$$;

CREATE FUNCTION cryo._log_take(p_run_id text, p_token uuid, p_offset bigint, p_length bigint) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_end bigint;
BEGIN
    IF p_offset IS NULL OR p_offset < 0 OR p_length IS NULL OR p_length < 0 THEN
        RAISE EXCEPTION 'a log chunk needs an offset and a length of at least 0'
            USING ERRCODE = 'CR004';
    END IF;
    SELECT CASE WHEN r.log_claim = p_token THEN r.log_end ELSE 0 END INTO v_end
      FROM cryo.runs r WHERE r.id = p_run_id;
    IF p_offset > v_end THEN
        RAISE EXCEPTION 'log chunk at byte % of run % leaves a gap: its stored log ends at byte %',
            p_offset, p_run_id, v_end USING ERRCODE = 'CR160';
    END IF;
    IF p_offset = v_end AND p_length > 0 THEN
        UPDATE cryo.runs SET log_claim = p_token, log_end = v_end + p_length
         WHERE id = p_run_id;
    END IF;
    RETURN v_end;
END
$$;

CREATE FUNCTION cryo._mapped_role(p_org text, p_claims jsonb) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT m.role FROM cryo.oidc_role_maps m
     WHERE m.org = p_org
       AND (p_claims -> m.claim = to_jsonb(m.value)
            OR (jsonb_typeof(p_claims -> m.claim) = 'array'
                AND p_claims -> m.claim @> jsonb_build_array(m.value)))
     ORDER BY cryo._role_rank(m.role) DESC
     LIMIT 1
$$;

CREATE FUNCTION cryo._mark(p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text, p_ordinal integer, p_due timestamp with time zone, p_ref_run_id text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, attempt, status, due_at, ref_run_id, created_at)
    SELECT p_q.run_id, p_q.org, p_q.project, cryo._next_seq(p_q.run_id, p_position),
           p_path, 'run', p_family, p_name, p_ordinal, r.attempt, 'pending', p_due,
           p_ref_run_id, cryo.now()
      FROM cryo.runs r WHERE r.id = p_q.run_id
    ON CONFLICT (run_id, path) DO NOTHING;
END
$$;

CREATE FUNCTION cryo._metric_bucket(p_seconds double precision) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
                WHEN p_seconds <= 0.005 THEN '0.005'
                WHEN p_seconds <= 0.01 THEN '0.01'
                WHEN p_seconds <= 0.025 THEN '0.025'
                WHEN p_seconds <= 0.05 THEN '0.05'
                WHEN p_seconds <= 0.1 THEN '0.1'
                WHEN p_seconds <= 0.25 THEN '0.25'
                WHEN p_seconds <= 0.5 THEN '0.5'
                WHEN p_seconds <= 1 THEN '1'
                WHEN p_seconds <= 2.5 THEN '2.5'
                WHEN p_seconds <= 5 THEN '5'
                WHEN p_seconds <= 10 THEN '10'
                WHEN p_seconds <= 30 THEN '30'
                WHEN p_seconds <= 60 THEN '60'
                WHEN p_seconds <= 300 THEN '300'
                WHEN p_seconds <= 900 THEN '900'
                WHEN p_seconds <= 3600 THEN '3600'
                ELSE '+Inf' END
$$;

CREATE FUNCTION cryo._metric_kind(p_kind text, p_graph jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_kind = 'graph' AND p_graph ? 'pipeline' THEN 'pipeline' ELSE p_kind END
$$;

CREATE FUNCTION cryo._next_seq(p_run_id text, p_position integer) RETURNS integer
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF p_position IS NOT NULL AND p_position >= 0 AND NOT EXISTS (
            SELECT 1 FROM cryo.journal j WHERE j.run_id = p_run_id AND j.seq = p_position) THEN
        RETURN p_position;
    END IF;
    RETURN (SELECT coalesce(max(j.seq) + 1, 0) FROM cryo.journal j WHERE j.run_id = p_run_id);
END
$$;

CREATE FUNCTION cryo._no_run(p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
END
$$;

CREATE FUNCTION cryo._node_end(p_run_id text, p_node text, p_status text, p_error text, p_output bytea DEFAULT NULL::bytea, p_output_clear jsonb DEFAULT NULL::jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_was text;
BEGIN
    UPDATE cryo.node_states n
       SET status = p_status, error = p_error, finished_at = cryo.now(),
           output = CASE WHEN n.items IS NULL THEN p_output END,
           output_clear = CASE WHEN n.items IS NULL THEN p_output_clear END,
           tolerated = p_status = 'failed'
                       AND coalesce((n.def ->> 'continue_on_error')::boolean, false)
      FROM (SELECT o.status FROM cryo.node_states o
             WHERE o.run_id = p_run_id AND o.node_id = p_node) was
     WHERE n.run_id = p_run_id AND n.node_id = p_node
    RETURNING was.status INTO v_was;
    IF cryo._node_status_in(v_was, 'live') THEN
        PERFORM cryo._graph_node_ended(p_run_id, p_node);  -- once, as it ends
    END IF;
END
$$;

CREATE FUNCTION cryo._node_ran_now(p_q cryo.queue, p_node cryo.node_states, p_out jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_id text;
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, output_clear,
                                     started_at, finished_at)
    VALUES (p_q.run_id, p_q.org, p_q.project, p_node.node_id, 0, 'succeeded', p_out,
            v_now, v_now);
    UPDATE cryo.node_states n
       SET status = 'succeeded', started_at = v_now, finished_at = v_now, output_clear = p_out
     WHERE n.run_id = p_q.run_id AND n.node_id = p_node.node_id;
    -- What _graph_node_ended does, with the dependents the row already carries.
    FOREACH v_id IN ARRAY coalesce(p_node.dependents, '{}') LOOP
        UPDATE cryo.node_states n SET open_deps = n.open_deps - 1
         WHERE n.run_id = p_q.run_id AND n.node_id = v_id;
    END LOOP;
    -- Scheduled and completed in the same instant: one event says both.
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_completed', 'node',
                          p_node.node_id, 0, 1);
END
$$;

CREATE FUNCTION cryo._node_start(p_q cryo.queue, p_node text, p_items integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_states n SET status = 'running', items = p_items, started_at = cryo.now()
     WHERE n.run_id = p_q.run_id AND n.node_id = p_node;
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_scheduled', 'node', p_node, 0);
    IF p_items = 0 THEN
        PERFORM cryo._node_end(p_q.run_id, p_node, 'succeeded', NULL);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

CREATE FUNCTION cryo._node_status_in(p_status text, p_set text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    -- (A searched CASE of constants: the planner does not inline `CASE p_set WHEN`, nor a
    -- cast of the CASE's text to text[], which is not immutable.)
    SELECT p_status = ANY (CASE
        -- a node: not yet ended; started and not ended; ended with its output; ended so
        -- that a rerun may start after it
        WHEN p_set = 'live' THEN '{pending,running,waiting}'::text[]
        WHEN p_set = 'under way' THEN '{running,waiting}'::text[]
        WHEN p_set = 'done' THEN '{succeeded,seeded}'::text[]
        WHEN p_set = 'ended well' THEN '{succeeded,skipped,seeded}'::text[]
        -- an instance: not yet ended; counted against max_parallel; with a deadline (a
        -- wait's timeout, a retry's backoff)
        WHEN p_set = 'instance live' THEN '{ready,running,waiting,retrying}'::text[]
        WHEN p_set = 'instance active' THEN '{running,waiting}'::text[]
        WHEN p_set = 'instance timed' THEN '{waiting,retrying}'::text[]
        END)
$$;

CREATE FUNCTION cryo._node_stop_checked(p_run_id text, p_node text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_states n SET stop_checked = true
     WHERE n.run_id = p_run_id AND n.node_id = p_node;
END
$$;

CREATE FUNCTION cryo._node_waits(p_run_id text, p_node text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_states n SET status = 'waiting'
     WHERE n.run_id = p_run_id AND n.node_id = p_node AND n.status = 'running'
       AND NOT EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                          AND i.node_id = p_node AND i.status = 'running')
       AND EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                      AND i.node_id = p_node
                      AND (i.status = 'waiting' OR (i.status = 'ready' AND i.wait_kind = 'lease')));
END
$$;

CREATE FUNCTION cryo._nodes_ran_now(p_q cryo.queue, p_order text[], p_outs jsonb[], p_calls jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, output_clear,
                                     started_at, finished_at)
    SELECT p_q.run_id, p_q.org, p_q.project, u.id, 0, 'succeeded', u.out, v_now, v_now
      FROM unnest(p_order, p_outs) AS u(id, out);
    UPDATE cryo.node_states n
       SET status = 'succeeded', started_at = v_now, finished_at = v_now, output_clear = u.out,
           open_deps = 0, state_call = (p_calls -> u.id) - 'value',
           state_value = decode(p_calls -> u.id ->> 'value', 'hex')
      FROM unnest(p_order, p_outs) AS u(id, out)
     WHERE n.run_id = p_q.run_id AND n.node_id = u.id;
    -- As cryo._history writes them, in the order the nodes ran.
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, attempt, created_at)
    SELECT p_q.run_id, p_q.org, p_q.project, 'node_completed', 'run', 'node', u.id, 0, 1, v_now
      FROM unnest(p_order) WITH ORDINALITY AS u(id, i) ORDER BY u.i;
END
$$;

CREATE FUNCTION cryo._nodes_seed(p_new text, p_old text, p_up text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.node_states n
       SET status = CASE o.status WHEN 'skipped' THEN 'skipped' WHEN 'failed' THEN 'failed'
                                  ELSE 'seeded' END,
           tolerated = o.tolerated, error = o.error,
           items = o.items, output = o.output, output_clear = o.output_clear,
           started_at = cryo.now(), finished_at = cryo.now()
      FROM cryo.node_states o
     WHERE n.run_id = p_new AND o.run_id = p_old AND o.node_id = n.node_id
       AND n.node_id = ANY (p_up);
    UPDATE cryo.node_states n
       SET open_deps = (SELECT count(*) FROM cryo.node_states m WHERE m.run_id = p_new
                           AND m.node_id = ANY (n.deps) AND cryo._node_status_in(m.status, 'live'))
     WHERE n.run_id = p_new;
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, attempt, output,
                                     output_clear, started_at, finished_at)
    SELECT p_new, i.org, i.project, i.node_id, i.item, 'seeded', i.attempt, i.output,
           i.output_clear, cryo.now(), cryo.now()
      FROM cryo.node_instances i
     WHERE i.run_id = p_old AND i.node_id = ANY (p_up) AND cryo._node_status_in(i.status, 'done');
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT p_new, r.org, r.project, 'node_seeded', 'run', 'node', u, 0, cryo.now()
      FROM unnest(p_up) u, cryo.runs r WHERE r.id = p_new;
END
$$;

CREATE FUNCTION cryo._nodes_skip_unstarted(p_q cryo.queue, p_why text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_node text;
BEGIN
    FOR v_node IN SELECT n.node_id FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.status = 'pending' ORDER BY n.ord LOOP
        PERFORM cryo._graph_skip(p_q, v_node, p_why);
    END LOOP;
END
$$;

CREATE FUNCTION cryo._notify_requeued(p_n integer, p_watched text[], p_graphs integer DEFAULT 0) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_n > coalesce(p_graphs, 0) THEN
        PERFORM pg_notify('cryo_work', '');
    END IF;
    IF p_graphs > 0 THEN
        PERFORM pg_notify('cryo_graph', '');
    END IF;
    IF p_n > 0 THEN
        PERFORM pg_notify('cryo_run', w) FROM unnest(p_watched) w;
    END IF;
END
$$;

CREATE FUNCTION cryo._notify_run(p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = p_run_id AND r.watched) THEN
        PERFORM pg_notify('cryo_run', p_run_id);
    END IF;
END
$$;

CREATE FUNCTION cryo._on_event(p_org text, p_project text, p_name text, p_event_id bigint, p_sealed bytea, p_clear jsonb, p_depth integer, p_untrusted boolean, p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run record;
    v_h cryo.event_handlers;
    v_trigger jsonb;
BEGIN
    FOR v_run IN
        SELECT r.id FROM cryo.runs r
         WHERE r.org = p_org AND r.project = p_project AND r.finished_at IS NULL
           AND r.graph ? 'cancel_on' AND (r.graph #>> '{cancel_on,event}') = p_name
           AND r.created_at <= cryo.now() AND NOT cryo.is_terminal(r.status)
           AND (NOT p_untrusted OR r.untrusted OR (r.graph #> '{cancel_on,tainted}') = 'true')
         ORDER BY r.id
    LOOP
        BEGIN
            PERFORM cryo._history(v_run.id, p_org, p_project, 'cancel_on', 'event', p_name, 0);
            PERFORM cryo.cancel_run(v_run.id);
        EXCEPTION WHEN SQLSTATE 'CR006' THEN
            NULL;  -- it ended meanwhile: nothing to cancel
        END;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM cryo.event_handlers h
                    WHERE h.org = p_org AND h.project = p_project AND h.event = p_name
                      AND NOT h.paused) THEN
        RETURN;
    END IF;
    IF p_depth >= cryo._handler_depth_limit() THEN
        UPDATE cryo.events
           SET refused = format('no handler run started: the event is at handler depth %s (the limit)', p_depth)
         WHERE id = p_event_id;
        IF p_run_id IS NOT NULL THEN
            PERFORM cryo._history(p_run_id, p_org, p_project, 'handler_refused', 'event', p_name, p_depth);
        END IF;
        RETURN;
    END IF;
    FOR v_h IN SELECT * FROM cryo.event_handlers h
                WHERE h.org = p_org AND h.project = p_project AND h.event = p_name
                  AND NOT h.paused ORDER BY h.name
    LOOP
        v_trigger := jsonb_build_object('kind', 'event', 'name', p_name, 'payload', p_clear,
                                        'depth', p_depth, 'event_id', p_event_id, 'handler', v_h.name);
        BEGIN
            PERFORM cryo._start_triggered(
                p_org, p_project, v_h.workflow, p_sealed, jsonb_build_object('trigger', v_trigger),
                jsonb_build_object('trigger', v_trigger, 'input', jsonb_build_object('trigger', v_trigger)),
                p_untrusted, 'event:' || p_event_id || ':' || v_h.name, 'event', v_h.name, p_depth);
        EXCEPTION WHEN SQLSTATE 'CR030' THEN
            -- The workflow's concurrency group is full: the publish stands, the run does not.
            UPDATE cryo.events
               SET refused = concat_ws('; ', refused, format('handler %s: %s', v_h.name, SQLERRM))
             WHERE id = p_event_id;
        END;
    END LOOP;
END
$$;

CREATE FUNCTION cryo._outcome_code(p_status text, p_exit_code integer) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_status WHEN 'succeeded' THEN 0
                         WHEN 'cancelled' THEN 130
                         WHEN 'failed' THEN CASE WHEN p_exit_code BETWEEN 1 AND 255
                                                 THEN p_exit_code ELSE 1 END
                         ELSE 1 END
$$;

CREATE FUNCTION cryo._park(p_run_id text, p_reason text, p_path text, p_name text, p_wake timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.queue
       SET state = 'parked', wake_at = p_wake, park_reason = p_reason, park_path = p_path,
           park_name = p_name, parked_at = cryo.now(), claim_token = NULL,
           claim_agent_token = NULL, agent_id = NULL, claimed_at = NULL, claim_expires_at = NULL
     WHERE run_id = p_run_id;
    UPDATE cryo.runs SET status = 'parked', substate = p_reason, updated_at = cryo.now()
     WHERE id = p_run_id;
    PERFORM cryo._notify_run(p_run_id);
END
$$;

CREATE FUNCTION cryo._park_on(p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text, p_ordinal integer, p_reason text, p_park_name text, p_due timestamp with time zone, p_ref_run_id text DEFAULT NULL::text) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_due timestamptz := p_due;
BEGIN
    PERFORM cryo._mark(p_q, p_position, p_path, p_family, p_name, p_ordinal, p_due, p_ref_run_id);
    IF p_due IS NOT NULL THEN
        SELECT j.due_at INTO v_due FROM cryo.journal j
         WHERE j.run_id = p_q.run_id AND j.path = p_path;
    END IF;
    PERFORM cryo._park(p_q.run_id, p_reason, p_path, p_park_name, v_due);
    RETURN v_due;
END
$$;

CREATE FUNCTION cryo._publish_event(p_org text, p_project text, p_name text, p_sealed bytea, p_clear jsonb, p_run_id text, p_untrusted boolean DEFAULT false, p_public boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_id bigint;
    v_waiters text[];
    v_depth integer := 0;
    v_untrusted boolean := coalesce(p_untrusted, false);
    v_published boolean;
BEGIN
    IF p_run_id IS NOT NULL THEN
        -- A node job of a graph handler run emits on behalf of its graph run.
        SELECT coalesce(r.trigger_depth + 1, g.trigger_depth + 1, 0), v_untrusted OR r.untrusted
          INTO v_depth, v_untrusted
          FROM cryo.runs r LEFT JOIN cryo.runs g ON g.id = r.parent_run_id
         WHERE r.id = p_run_id;
    END IF;
    v_untrusted := coalesce(v_untrusted, false);
    v_published := coalesce(p_public, false) AND NOT v_untrusted;
    PERFORM cryo._check_name('event', p_name);
    PERFORM cryo._require_project(p_org, p_project);
    -- Serialises with wait_event on this name: a waiter parks either before this event
    -- (and is woken by it) or after it (and waits for the next).
    PERFORM pg_advisory_xact_lock(hashtextextended(p_org || '/' || p_project || '/' || p_name, 7));
    INSERT INTO cryo.events (org, project, name, payload, payload_clear, emitted_by_run, depth,
                             untrusted, published, created_at)
    VALUES (p_org, p_project, p_name, p_sealed, p_clear, p_run_id, coalesce(v_depth, 0),
            v_untrusted, v_published, cryo.now())
    RETURNING id INTO v_id;
    SELECT array_agg(j.run_id) INTO v_waiters
      FROM cryo.journal j JOIN cryo.queue q ON q.run_id = j.run_id AND q.park_path = j.path
      JOIN cryo.runs r ON r.id = j.run_id
     WHERE j.org = p_org AND j.project = p_project AND j.key_family IN ('event', 'event.tainted')
       AND j.key_name = p_name AND j.status = 'pending' AND q.state = 'parked'
       AND CASE WHEN r.untrusted THEN v_untrusted OR v_published
                WHEN j.key_family = 'event.tainted' THEN true
                ELSE NOT v_untrusted END;
    IF v_waiters IS NOT NULL THEN
        PERFORM cryo._wake(v_waiters, 'event_received', p_sealed, p_clear, 0);
    END IF;
    -- Graph nodes waiting for it: their runs' drivers hand it over.
    PERFORM cryo._graph_poke(w.run_id, 'event_received')
       FROM (SELECT DISTINCT i.run_id FROM cryo.node_instances i
              WHERE i.org = p_org AND i.project = p_project AND i.wait_name = p_name
                AND i.status = 'waiting' AND i.wait_kind = 'event' ORDER BY 1) w;
    PERFORM cryo._on_event(p_org, p_project, p_name, v_id, p_sealed, p_clear, coalesce(v_depth, 0),
                           v_untrusted, p_run_id);
    RETURN v_id;
END
$$;

CREATE FUNCTION cryo._purge_events(p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION cryo._put_artifact(p_org text, p_project text, p_run_id text, p_key text, p_name text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_by_run text, p_public boolean DEFAULT false, p_executable boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_scope text := cryo.artifact_scope(p_org, p_project, p_run_id, p_key);
    v_tainted boolean := cryo._run_untrusted(p_by_run);
    v_now timestamptz := cryo.now();
BEGIN
    PERFORM cryo._check_name('artifact', p_name);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || p_org || ':' || p_project, 0));
    IF v_tainted AND NOT EXISTS (
        SELECT 1 FROM cryo.artifact_blobs b
         WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
           AND b.size = p_size AND b.untrusted_known) THEN
        RAISE EXCEPTION 'an untrusted run names only bytes it uploaded: upload blob % (% bytes) through the server first',
            p_sha256, p_size USING ERRCODE = 'CR170';
    END IF;
    PERFORM cryo._check_artifact_room(p_org, p_project, p_sha256, p_size, p_max_bytes,
                                      v_tainted);
    -- A published name shows the blob to untrusted runs: they may know of it from now on.
    INSERT INTO cryo.artifact_blobs AS b (org, project, sha256, size, created_at, touched_at,
                                          untrusted_known)
    VALUES (p_org, p_project, p_sha256, p_size, v_now, v_now,
            coalesce(p_public, false) AND NOT v_tainted)
    ON CONFLICT (org, project, sha256) DO UPDATE
       SET touched_at = excluded.touched_at,
           untrusted_known = b.untrusted_known OR excluded.untrusted_known;
    INSERT INTO cryo.artifacts AS a (org, project, scope, run_id, cache_key, name, sha256, size,
                                     created_by_run, created_at, tainted, published,
                                     executable)
    VALUES (p_org, p_project, v_scope, CASE WHEN p_key IS NULL THEN p_run_id END, p_key, p_name,
            p_sha256, p_size, p_by_run, v_now, v_tainted,
            coalesce(p_public, false) AND NOT v_tainted, coalesce(p_executable, false))
    ON CONFLICT ON CONSTRAINT artifacts_pkey DO UPDATE
       SET sha256 = excluded.sha256, size = excluded.size,
           created_by_run = excluded.created_by_run, created_at = excluded.created_at,
           published = excluded.published, executable = excluded.executable;
    RETURN QUERY SELECT v_scope, p_name, p_sha256, p_size, v_now;
END
$$;

CREATE FUNCTION cryo._queue_for_lease(p_org text, p_project text, p_group text, p_run_id text, p_kind text, p_path text, p_scoped boolean) RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO cryo.lease_waiters (org, project, grp, run_id, kind, scoped, path, enqueued_at)
    VALUES (p_org, p_project, p_group, p_run_id, p_kind, coalesce(p_scoped, false), p_path,
            cryo.now())
$$;

CREATE FUNCTION cryo._queue_position(p_run_id text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
    SELECT (SELECT count(*) FROM cryo.lease_waiters o
             WHERE o.org = w.org AND o.project = w.project AND o.grp = w.grp AND o.id <= w.id)::integer
      FROM cryo.lease_waiters w WHERE w.run_id = p_run_id AND w.kind = 'admission'
     ORDER BY w.id LIMIT 1
$$;

CREATE FUNCTION cryo._reconcile_admission(p_batch integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION cryo._record(p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text, p_ordinal integer, p_result bytea DEFAULT NULL::bytea, p_answer_clear jsonb DEFAULT NULL::jsonb, p_exit_code integer DEFAULT 0, p_ref_run_id text DEFAULT NULL::text, p_label text DEFAULT NULL::text, p_complete_marker boolean DEFAULT false, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_seq integer;
BEGIN
    IF p_complete_marker THEN
        UPDATE cryo.journal j
           SET status = 'done', result = p_result, answer_clear = p_answer_clear,
               exit_code = p_exit_code, label = p_label, attempt = r.attempt,
               completed_at = cryo.now(),
               created_at = CASE WHEN p_started_at < j.created_at
                                 THEN greatest(p_started_at, r.created_at) ELSE j.created_at END
          FROM cryo.runs r
         WHERE j.run_id = p_q.run_id AND j.path = p_path AND j.status = 'pending'
           AND r.id = p_q.run_id
        RETURNING j.seq INTO v_seq;
        IF FOUND THEN
            RETURN v_seq;
        END IF;
    END IF;
    v_seq := cryo._next_seq(p_q.run_id, p_position);
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, label, attempt, status, result, answer_clear,
                              exit_code, ref_run_id, created_at, completed_at)
    SELECT p_q.run_id, p_q.org, p_q.project, v_seq, p_path, 'run', p_family, p_name,
           p_ordinal, p_label, r.attempt, 'done', p_result, p_answer_clear, p_exit_code,
           p_ref_run_id,
           CASE WHEN p_started_at < cryo.now() THEN greatest(p_started_at, r.created_at)
                ELSE cryo.now() END,
           cryo.now()
      FROM cryo.runs r WHERE r.id = p_q.run_id
    ON CONFLICT (run_id, path) DO NOTHING;
    RETURN CASE WHEN FOUND THEN v_seq END;
END
$$;

CREATE FUNCTION cryo._register_workflow_triggers(p_org text, p_project text, p_workflow text, p_graph jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_crons text[] := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_graph #> '{on,schedule}', '[]')));
    v_events text[] := ARRAY(SELECT DISTINCT jsonb_array_elements_text(coalesce(p_graph #> '{on,event}', '[]')));
    v_i integer;
BEGIN
    DELETE FROM cryo.schedules
     WHERE org = p_org AND project = p_project AND source_workflow = p_workflow
       AND name NOT IN (SELECT p_workflow || ':' || i FROM generate_series(1, cardinality(v_crons)) i);
    FOR v_i IN 1 .. coalesce(cardinality(v_crons), 0) LOOP
        INSERT INTO cryo.schedules AS s (org, project, name, workflow, cron, timezone, source_workflow,
                                         created_at, updated_at)
        VALUES (p_org, p_project, p_workflow || ':' || v_i, p_workflow, v_crons[v_i], 'UTC',
                p_workflow, cryo.now(), cryo.now())
        ON CONFLICT (org, project, name) DO UPDATE
           SET cron = excluded.cron, timezone = 'UTC', every_seconds = NULL,
               next_fire_at = CASE WHEN s.cron IS NOT DISTINCT FROM excluded.cron THEN s.next_fire_at END,
               updated_at = excluded.updated_at;
    END LOOP;
    DELETE FROM cryo.event_handlers
     WHERE org = p_org AND project = p_project AND source_workflow = p_workflow
       AND NOT event = ANY (v_events);
    INSERT INTO cryo.event_handlers (org, project, name, event, workflow, source_workflow, created_at)
    SELECT p_org, p_project, p_workflow || ':' || e, e, p_workflow, p_workflow, cryo.now()
      FROM unnest(v_events) e
    ON CONFLICT (org, project, name) DO NOTHING;
END
$$;

CREATE FUNCTION cryo._release(p_run_ids text[], p_kind text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer;
    v_watched text[];
    v_graphs integer;
BEGIN
    WITH requeued AS (
        UPDATE cryo.queue q
           SET state = 'pending', claim_token = NULL, claim_agent_token = NULL,
               agent_id = NULL, claimed_at = NULL, claim_expires_at = NULL
         WHERE q.run_id = ANY (p_run_ids) AND q.state = 'claimed'
        RETURNING q.run_id, q.required_caps = '{graph}' AS graph
    ), runs_back AS (
        UPDATE cryo.runs r SET status = 'pending', updated_at = cryo.now()
          FROM requeued WHERE r.id = requeued.run_id
        RETURNING r.id, r.org, r.project, r.attempt, r.watched, requeued.graph
    ), logged AS (
        INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
        SELECT id, org, project, p_kind, attempt, cryo.now() FROM runs_back
    )
    SELECT count(*), array_agg(id) FILTER (WHERE watched), count(*) FILTER (WHERE graph)
      INTO v_n, v_watched, v_graphs FROM runs_back;
    -- A graph run released (an expired driver claim) wakes the graph drivers, on theirs.
    PERFORM cryo._notify_requeued(v_n, v_watched, v_graphs);
    RETURN v_n;
END
$$;

CREATE FUNCTION cryo._release_lease(p_org text, p_project text, p_group text, p_run_id text, p_path text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.leases
     WHERE org = p_org AND project = p_project AND grp = p_group AND holder_run_id = p_run_id
       AND (p_path IS NULL OR path = p_path);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM cryo._hand_on_lease(p_org, p_project, p_group);
    RETURN true;
END
$$;

CREATE FUNCTION cryo._release_leases(p_run_id text, p_path text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_l record;
BEGIN
    PERFORM cryo._leave_lease_queues(p_run_id, p_path);
    FOR v_l IN SELECT org, project, grp FROM cryo.leases
                WHERE holder_run_id = p_run_id AND (p_path IS NULL OR path = p_path) LOOP
        PERFORM cryo._lock_group(v_l.org, v_l.project, v_l.grp);
        PERFORM cryo._release_lease(v_l.org, v_l.project, v_l.grp, p_run_id, p_path);
    END LOOP;
END
$$;

CREATE FUNCTION cryo._render(p_config jsonb, p_scope jsonb) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
DECLARE
    v_out jsonb;
BEGIN
    CASE jsonb_typeof(p_config)
    WHEN 'object' THEN
        IF p_config ? '$expr' THEN
            RETURN cryo._eval(p_config -> '$expr', p_scope);
        ELSIF p_config ? '$template' THEN
            RETURN cryo._eval(p_config -> '$template', p_scope);
        END IF;
        SELECT coalesce(jsonb_object_agg(k, cryo._render(v, p_scope)), '{}'::jsonb) INTO v_out
          FROM jsonb_each(p_config) AS e(k, v);
        RETURN v_out;
    WHEN 'array' THEN
        SELECT coalesce(jsonb_agg(cryo._render(v, p_scope) ORDER BY n), '[]'::jsonb) INTO v_out
          FROM jsonb_array_elements(p_config) WITH ORDINALITY AS e(v, n);
        RETURN v_out;
    ELSE
        RETURN p_config;
    END CASE;
END
$_$;

CREATE FUNCTION cryo._replay(p_run_id text, p_family text, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS cryo.journal
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_path text := cryo.call_path(p_family, p_name, p_ordinal, p_path);
    v_memo cryo.journal := cryo._done_memo(p_run_id, v_path);
BEGIN
    v_memo.path := v_path;
    RETURN v_memo;
END
$$;

CREATE FUNCTION cryo._require_project(p_org text, p_project text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, coalesce(p_project, '') USING ERRCODE = 'CR005';
    END IF;
END
$$;

CREATE TABLE cryo.workflows (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    filename text NOT NULL,
    interpreter text,
    source bytea NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    kind text DEFAULT 'script'::text NOT NULL,
    graph jsonb,
    workdir text,
    timeout_s double precision,
    priority integer,
    version integer DEFAULT 1 NOT NULL,
    CONSTRAINT workflows_kind_check CHECK ((kind = ANY (ARRAY['script'::text, 'graph'::text])))
);

COMMENT ON COLUMN cryo.workflows.workdir IS 'The absolute directory the workflow was stored from (NULL when not given); runs started from it by name (submit_run, schedules, webhooks, handlers) get it as runs.workdir.';

COMMENT ON COLUMN cryo.workflows.timeout_s IS 'The default timeout (seconds) of runs of this workflow; a submit''s own wins. NULL: the graph''s own, or none.';

COMMENT ON COLUMN cryo.workflows.priority IS 'The default claim priority of runs of this workflow; a submit''s own wins. NULL: 0.';

CREATE FUNCTION cryo._require_workflow(p_org text, p_project text, p_workflow text) RETURNS cryo.workflows
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_wf cryo.workflows;
BEGIN
    SELECT * INTO v_wf FROM cryo.workflows
     WHERE org = p_org AND project = p_project AND name = p_workflow;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', coalesce(p_workflow, ''), p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    RETURN v_wf;
END
$$;

CREATE FUNCTION cryo._required_caps(p_filename text, p_interpreter text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT CASE
        WHEN btrim(coalesce(p_interpreter, '')) <> '' THEN
            CASE WHEN regexp_replace((regexp_split_to_array(btrim(p_interpreter), '\s+'))[1],
                                     '^.*/', '') IN ('bash', 'sh', 'dash', 'zsh')
                 THEN '{shell}'::text[] ELSE '{polyglot}'::text[] END
        WHEN regexp_replace(p_filename, '^.*/', '') ~ '(\.(sh|bash)$|^[^.]*$)' THEN '{shell}'::text[]
        ELSE '{polyglot}'::text[] END
$_$;

CREATE FUNCTION cryo._reseed_metric_gauges() RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    LOCK TABLE cryo.artifact_blobs IN SHARE MODE;
    LOCK TABLE cryo.metric_counts, cryo.metric_deltas IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM cryo.metric_deltas WHERE metric = 'artifact_bytes';
    DELETE FROM cryo.metric_counts WHERE metric = 'artifact_bytes';
    INSERT INTO cryo.metric_counts (metric, org, project, n)
    SELECT 'artifact_bytes', b.org, b.project, sum(b.size) FROM cryo.artifact_blobs b
     GROUP BY b.org, b.project;
END
$$;

CREATE FUNCTION cryo._retry_if_allowed(p_run_id text, p_exit_code integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF v_run.retries_left <= 0 OR v_run.cancel_requested
       OR (v_run.retry_on IS NOT NULL AND NOT (coalesce(p_exit_code, 1) = ANY (v_run.retry_on))) THEN
        RETURN false;
    END IF;
    UPDATE cryo.runs SET retries_left = retries_left - 1, exit_code = p_exit_code WHERE id = p_run_id;
    PERFORM cryo._forget(p_run_id);
    PERFORM cryo._park(p_run_id, 'retry-backoff', NULL, NULL,
                       cryo.now() + make_interval(secs => v_run.retry_backoff));
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'retry_scheduled', p_attempt => v_run.attempt);
    RETURN true;
END
$$;

CREATE FUNCTION cryo._role_rank(p_role text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE p_role WHEN 'owner' THEN 4 WHEN 'admin' THEN 3 WHEN 'member' THEN 2
                       WHEN 'viewer' THEN 1 ELSE 0 END
$$;

CREATE TABLE cryo.webhooks (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    workflow text,
    secret bytea NOT NULL,
    status_url text,
    created_at timestamp with time zone NOT NULL,
    paused boolean DEFAULT false NOT NULL
);

COMMENT ON TABLE cryo.webhooks IS 'Webhooks: a signing secret (sealed) for deliveries to /api/v1/hooks/{org}/{project}/{name}; with a workflow a delivery starts it, without one it is published on the bus as webhook.<event>. status_url receives the run''s outcome when it ends.';

CREATE FUNCTION cryo._route_delivery(p_hook cryo.webhooks, p_event text, p_trigger jsonb, p_input bytea, p_payload bytea, p_untrusted boolean, p_refused text, OUT outcome text, OUT run_id text, OUT event_id bigint) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_wf cryo.workflows;
BEGIN
    IF p_hook.paused THEN
        outcome := 'paused';
    ELSIF p_hook.workflow IS NULL THEN
        event_id := cryo._publish_event(p_hook.org, p_hook.project, 'webhook.' || p_event,
                                        p_payload, NULL, NULL, p_untrusted);
        outcome := 'published';
    ELSE
        v_wf := cryo._require_workflow(p_hook.org, p_hook.project, p_hook.workflow);
        IF v_wf.graph #> '{on,webhook}' IS NOT NULL AND NOT (v_wf.graph #> '{on,webhook}') ? p_event THEN
            outcome := 'ignored';
        ELSIF p_refused IS NOT NULL THEN
            outcome := 'refused';  -- its input failed the workflow's input_schema (the server's check)
        ELSE
            run_id := cryo._start_triggered(
                p_hook.org, p_hook.project, p_hook.workflow, p_input, NULL,
                jsonb_build_object('trigger', p_trigger, 'input', jsonb_build_object('trigger', p_trigger)),
                p_untrusted, NULL, 'webhook', p_hook.name);
            outcome := CASE WHEN run_id IS NULL THEN 'skipped' ELSE 'started' END;
            IF run_id IS NOT NULL AND p_hook.status_url IS NOT NULL THEN
                INSERT INTO cryo.status_posts (run_id, org, project, webhook, url, sha, created_at)
                VALUES (run_id, p_hook.org, p_hook.project, p_hook.name, p_hook.status_url,
                        p_trigger ->> 'sha', cryo.now());
            END IF;
        END IF;
    END IF;
END
$$;

CREATE TABLE cryo.artifacts (
    org text NOT NULL,
    project text NOT NULL,
    scope text NOT NULL,
    run_id text,
    cache_key text,
    name text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    created_by_run text,
    created_at timestamp with time zone NOT NULL,
    tainted boolean DEFAULT false NOT NULL,
    published boolean DEFAULT false NOT NULL,
    executable boolean DEFAULT false NOT NULL,
    CONSTRAINT artifacts_check CHECK (((run_id IS NULL) <> (cache_key IS NULL))),
    CONSTRAINT artifacts_size_check CHECK ((size >= 0))
);

COMMENT ON TABLE cryo.artifacts IS 'Artifact names: (scope, name) -> blob. scope is the run id for a run''s artifact (collected with the run), or {org}:{project}:key:{cache key} for a cached artifact (kept for CRYOPG_RETENTION_ARTIFACTS after it was put).';

COMMENT ON COLUMN cryo.artifacts.tainted IS 'Put by an untrusted run: the tainted namespace, which trusted runs read only when they ask for it (--tainted).';

COMMENT ON COLUMN cryo.artifacts.published IS 'A trusted artifact its put published (--public): untrusted runs may read it.';

COMMENT ON COLUMN cryo.artifacts.executable IS 'The file was executable (its owner''s x bit) when it was put: a get makes it executable again.';

CREATE FUNCTION cryo._run_artifacts(p_run_id text, p_scope text, p_name text, p_tainted boolean) RETURNS SETOF cryo.artifacts
    LANGUAGE sql STABLE
    AS $$
    SELECT DISTINCT ON (a.scope, a.name) a.* FROM cryo.artifacts a
     WHERE a.org = cryo._run_org(p_run_id) AND a.project = cryo._run_project(p_run_id)
       AND (a.scope = p_scope OR (p_scope IS NULL AND a.cache_key IS NOT NULL))
       AND (p_name IS NULL OR a.name = p_name)
       AND (a.scope = p_run_id
            OR a.tainted = (cryo._run_untrusted(p_run_id) OR coalesce(p_tainted, false))
            OR (cryo._run_untrusted(p_run_id) AND a.published))
     ORDER BY a.scope, a.name, a.tainted DESC
$$;

CREATE FUNCTION cryo._run_in_project(p_run_id text, p_org text, p_project text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT p_run_id IS NOT NULL AND split_part(p_run_id, ':', 1) = p_org
       AND split_part(p_run_id, ':', 2) = p_project AND split_part(p_run_id, ':', 3) LIKE 'run-%'
$$;

CREATE FUNCTION cryo._run_org(p_run_id text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT split_part(p_run_id, ':', 1)
$$;

CREATE FUNCTION cryo._run_project(p_run_id text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT split_part(p_run_id, ':', 2)
$$;

CREATE FUNCTION cryo._run_row(p_run_id text, p_live boolean DEFAULT false, p_lock boolean DEFAULT false, p_why text DEFAULT NULL::text) RETURNS cryo.runs
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    IF p_lock THEN
        SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id FOR UPDATE;
    ELSE
        SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    END IF;
    IF NOT FOUND THEN
        PERFORM cryo._no_run(p_run_id);
    END IF;
    IF p_live AND cryo.is_terminal(v_run.status) THEN
        RAISE EXCEPTION 'run % already finished (%)%', p_run_id, v_run.status,
            coalesce('; ' || p_why, '') USING ERRCODE = 'CR006';
    END IF;
    RETURN v_run;
END
$$;

CREATE FUNCTION cryo._run_sort_key(p_order text, p_created timestamp with time zone, p_started timestamp with time zone, p_finished timestamp with time zone, p_status text, p_name text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE ltrim(p_order, '-')
        WHEN 'started' THEN to_char(coalesce(p_started, p_created) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
        WHEN 'ended' THEN coalesce(to_char(p_finished AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '~')
        WHEN 'duration' THEN CASE WHEN p_started IS NULL THEN ''
            ELSE lpad(floor(extract(epoch FROM coalesce(p_finished, now()) - p_started) * 1000)::bigint::text, 15, '0') END
        WHEN 'status' THEN p_status
        WHEN 'workflow' THEN lower(coalesce(p_name, ''))
    END
$$;

COMMENT ON FUNCTION cryo._run_sort_key(p_order text, p_created timestamp with time zone, p_started timestamp with time zone, p_finished timestamp with time zone, p_status text, p_name text) IS 'Returns the text a run sorts by under a runs-list order (started, ended, duration, status, workflow; a leading - is ignored), compared bytewise; NULL for no order. Raises nothing.';

CREATE FUNCTION cryo._run_untrusted(p_run_id text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce((SELECT r.untrusted FROM cryo.runs r WHERE r.id = p_run_id), false)
$$;

CREATE FUNCTION cryo._secret_name_ok(p_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT coalesce(p_name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$', false)
       AND upper(p_name) NOT LIKE 'CRYO%'
       AND upper(p_name) NOT IN ('PATH', 'HOME', 'LANG', 'TERM', 'TZ', 'USER', 'LOGNAME',
                                 'SHELL', 'TMPDIR', 'PWD', 'IFS', 'ENV', 'BASH_ENV', 'PYTHONPATH')
       AND upper(p_name) NOT LIKE 'LD\_%' AND upper(p_name) NOT LIKE 'LC\_%'
$_$;

CREATE FUNCTION cryo._slug_ok(p_slug text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT coalesce(p_slug ~ '^[a-z0-9][a-z0-9-]{0,62}$', false)
$_$;

CREATE FUNCTION cryo._start_triggered(p_org text, p_project text, p_workflow text, p_input bytea, p_input_clear jsonb, p_scope jsonb, p_untrusted boolean, p_idempotency_key text, p_kind text, p_name text, p_depth integer DEFAULT NULL::integer) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_wf cryo.workflows := cryo._require_workflow(p_org, p_project, p_workflow);
    v_group text;
    v_id text;
    v_created boolean;
BEGIN
    IF coalesce(v_wf.graph ? 'if', false) THEN  -- a script workflow has no graph
        IF NOT cryo._truthy(cryo._eval(v_wf.graph -> 'if', p_scope)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF coalesce(v_wf.graph ? 'concurrency', false) THEN
        v_group := nullif(cryo._eval(v_wf.graph -> 'concurrency', p_scope) #>> '{}', '');
    END IF;
    SELECT s.run_id, s.created INTO v_id, v_created FROM cryo.submit_script(
        p_org, p_project, v_wf.filename, v_wf.interpreter, v_wf.source, p_input,
        p_idempotency_key, NULL, p_workflow, p_input_clear,
        v_group, NULL, coalesce(p_untrusted, false),
        -- An untrusted run gets no directory of the project's: it runs in scratch.
        p_workdir => CASE WHEN coalesce(p_untrusted, false) THEN NULL ELSE v_wf.workdir END,
        p_graph => v_wf.graph) s;
    IF v_created THEN
        UPDATE cryo.runs SET trigger_kind = p_kind, trigger_name = p_name, trigger_depth = p_depth
         WHERE id = v_id;
        PERFORM cryo._history(v_id, p_org, p_project, 'triggered', p_kind, p_name, 0);
    END IF;
    RETURN v_id;
END
$$;

CREATE FUNCTION cryo._state_delete(p_q cryo.queue, p_entity text, p_key text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_scope text := cryo.state_scope(p_q.org, p_q.project, p_q.run_id, p_entity);
BEGIN
    PERFORM cryo._state_key(p_key, true);
    UPDATE cryo.state_cells c
       SET value = NULL, version = c.version + 1, updated_by_run = p_q.run_id, updated_at = cryo.now()
     WHERE c.scope = v_scope AND c.key = p_key AND c.value IS NOT NULL
       AND c.tainted = cryo._run_untrusted(p_q.run_id);
    RETURN FOUND;
END
$$;

CREATE FUNCTION cryo._state_key(p_key text, p_write boolean) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF coalesce(p_key, '') = '' OR length(p_key) > 512 OR p_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'a state key must be 1 to 512 characters without control characters'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_write AND p_key LIKE '\_cryo/%' THEN
        RAISE EXCEPTION 'key % is reserved for the engine (keys under _cryo/ are read-only)', p_key
            USING ERRCODE = 'CR001';
    END IF;
END
$$;

CREATE FUNCTION cryo._state_memo(p_run_id text, p_path text) RETURNS cryo.journal
    LANGUAGE sql STABLE
    AS $$
    SELECT * FROM cryo.journal j WHERE j.run_id = p_run_id AND j.path = p_path
$$;

CREATE FUNCTION cryo._state_path(p_family text, p_name text, p_ordinal integer, p_path text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a durable call needs a path, a name and an ordinal >= 0' USING ERRCODE = 'CR004';
    END IF;
    RETURN cryo.call_path(p_family, p_name, p_ordinal, p_path);
END
$$;

CREATE TABLE cryo.state_cells (
    org text NOT NULL,
    project text NOT NULL,
    scope text NOT NULL,
    entity text,
    run_id text,
    key text NOT NULL,
    value bytea,
    version bigint NOT NULL,
    created_by_run text NOT NULL,
    updated_by_run text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    tainted boolean DEFAULT false NOT NULL,
    published boolean DEFAULT false NOT NULL,
    CONSTRAINT state_cells_check CHECK (((entity IS NULL) <> (run_id IS NULL))),
    CONSTRAINT state_cells_version_check CHECK ((version > 0))
);

COMMENT ON TABLE cryo.state_cells IS 'Durable state cells: (scope, key) -> sealed JSON value and a version counted in the clear. scope is the run id for run scope, or {org}:{project}:entity:{name} for entity scope. A NULL value marks a deleted cell; its row keeps the version so a cell re-created later never repeats a version a cas could have read.';

COMMENT ON COLUMN cryo.state_cells.value IS 'Sealed JSON (AES-GCM under the org data key); NULL once deleted.';

COMMENT ON COLUMN cryo.state_cells.version IS 'Counts every write and delete of the cell, starting at 1; never reused.';

COMMENT ON COLUMN cryo.state_cells.created_by_run IS 'The run that created (or re-created after a delete) the cell; an add by that run still holds it.';

COMMENT ON COLUMN cryo.state_cells.tainted IS 'Written by an untrusted run: the tainted namespace, which trusted runs read only when they ask for it (--tainted).';

COMMENT ON COLUMN cryo.state_cells.published IS 'A trusted cell its last set published (--public): untrusted runs may read it.';

CREATE FUNCTION cryo._state_read(p_scope text, p_key text, p_untrusted boolean, p_tainted boolean) RETURNS SETOF cryo.state_cells
    LANGUAGE sql STABLE
    AS $$
    SELECT DISTINCT ON (c.key) c.* FROM cryo.state_cells c
     WHERE c.scope = p_scope AND (p_key IS NULL OR c.key = p_key) AND c.value IS NOT NULL
       AND (c.run_id IS NOT NULL
            OR c.tainted = (coalesce(p_untrusted, false) OR coalesce(p_tainted, false))
            OR (p_untrusted AND c.published))
     ORDER BY c.key, c.tainted DESC
$$;

CREATE FUNCTION cryo._state_record(p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text, p_ordinal integer, p_exit_code integer, p_result bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._record(p_q, p_position, p_path, p_family, p_name, p_ordinal, p_result, NULL,
                         p_exit_code);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, replace(p_family, '.', '_'),
                          p_family, p_name, p_ordinal,
                          (SELECT r.attempt FROM cryo.runs r WHERE r.id = p_q.run_id));
END
$$;

CREATE FUNCTION cryo._state_set(p_q cryo.queue, p_entity text, p_key text, p_value bytea, p_public boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN (cryo._state_set_cells(p_q, ARRAY[p_entity], ARRAY[p_key], ARRAY[p_value], p_public))[1];
END
$$;

CREATE FUNCTION cryo._state_set_cells(p_q cryo.queue, p_entities text[], p_keys text[], p_values bytea[], p_public boolean DEFAULT false) RETURNS bigint[]
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_tainted boolean := cryo._run_untrusted(p_q.run_id);
    v_scopes text[] := '{}';
    v_versions bigint[];
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_keys), 0) LOOP
        v_scopes := v_scopes || cryo.state_scope(p_q.org, p_q.project, p_q.run_id, p_entities[i]);
        PERFORM cryo._state_key(p_keys[i], true);
        IF p_values[i] IS NULL THEN
            RAISE EXCEPTION 'a state value cannot be NULL (use state_delete)' USING ERRCODE = 'CR004';
        END IF;
    END LOOP;
    WITH cells AS (
        SELECT * FROM unnest(v_scopes, p_entities, p_keys, p_values)
                      WITH ORDINALITY AS u(scope, entity, key, value, i)
    ), written AS (
        INSERT INTO cryo.state_cells AS c (org, project, scope, entity, run_id, key, value,
                                           version, created_by_run, updated_by_run,
                                           created_at, updated_at, tainted, published)
        SELECT p_q.org, p_q.project, w.scope, w.entity,
               CASE WHEN w.entity IS NULL THEN p_q.run_id END, w.key, w.value, 1,
               p_q.run_id, p_q.run_id, v_now, v_now, v_tainted,
               coalesce(p_public, false) AND NOT v_tainted
          FROM cells w ORDER BY w.i
        ON CONFLICT (scope, key, tainted) DO UPDATE
           SET value = excluded.value, version = c.version + 1, published = excluded.published,
               updated_by_run = excluded.updated_by_run, updated_at = excluded.updated_at,
               created_by_run = CASE WHEN c.value IS NULL THEN excluded.created_by_run
                                     ELSE c.created_by_run END,
               created_at = CASE WHEN c.value IS NULL THEN excluded.created_at
                                 ELSE c.created_at END
        RETURNING c.scope, c.key, c.version
    )
    SELECT array_agg(w.version ORDER BY x.i) INTO v_versions
      FROM cells x JOIN written w ON w.scope = x.scope AND w.key = x.key;
    RETURN v_versions;
END
$$;

CREATE FUNCTION cryo._take_lease(p_org text, p_project text, p_group text, p_run_id text, p_kind text, p_path text, p_scoped boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_window double precision;
BEGIN
    DELETE FROM cryo.leases l
     WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
       AND l.holder_run_id <> p_run_id
       AND EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = l.holder_run_id AND cryo.is_terminal(r.status));
    INSERT INTO cryo.leases (org, project, grp, holder_run_id, kind, scoped, path, acquired_at)
    VALUES (p_org, p_project, p_group, p_run_id, p_kind, p_scoped, p_path, cryo.now())
    ON CONFLICT (org, project, grp, holder_run_id, (coalesce(path, ''))) DO UPDATE
       SET kind = excluded.kind, scoped = excluded.scoped, acquired_at = excluded.acquired_at;
    SELECT m.window_seconds INTO v_window FROM cryo.lease_limits m
     WHERE m.org = p_org AND m.project = p_project AND m.grp = p_group;
    IF v_window IS NOT NULL THEN
        DELETE FROM cryo.lease_starts s
         WHERE s.org = p_org AND s.project = p_project AND s.grp = p_group
           AND s.started_at <= cryo.now() - make_interval(secs => v_window);
        INSERT INTO cryo.lease_starts (org, project, grp, started_at)
        VALUES (p_org, p_project, p_group, cryo.now());
    END IF;
END
$$;

CREATE FUNCTION cryo._test_clock() RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    SELECT EXISTS (SELECT 1 FROM cryo.test_database)
$$;

CREATE FUNCTION cryo._time_out_run(p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs;
    v_child record;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF NOT FOUND OR cryo.is_terminal(v_run.status) THEN
        RETURN;
    END IF;
    FOR v_child IN SELECT c.id FROM cryo.runs c
                    WHERE c.parent_run_id = p_run_id AND NOT cryo.is_terminal(c.status) LOOP
        PERFORM cryo.cancel_run(v_child.id);
    END LOOP;
    IF v_run.kind = 'graph' THEN
        PERFORM cryo._graph_cancel_nodes(p_run_id, false);
    END IF;
    PERFORM cryo._finalize(p_run_id, 'failed', 124,
                           'timed out after ' || cryo._duration_text(v_run.timeout_s));
END
$$;

CREATE FUNCTION cryo._truthy(p_value jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN p_value IS NULL THEN false
                ELSE CASE jsonb_typeof(p_value)
                        WHEN 'null' THEN false
                        WHEN 'boolean' THEN p_value = 'true'::jsonb
                        WHEN 'number' THEN p_value <> '0'::jsonb
                        WHEN 'string' THEN p_value <> '""'::jsonb
                        ELSE true END END
$$;

CREATE FUNCTION cryo._unclaim(p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.queue q
       SET state = 'pending', claim_token = NULL, claim_agent_token = NULL,
           agent_id = NULL, claimed_at = NULL, claim_expires_at = NULL
     WHERE q.run_id = p_run_id AND q.state = 'claimed';
    IF FOUND THEN
        UPDATE cryo.runs r SET status = 'pending', attempt = greatest(r.attempt - 1, 0),
                               updated_at = cryo.now()
         WHERE r.id = p_run_id;
        PERFORM cryo._notify_requeued(1, ARRAY(SELECT r.id FROM cryo.runs r
                                                WHERE r.id = p_run_id AND r.watched));
    END IF;
END
$$;

CREATE FUNCTION cryo._uncollected(p_run_id text) RETURNS SETOF cryo.runs
    LANGUAGE sql STABLE
    AS $$
    SELECT c.* FROM cryo.runs c
     WHERE c.parent_run_id = p_run_id AND c.activity_name IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM cryo.journal j
                        WHERE j.run_id = p_run_id AND j.key_family = 'activity.collect'
                          AND j.status = 'done' AND j.ref_run_id = c.id)
$$;

CREATE FUNCTION cryo._wait_or_time_out(p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text, p_ordinal integer, p_timeout double precision, p_reason text) RETURNS TABLE(parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_timeout = 0 THEN
        PERFORM cryo._record(p_q, p_position, p_path, p_family, p_name, p_ordinal, NULL, NULL, 124);
        RETURN QUERY SELECT false, NULL::bytea, NULL::jsonb, true;
        RETURN;
    END IF;
    PERFORM cryo._park_on(p_q, p_position, p_path, p_family, p_name, p_ordinal, p_reason, p_name,
                          cryo.now() + make_interval(secs => p_timeout));
    RETURN QUERY SELECT true, NULL::bytea, NULL::jsonb, false;
END
$$;

CREATE FUNCTION cryo._wake(p_run_ids text[], p_kind text, p_result bytea DEFAULT NULL::bytea, p_answer_clear jsonb DEFAULT NULL::jsonb, p_exit_code integer DEFAULT 0) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer;
    v_watched text[];
    v_graphs integer;
BEGIN
    WITH due AS (
        SELECT q.run_id, q.park_path FROM cryo.queue q
         WHERE q.run_id = ANY (p_run_ids) AND q.state = 'parked'
         ORDER BY q.run_id
           FOR UPDATE
    ), memo AS (
        UPDATE cryo.journal j
           SET status = 'done', result = p_result, answer_clear = p_answer_clear,
               exit_code = p_exit_code, completed_at = cryo.now()
          FROM due WHERE j.run_id = due.run_id AND j.path = due.park_path AND j.status = 'pending'
        RETURNING j.run_id, j.key_family, j.key_name, j.key_ordinal
    ), requeued AS (
        UPDATE cryo.queue q
           SET state = 'pending', wake_at = NULL, park_reason = NULL, park_path = NULL,
               park_name = NULL, parked_at = NULL, enqueued_at = cryo.now()
          FROM due WHERE q.run_id = due.run_id
        RETURNING q.run_id, q.required_caps = '{graph}' AS graph
    ), runs_back AS (
        UPDATE cryo.runs r SET status = 'pending', substate = NULL, updated_at = cryo.now()
          FROM requeued WHERE r.id = requeued.run_id
        RETURNING r.id, r.org, r.project, r.watched, requeued.graph
    ), logged AS (
        INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                                  key_ordinal, created_at, woke)
        SELECT runs_back.id, runs_back.org, runs_back.project, p_kind,
               CASE WHEN memo.run_id IS NULL THEN NULL ELSE 'run' END, memo.key_family,
               memo.key_name, memo.key_ordinal, cryo.now(), true
          FROM runs_back LEFT JOIN memo ON memo.run_id = runs_back.id
    )
    SELECT count(*), array_agg(id) FILTER (WHERE watched), count(*) FILTER (WHERE graph)
      INTO v_n, v_watched, v_graphs FROM runs_back;
    PERFORM cryo._notify_requeued(v_n, v_watched, v_graphs);
    RETURN v_n;
END
$$;

CREATE FUNCTION cryo._wake_parent(p_child_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_child cryo.runs;
    v_q cryo.queue;
    v_marker cryo.journal;
    v_failed integer;
    v_got record;
BEGIN
    SELECT * INTO v_child FROM cryo.runs WHERE id = p_child_id;
    IF v_child.parent_run_id IS NULL THEN
        RETURN;
    END IF;
    IF v_child.graph_node IS NOT NULL THEN  -- it did a node of a graph run
        PERFORM cryo._graph_poke(v_child.parent_run_id, 'node_job_ended');
        RETURN;
    END IF;
    SELECT * INTO v_q FROM cryo.queue
     WHERE run_id = v_child.parent_run_id AND state = 'parked' AND park_reason = 'awaiting-children'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_marker FROM cryo.journal WHERE run_id = v_q.run_id AND path = v_q.park_path;
    IF v_marker.key_family = 'activity.collect' AND v_marker.ref_run_id = p_child_id THEN
        PERFORM cryo._wake(ARRAY[v_q.run_id], 'activity_completed', NULL, NULL,
                           cryo._outcome_code(v_child.status, v_child.exit_code));
    ELSIF v_marker.key_family IN ('graph.call', 'node.call') AND v_marker.ref_run_id = p_child_id THEN
        SELECT * INTO v_got FROM cryo._graph_call_memo(p_child_id);
        PERFORM cryo._wake(ARRAY[v_q.run_id], 'graph_call_completed', v_got.result, v_got.answer,
                           v_got.exit_code);
    ELSIF v_marker.key_family = 'activity.wait-all' AND NOT EXISTS (
            SELECT 1 FROM cryo._uncollected(v_q.run_id) c WHERE NOT cryo.is_terminal(c.status)) THEN
        SELECT count(*) FILTER (WHERE c.status <> 'succeeded') INTO v_failed
          FROM cryo._uncollected(v_q.run_id) c;
        PERFORM cryo._wake(ARRAY[v_q.run_id], 'activities_completed', NULL,
                           jsonb_build_object('failed', v_failed), 0);
    END IF;
END
$$;

CREATE FUNCTION cryo.abandon_log_move(p_run_id text, p_attempt_id text, p_object_key text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_object_key IS NOT NULL THEN
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
    END IF;
    UPDATE cryo.log_moves m SET lease_expires_at = least(m.lease_expires_at, cryo.now()),
                                object_key = NULL
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now();
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n > 0;
END
$$;

COMMENT ON FUNCTION cryo.abandon_log_move(p_run_id text, p_attempt_id text, p_object_key text) IS 'Ends attempt p_attempt_id''s lease on run p_run_id''s log move now (when it still holds it; the row stays, counting the run''s attempts, until the log moves) and queues p_object_key, if given, for deletion from the store; returns whether the lease was ended. Raises nothing.';

CREATE FUNCTION cryo.acquire_lease(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_group text, p_scoped boolean, p_path text DEFAULT NULL::text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue;
    v_path text;
BEGIN
    PERFORM cryo._check_name('lease group', p_group);
    v_path := cryo.call_path('lock', p_group, p_ordinal, p_path);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id;
    IF FOUND THEN
        -- The group lock comes before the row lock, the order every hand-over takes.
        PERFORM cryo._lock_group(v_q.org, v_q.project, p_group);
    END IF;
    v_q := cryo._claimed_row(p_run_id, p_token);
    IF (cryo._done_memo(p_run_id, v_path)).path IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = v_q.org AND l.project = v_q.project
                  AND l.grp = p_group AND l.holder_run_id = p_run_id) THEN
        RAISE EXCEPTION 'run % already holds the lease on %', p_run_id, p_group USING ERRCODE = 'CR031';
    END IF;
    IF NOT cryo._group_full(v_q.org, v_q.project, p_group) THEN
        PERFORM cryo._take_lease(v_q.org, v_q.project, p_group, p_run_id, 'script', v_path, p_scoped);
        PERFORM cryo._record(v_q, p_position, v_path, 'lock', p_group, p_ordinal, NULL,
                             jsonb_build_object('group', p_group), 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_granted', 'lock', p_group, p_ordinal);
        RETURN true;
    END IF;
    PERFORM cryo._queue_for_lease(v_q.org, v_q.project, p_group, p_run_id, 'script', v_path, p_scoped);
    PERFORM cryo._park_on(v_q, p_position, v_path, 'lock', p_group, p_ordinal, 'awaiting-lease',
                          p_group, NULL);
    RETURN false;
END
$$;

COMMENT ON FUNCTION cryo.acquire_lease(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_group text, p_scoped boolean, p_path text) IS 'Takes the project lease on a concurrency group for the claimed run: true when granted (or already recorded at this path), false when the run parked in the group''s FIFO. Raises CR002 for a stale claim, CR031 when the run already holds the group, CR004 for a bad name or identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.annotate_run(p_run_id text, p_token uuid, p_text bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'annotation', p_payload => p_text);
END
$$;

COMMENT ON FUNCTION cryo.annotate_run(p_run_id text, p_token uuid, p_text bytea) IS 'Appends a sealed annotation to the claimed run''s history. Returns nothing. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.append_log(p_run_id text, p_token uuid, p_data bytea, p_claim_seconds double precision) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_cancel boolean := cryo.renew_claim(p_run_id, p_token, p_claim_seconds);
BEGIN
    IF p_data IS NOT NULL AND length(p_data) > 0 THEN
        INSERT INTO cryo.logs (run_id, org, project, attempt, data, created_at)
        SELECT r.id, r.org, r.project, r.attempt, p_data, cryo.now()
          FROM cryo.runs r WHERE r.id = p_run_id;
        PERFORM cryo._notify_run(p_run_id);
    END IF;
    RETURN v_cancel;
END
$$;

COMMENT ON FUNCTION cryo.append_log(p_run_id text, p_token uuid, p_data bytea, p_claim_seconds double precision) IS 'Appends a sealed log chunk (none when empty) and renews the claim; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.append_log_at(p_run_id text, p_token uuid, p_offset bigint, p_length bigint, p_data bytea, p_claim_seconds double precision) RETURNS TABLE(cancel boolean, log_end bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_end bigint;
BEGIN
    cancel := cryo.renew_claim(p_run_id, p_token, p_claim_seconds);
    v_end := cryo._log_take(p_run_id, p_token, p_offset, p_length);
    IF v_end = p_offset AND p_length > 0 THEN
        INSERT INTO cryo.logs (run_id, org, project, attempt, data, created_at)
        SELECT r.id, r.org, r.project, r.attempt, p_data, cryo.now()
          FROM cryo.runs r WHERE r.id = p_run_id;
        PERFORM cryo._notify_run(p_run_id);
        log_end := v_end + p_length;
    ELSE
        log_end := v_end;
    END IF;
    RETURN NEXT;
END
$$;

COMMENT ON FUNCTION cryo.append_log_at(p_run_id text, p_token uuid, p_offset bigint, p_length bigint, p_data bytea, p_claim_seconds double precision) IS 'Appends a sealed log chunk of p_length plain bytes whose first byte is at p_offset of the pass''s log, only when p_offset is the stored end (bytes already stored are acknowledged and not stored again), and renews the claim; returns the cancel flag and the stored end after the call (short of p_offset + p_length: the chunk overlapped the stored end and its new tail was not stored). Raises CR002 for a stale claim token, CR004 for a missing or negative offset or length, CR160 for an offset past the stored end (the message names it).';

CREATE FUNCTION cryo.approve_node(p_run_id text, p_node text, p_answer bytea, p_by text, p_auth text DEFAULT NULL::text, p_item integer DEFAULT NULL::integer) RETURNS jsonb
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs := cryo._approvable(p_run_id);
    v_got record;
BEGIN
    SELECT * INTO v_got FROM cryo._approval_record(v_run, p_node, p_by, p_auth, 'approved', p_item);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_got.approvals < v_got.needed THEN
        PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'node_approval_given', 'node',
                              p_node, 0, p_payload => p_answer);
        RETURN jsonb_build_object('approvals', v_got.approvals, 'needed', v_got.needed,
                                  'approved', false);
    END IF;
    PERFORM cryo._instance_answer(p_run_id, p_node, p_answer, p_by, p_item);
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'node_approved', 'node', p_node, 0,
                          p_payload => p_answer);
    -- The wake says why in history under its own kind: node_approved is written once.
    PERFORM cryo._graph_poke(p_run_id, 'approval_received');
    RETURN jsonb_build_object('approvals', v_got.approvals, 'needed', v_got.needed,
                              'approved', true);
END
$$;

COMMENT ON FUNCTION cryo.approve_node(p_run_id text, p_node text, p_answer bytea, p_by text, p_auth text, p_item integer) IS 'Records p_by''s approval (a sealed answer) of a waiting approval node of a graph run (of its item p_item alone when given, else of every waiting item), as signed in with token or session p_auth; once the node''s approvers (default 1) different members approved, gives the node the last answer and wakes the run. Returns {approvals, needed, approved}, or NULL when that node (or item) is not waiting for an approval. Raises CR003 for an unknown run, CR006 for a finished one, CR225 when p_by answered it already, CR226 when p_by lacks the node''s role or group.';

CREATE FUNCTION cryo.archive_run_log(p_run_id text, p_attempt_id text, p_object_key text, p_bytes bigint, p_object_bytes bigint, p_sha256 bytea) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs%ROWTYPE;
    v_move cryo.log_moves%ROWTYPE;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id FOR KEY SHARE;
    IF NOT FOUND THEN
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
        RETURN false;
    END IF;
    IF v_run.finished_at IS NULL THEN
        RAISE EXCEPTION 'run % has not finished; its log stays in the database', p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    IF p_object_bytes IS NULL OR p_object_bytes < 1 OR p_bytes IS NULL OR p_bytes < 0
       OR length(p_sha256) IS DISTINCT FROM 32 THEN
        RAISE EXCEPTION 'a moved log is recorded with its size and SHA-256 as verified'
            USING ERRCODE = 'CR004';
    END IF;
    SELECT * INTO v_move FROM cryo.log_moves m WHERE m.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR v_move.attempt_id <> p_attempt_id
       OR v_move.lease_expires_at <= cryo.now() THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    IF v_move.object_key <> p_object_key THEN
        RAISE EXCEPTION 'attempt % writes %, not %', p_attempt_id, v_move.object_key,
            p_object_key USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.log_moves m WHERE m.run_id = p_run_id;
    INSERT INTO cryo.log_archives (run_id, org, project, object_key, last_chunk_id, bytes,
                                   archived_at, attempt_id, object_bytes, sha256, attempts)
    VALUES (p_run_id, v_run.org, v_run.project, p_object_key, v_move.last_chunk_id, p_bytes,
            cryo.now(), p_attempt_id, p_object_bytes, p_sha256, v_move.attempts)
    ON CONFLICT (run_id) DO NOTHING;
    IF NOT FOUND THEN  -- moved before (claims skip moved logs; an archive from psql)
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
        RETURN false;
    END IF;
    DELETE FROM cryo.logs WHERE run_id = p_run_id AND id <= v_move.last_chunk_id;
    RETURN true;
END
$$;

COMMENT ON FUNCTION cryo.archive_run_log(p_run_id text, p_attempt_id text, p_object_key text, p_bytes bigint, p_object_bytes bigint, p_sha256 bytea) IS 'Records a finished run''s log as moved by attempt p_attempt_id to p_object_key (p_bytes of log, an object of p_object_bytes with SHA-256 p_sha256, as verified) up to the chunk its lease covers, deletes those chunks from cryo.logs and ends the lease; returns false when the run is gone or was moved before (the key is queued for deletion). Raises CR100 when that attempt does not hold a live lease, CR004 for a run not finished, a key not the attempt''s or a size or hash missing.';

CREATE FUNCTION cryo.artifact_scope(p_org text, p_project text, p_run_id text, p_key text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF p_key IS NOT NULL THEN
        PERFORM cryo._check_name('cache key', p_key);
        RETURN p_org || ':' || p_project || ':key:' || p_key;
    END IF;
    IF NOT cryo._run_in_project(p_run_id, p_org, p_project) THEN
        RAISE EXCEPTION 'an artifact belongs to a run of project %/% or to a cache key',
            p_org, p_project USING ERRCODE = 'CR004';
    END IF;
    RETURN p_run_id;
END
$$;

COMMENT ON FUNCTION cryo.artifact_scope(p_org text, p_project text, p_run_id text, p_key text) IS 'Returns the scope an artifact name lives in: {org}:{project}:key:{key} with a cache key, else the run id. Raises CR004 for a bad key or a run of another project.';

CREATE FUNCTION cryo.artifact_usage(p_org text, p_project text) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN (SELECT coalesce(sum(b.size), 0)::bigint FROM cryo.artifact_blobs b
             WHERE b.org = p_org AND b.project = p_project
               AND EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256));
END
$$;

COMMENT ON FUNCTION cryo.artifact_usage(p_org text, p_project text) IS 'Returns the bytes of a project''s artifacts, each distinct blob (SHA-256) counted once. Raises CR021 for an application role of another tenant.';

CREATE FUNCTION cryo.authenticate_token(p_secret_hash bytea) RETURNS TABLE(token_id text, kind text, org text, capabilities text[], member text, role text)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY
        SELECT t.id, t.kind, t.org, t.capabilities, m.login, m.role
          FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
         WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL
           AND (t.expires_at IS NULL OR t.expires_at > cryo.now());
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown, revoked or expired token' USING ERRCODE = 'CR008';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.authenticate_token(p_secret_hash bytea) IS 'Returns the live token whose secret hashes to the argument, with its member login and role (NULL for agents). Raises CR008 when none is live.';

CREATE FUNCTION cryo.authorize_user(p_secret_hash bytea, p_org text, p_project text, p_need text) RETURNS TABLE(token_id text, member text, role text)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_tok record;
BEGIN
    SELECT t.id, t.kind, t.org, m.login, m.role INTO v_tok
      FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
     WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL
       AND (t.expires_at IS NULL OR t.expires_at > cryo.now());
    IF NOT FOUND THEN
        -- A session of somebody signed in through the OIDC issuer acts like a user token.
        SELECT s.id, 'user' AS kind, s.org, m.login, m.role INTO v_tok
          FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
         WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL
           AND s.expires_at > cryo.now();
    END IF;
    IF NOT FOUND OR v_tok.kind <> 'user' OR v_tok.role IS NULL THEN
        RAISE EXCEPTION 'unknown, revoked or expired user token' USING ERRCODE = 'CR008';
    END IF;
    IF v_tok.org IS DISTINCT FROM p_org
       OR (p_project IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = p_org AND p.slug = p_project)) THEN
        RAISE EXCEPTION 'no project %/%', p_org, coalesce(p_project, '') USING ERRCODE = 'CR005';
    END IF;
    IF cryo._role_rank(v_tok.role) < cryo._role_rank(p_need) OR cryo._role_rank(p_need) = 0 THEN
        RAISE EXCEPTION 'role % of % cannot do this (needs %)', v_tok.role, v_tok.login, p_need
            USING ERRCODE = 'CR020';
    END IF;
    RETURN QUERY SELECT v_tok.id, v_tok.login, v_tok.role;
END
$$;

COMMENT ON FUNCTION cryo.authorize_user(p_secret_hash bytea, p_org text, p_project text, p_need text) IS 'Authorizes a user request on org/project (project NULL for org-level routes) needing role p_need (viewer, member, admin, owner), made with a user token or a signed-in session (cryo.sessions); returns the token or session id, member login and role. Raises CR008 for a secret that is neither a live user token nor a live session, CR005 when the org is not the token''s or the project does not exist, CR020 when the role is too low.';

CREATE FUNCTION cryo.begin_cli_sign_in(p_nonce_hash bytea, p_org text, p_ttl_seconds double precision DEFAULT 600) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_expires timestamptz;
BEGIN
    IF p_nonce_hash IS NULL OR length(p_nonce_hash) <> 32 THEN
        RAISE EXCEPTION 'a CLI sign-in needs the SHA-256 of its nonce' USING ERRCODE = 'CR004';
    END IF;
    IF NOT cryo._slug_ok(p_org) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_org
            USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 1 AND 3600 THEN
        RAISE EXCEPTION 'a sign-in lasts 1 to 3600 seconds, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.oidc_cli_nonces WHERE expires_at <= v_now;
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    INSERT INTO cryo.oidc_cli_nonces (nonce_hash, org, created_at, expires_at)
    VALUES (p_nonce_hash, p_org, v_now, v_expires);
    RETURN v_expires;
END
$$;

COMMENT ON FUNCTION cryo.begin_cli_sign_in(p_nonce_hash bytea, p_org text, p_ttl_seconds double precision) IS 'Records a nonce (by its SHA-256) handed to a CLI sign-in of org p_org, for p_ttl_seconds; deletes expired ones; returns when it expires. Raises CR004 for a hash that is not 32 bytes, a malformed org or a bad lifetime.';

CREATE FUNCTION cryo.begin_oidc_login(p_id_hash bytea, p_state text, p_nonce text, p_code_verifier text, p_org text, p_ttl_seconds double precision DEFAULT 600) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_expires timestamptz;
BEGIN
    IF coalesce(length(p_state), 0) < 16 OR coalesce(length(p_nonce), 0) < 16
       OR coalesce(length(p_code_verifier), 0) < 43 OR p_id_hash IS NULL THEN
        RAISE EXCEPTION 'a sign-in needs an id, a state and nonce of 16+ characters and a PKCE verifier of 43+'
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT cryo._slug_ok(p_org) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_org
            USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 1 AND 3600 THEN
        RAISE EXCEPTION 'a sign-in lasts 1 to 3600 seconds, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.oidc_logins WHERE expires_at <= v_now;
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    INSERT INTO cryo.oidc_logins (id_hash, state, nonce, code_verifier, org, created_at, expires_at)
    VALUES (p_id_hash, p_state, p_nonce, p_code_verifier, p_org, v_now, v_expires);
    RETURN v_expires;
END
$$;

COMMENT ON FUNCTION cryo.begin_oidc_login(p_id_hash bytea, p_state text, p_nonce text, p_code_verifier text, p_org text, p_ttl_seconds double precision) IS 'Records a browser sign-in sent to the issuer (state, nonce, PKCE verifier, org) under the hash of the browser''s id for it, for p_ttl_seconds; deletes expired ones; returns when it expires. Raises CR004 for a short state, nonce or verifier, a malformed org or a bad lifetime.';

CREATE FUNCTION cryo.bind_app_role(p_role text, p_org text, p_project text DEFAULT NULL::text, p_create boolean DEFAULT false, p_login boolean DEFAULT true) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_owner text := (SELECT pg_get_userbyid(n.nspowner) FROM pg_namespace n WHERE n.nspname = 'cryo');
    v_created boolean := false;
BEGIN
    IF p_role IS NULL OR p_role !~ '^[A-Za-z_][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'a role name is 1 to 63 letters, digits, _ . - (starting with a letter or _)'
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', coalesce(p_org, '') USING ERRCODE = 'CR005';
    END IF;
    IF p_project IS NOT NULL THEN
        PERFORM cryo._require_project(p_org, p_project);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cryo_app') THEN
        RAISE EXCEPTION 'role cryo_app does not exist (migrate as a role with CREATEROLE)'
            USING ERRCODE = 'CR005';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        IF NOT p_create THEN
            RAISE EXCEPTION 'no database role %', p_role USING ERRCODE = 'CR005';
        END IF;
        EXECUTE format('CREATE ROLE %I %s', p_role, CASE WHEN p_login THEN 'LOGIN' ELSE 'NOLOGIN' END);
        v_created := true;
    END IF;
    IF p_role IN ('cryo_app', 'cryo_dba') OR pg_has_role(p_role, v_owner, 'MEMBER') THEN
        RAISE EXCEPTION 'role % is one of the engine''s own (it can act as the owner %); bind an application''s own role',
            p_role, v_owner USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
                   JOIN pg_roles r ON r.oid = m.member
                    WHERE a.rolname = 'cryo_app' AND r.rolname = p_role) THEN
        EXECUTE format('GRANT cryo_app TO %I', p_role);
    END IF;
    INSERT INTO cryo.app_roles AS b (role, org, project, created_at)
    VALUES (p_role, p_org, p_project, pg_catalog.now())
    ON CONFLICT (role) DO UPDATE SET org = excluded.org, project = excluded.project,
                                     created_at = excluded.created_at;
    RETURN v_created;
END
$_$;

COMMENT ON FUNCTION cryo.bind_app_role(p_role text, p_org text, p_project text, p_create boolean, p_login boolean) IS 'Grants cryo_app to a database role and binds it to an org and one of its projects (p_project NULL: all of them), replacing an earlier binding; with p_create a missing role is created first (LOGIN unless p_login is false, no password). Returns true when the role was created here. Raises CR004 for a bad role name or an engine role (the owner, one that can become it, a superuser, cryo_app, cryo_dba), CR005 for an unknown org, project or role (or no cryo_app); permission denied when the caller may not create roles or grant cryo_app.';

CREATE FUNCTION cryo.call_graph(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_workflow text, p_filename text, p_source bytea, p_input bytea, p_graph jsonb, p_path text DEFAULT NULL::text) RETURNS TABLE(parked boolean, child_run_id text, status text, exit_code integer, output bytea, error text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text;
    v_memo cryo.journal;
    v_child text;
    v_got record;
BEGIN
    IF p_family IS NULL OR p_family NOT IN ('graph.call', 'node.call') THEN
        RAISE EXCEPTION 'a graph call''s family is graph.call or node.call, not %', coalesce(p_family, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    v_memo := cryo._replay(p_run_id, p_family, p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.ref_run_id, v_memo.answer_clear ->> 'status',
                            v_memo.exit_code, v_memo.result, v_memo.answer_clear ->> 'error';
        RETURN;
    END IF;
    -- A marker an earlier pass left names the child it submitted: never a second one.
    SELECT j.ref_run_id INTO v_child FROM cryo.journal j
     WHERE j.run_id = p_run_id AND j.path = v_path AND j.status = 'pending';
    IF v_child IS NULL THEN
        IF p_graph IS NULL OR p_source IS NULL THEN
            RAISE EXCEPTION 'a graph call needs a compiled graph and its sealed document'
                USING ERRCODE = 'CR004';
        END IF;
        SELECT s.run_id INTO v_child FROM cryo.submit_script(
            v_q.org, v_q.project, coalesce(p_filename, 'graph.json'), NULL, p_source, p_input,
            NULL, '{graph}', p_workflow, p_parent_run_id => p_run_id, p_graph => p_graph) s;
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'graph_called', p_family, p_name,
                              p_ordinal);
    END IF;
    PERFORM cryo._park_on(v_q, p_position, v_path, p_family, p_name, p_ordinal,
                          'awaiting-children', p_name, NULL, v_child);
    IF EXISTS (SELECT 1 FROM cryo.runs c WHERE c.id = v_child AND cryo.is_terminal(c.status)) THEN
        -- Only reachable from a marker whose child has ended: wake at once, answered.
        SELECT * INTO v_got FROM cryo._graph_call_memo(v_child);
        PERFORM cryo._wake(ARRAY[p_run_id], 'graph_call_completed', v_got.result, v_got.answer,
                           v_got.exit_code);
    END IF;
    RETURN QUERY SELECT true, v_child, NULL::text, NULL::integer, NULL::bytea, NULL::text;
END
$$;

COMMENT ON FUNCTION cryo.call_graph(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_workflow text, p_filename text, p_source bytea, p_input bytea, p_graph jsonb, p_path text) IS 'A durable call of the claimed run that runs a graph (family graph.call: a stored graph named p_name; node.call: one node of type p_name) as its child and waits for it. The first reach submits the child graph run (p_graph the compiled structure, p_source its sealed document, p_input its sealed input), marks the call and parks the caller until the child ends; returns (parked true, child id, ...). A recorded call returns (false, child id, status, exit code, sealed output as {"answer": v} or NULL when the child did not succeed, error). Raises CR002 for a stale claim, CR004 for a bad family, identity or missing graph, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.call_path(p_family text, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    v_path text;
BEGIN
    IF coalesce(p_family, '') = '' OR p_name IS NULL OR p_ordinal IS NULL OR p_ordinal < 0 THEN
        RAISE EXCEPTION 'a durable call needs a family, a name and an ordinal >= 0'
            USING ERRCODE = 'CR004';
    END IF;
    v_path := p_family || '/' || replace(replace(p_name, '%', '%25'), '/', '%2F') || '/' || p_ordinal;
    IF p_path IS NOT NULL AND p_path <> v_path THEN
        RAISE EXCEPTION 'path % is not the path of %/%/% (%)', p_path, p_family, p_name, p_ordinal, v_path
            USING ERRCODE = 'CR009';
    END IF;
    RETURN v_path;
END
$$;

COMMENT ON FUNCTION cryo.call_path(p_family text, p_name text, p_ordinal integer, p_path text) IS 'Returns the journal path of a durable call (family/name/ordinal, name escaped), checking p_path against it when given. Raises CR004 for a missing family or name or a negative ordinal, CR009 when p_path disagrees.';

CREATE FUNCTION cryo.cancel_run(p_run_id text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
DECLARE
    v_run cryo.runs;
    v_child record;
BEGIN
    PERFORM cryo._app_run_check(p_run_id);
    v_run := cryo._run_row(p_run_id, true, true);
    -- Children go first, so a parent collecting them is not woken only to be cancelled.
    FOR v_child IN
        SELECT c.id FROM cryo.runs c
         WHERE c.parent_run_id = p_run_id AND NOT cryo.is_terminal(c.status)
    LOOP
        PERFORM cryo.cancel_run(v_child.id);
    END LOOP;
    IF v_run.status = 'running' THEN
        UPDATE cryo.runs SET cancel_requested = true, updated_at = cryo.now() WHERE id = p_run_id;
        PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'cancel_requested');
        PERFORM cryo._notify_run(p_run_id);
        RETURN 'cancelling';
    END IF;
    PERFORM cryo._finalize(p_run_id, 'cancelled', NULL, 'cancelled');
    RETURN 'cancelled';
END
$$;

COMMENT ON FUNCTION cryo.cancel_run(p_run_id text) IS 'Cancels a run and its unfinished children; returns ''cancelled'' when it ended at once or ''cancelling'' when its agent must stop it. Raises CR003 for an unknown run, CR006 for a finished one, CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.check_claim(p_run_id text, p_token uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
END
$$;

COMMENT ON FUNCTION cryo.check_claim(p_run_id text, p_token uuid) IS 'Returns nothing when the token is the run''s live claim (and locks its queue row for the transaction). Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.claim_grants(p_org text, p_agent_ids text[], p_capabilities text[], p_claim_seconds double precision, p_agent_tokens text[] DEFAULT NULL::text[]) RETURNS TABLE(agent_id text, agent_token text, run_id text, claim_token uuid, attempt integer, filename text, interpreter text, source bytea, input bytea, input_clear jsonb, workdir text, journal jsonb, secrets jsonb, untrusted boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_c record;
BEGIN
    IF coalesce(cardinality(p_agent_ids), 0) NOT BETWEEN 1 AND 1000
       OR array_position(p_agent_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'claim_grants takes between 1 and 1000 agent ids, none NULL'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_agent_tokens IS NOT NULL AND (cardinality(p_agent_tokens) <> cardinality(p_agent_ids)
                                       OR array_position(p_agent_tokens, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'claim_grants takes one agent token per agent id, none NULL'
            USING ERRCODE = 'CR004';
    END IF;
    -- The extras are read by statements of their own, after the claim: _claim's own
    -- statements may take a run committed after this call began, which a statement
    -- begun before them would not see (no memos, no secrets, trust unknown).
    FOR v_c IN SELECT * FROM cryo._claim(p_org, NULL, p_capabilities, p_claim_seconds,
                                           cardinality(p_agent_ids), p_agent_ids,
                                           p_agent_tokens) LOOP
        agent_id := v_c.agent_id; agent_token := v_c.agent_token; run_id := v_c.run_id;
        claim_token := v_c.claim_token; attempt := v_c.attempt; filename := v_c.filename;
        interpreter := v_c.interpreter; source := v_c.source; input := v_c.input;
        input_clear := v_c.input_clear; workdir := v_c.workdir;
        SELECT x.journal, x.secrets, x.untrusted INTO journal, secrets, untrusted
          FROM cryo._grant_extras(v_c.run_id) x;
        untrusted := coalesce(untrusted, true);  -- never unknown: then confined
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION cryo.claim_grants(p_org text, p_agent_ids text[], p_capabilities text[], p_claim_seconds double precision, p_agent_tokens text[]) IS 'Claims one pending run of the org (whose required capabilities are among p_capabilities) for each listed agent, oldest first, each claim bound to the agent token listed beside its agent (p_agent_tokens; unbound when NULL); returns per claim the agent and agent token it went to, the run, its new token as handed out, pinned source and input, and as jsonb arrays its memos (seq, path, family, name, ordinal, status, result base64, exit_code, answer_clear, ref_run_id) and the secrets it may see (name, value base64 or null, withheld), and whether the run is untrusted (its agent must confine it). Fewer rows than agents when fewer runs are pending. Raises CR004 for an empty, NULL-holding or over-1000 agent list, or agent tokens not one per agent.';

CREATE FUNCTION cryo.claim_job(p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision) RETURNS TABLE(run_id text, claim_token uuid, attempt integer, filename text, interpreter text, source bytea, input bytea, input_clear jsonb, workdir text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY SELECT c.run_id, c.claim_token, c.attempt, c.filename, c.interpreter, c.source,
                        c.input, c.input_clear, c.workdir
                   FROM cryo._claim(p_org, p_agent_id, p_capabilities, p_claim_seconds, 1) c;
END
$$;

COMMENT ON FUNCTION cryo.claim_job(p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision) IS 'Claims the oldest pending run of the org whose required capabilities the agent has; returns the run, a new claim token, the pinned source and the directory it was submitted from, or no row when nothing is pending. Raises nothing of its own.';

CREATE FUNCTION cryo.claim_jobs(p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision, p_limit integer) RETURNS TABLE(run_id text, claim_token uuid, attempt integer, filename text, interpreter text, source bytea, input bytea, input_clear jsonb, workdir text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'a batch claim takes between 1 and 1000 jobs, not %', p_limit
            USING ERRCODE = 'CR004';
    END IF;
    RETURN QUERY SELECT c.run_id, c.claim_token, c.attempt, c.filename, c.interpreter, c.source,
                        c.input, c.input_clear, c.workdir
                   FROM cryo._claim(p_org, p_agent_id, p_capabilities, p_claim_seconds, p_limit) c;
END
$$;

COMMENT ON FUNCTION cryo.claim_jobs(p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision, p_limit integer) IS 'Claims up to p_limit of the org''s oldest pending runs whose required capabilities the agent has; returns one row per claimed run with its own new claim token and pinned source (no rows when nothing is pending). Raises CR004 for a limit outside 1..1000.';

CREATE FUNCTION cryo.claim_log_moves(p_holder text, p_prefix text, p_older_than interval, p_lease interval, p_limit integer) RETURNS TABLE(run_id text, org text, project text, attempt_id text, object_key text, last_chunk_id bigint, bytes bigint, attempts integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_run record;
    v_old cryo.log_moves%ROWTYPE;
    v_last bigint;
    v_bytes bigint;
    v_attempt text;
    v_key text;
    v_attempts integer;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'a log move needs a positive lease and limit' USING ERRCODE = 'CR004';
    END IF;
    FOR v_run IN
        WITH RECURSIVE hot(run_id) AS (
            (SELECT l.run_id FROM cryo.logs l ORDER BY l.run_id LIMIT 1)
            UNION ALL
            SELECT (SELECT l.run_id FROM cryo.logs l WHERE l.run_id > h.run_id
                     ORDER BY l.run_id LIMIT 1)
              FROM hot h WHERE h.run_id IS NOT NULL
        )
        SELECT r.id, r.org, r.project
          FROM hot h JOIN cryo.runs r ON r.id = h.run_id
         WHERE r.finished_at <= v_now - p_older_than
           AND NOT EXISTS (SELECT 1 FROM cryo.log_moves m
                            WHERE m.run_id = r.id AND m.lease_expires_at > v_now)
           AND NOT EXISTS (SELECT 1 FROM cryo.log_archives a WHERE a.run_id = r.id)
         ORDER BY r.finished_at, r.id
         LIMIT p_limit
           FOR NO KEY UPDATE OF r SKIP LOCKED
    LOOP
        SELECT max(l.id), sum(length(l.data))::bigint INTO v_last, v_bytes
          FROM cryo.logs l WHERE l.run_id = v_run.id;
        CONTINUE WHEN v_last IS NULL;
        v_attempt := replace(gen_random_uuid()::text, '-', '');
        v_key := p_prefix || v_run.org || '/' || v_run.project || '/'
                 || substr(v_run.id, length(v_run.org) + length(v_run.project) + 3)
                 || '/' || v_attempt;
        SELECT * INTO v_old FROM cryo.log_moves m WHERE m.run_id = v_run.id FOR UPDATE;
        IF FOUND THEN
            CONTINUE WHEN v_old.lease_expires_at > v_now;  -- claimed since our snapshot
            IF v_old.object_key IS NOT NULL THEN  -- lapsed, not given back
                INSERT INTO cryo.log_objects_to_delete (object_key, queued_at, not_before)
                VALUES (v_old.object_key, v_now, v_now + p_lease);
            END IF;
            v_attempts := v_old.attempts + 1;
            UPDATE cryo.log_moves m
               SET attempt_id = v_attempt, holder = p_holder, object_key = v_key,
                   last_chunk_id = v_last, attempts = v_attempts, claimed_at = v_now,
                   lease_expires_at = v_now + p_lease
             WHERE m.run_id = v_run.id;
        ELSE
            v_attempts := 1;
            INSERT INTO cryo.log_moves AS m (run_id, org, project, attempt_id, holder,
                                             object_key, last_chunk_id, attempts,
                                             claimed_at, lease_expires_at)
            VALUES (v_run.id, v_run.org, v_run.project, v_attempt, p_holder, v_key, v_last,
                    1, v_now, v_now + p_lease)
            ON CONFLICT ON CONSTRAINT log_moves_pkey DO NOTHING;
            CONTINUE WHEN NOT FOUND;  -- another replica's claim committed meanwhile
        END IF;
        run_id := v_run.id;
        org := v_run.org;
        project := v_run.project;
        attempt_id := v_attempt;
        object_key := v_key;
        last_chunk_id := v_last;
        bytes := v_bytes;
        attempts := v_attempts;
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION cryo.claim_log_moves(p_holder text, p_prefix text, p_older_than interval, p_lease interval, p_limit integer) IS 'Leases up to p_limit finished runs'' logs (ended at least p_older_than ago, chunks in cryo.logs, not moved, no live lease) to holder p_holder for p_lease: run, org, project, attempt id, the object key only this attempt writes (under p_prefix), the last chunk id and sealed bytes it covers, and the run''s attempt count. A lapsed lease taken over queues its attempt''s key for deletion. Raises CR004 for a lease or limit not positive.';

CREATE FUNCTION cryo.claim_schedules(p_limit integer DEFAULT 100) RETURNS TABLE(org text, project text, name text, workflow text, cron text, timezone text, every_seconds double precision, input bytea, next_fire_at timestamp with time zone, now timestamp with time zone)
    LANGUAGE sql
    AS $$
    SELECT s.org, s.project, s.name, s.workflow, s.cron, s.timezone, s.every_seconds, s.input,
           s.next_fire_at, cryo.now()
      FROM cryo.schedules s
     WHERE NOT s.paused AND (s.next_fire_at IS NULL OR s.next_fire_at <= cryo.now())
     ORDER BY s.next_fire_at NULLS FIRST
     LIMIT p_limit
       FOR UPDATE SKIP LOCKED
$$;

COMMENT ON FUNCTION cryo.claim_schedules(p_limit integer) IS 'Locks and returns up to p_limit unpaused schedules whose next tick is due or not yet planned, with the engine time; call fire_schedule or plan_schedule for each in the same transaction. Raises nothing.';

CREATE FUNCTION cryo.claim_secrets(p_run_id text, p_token uuid) RETURNS TABLE(name text, value bytea, withheld boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_untrusted boolean := (SELECT r.untrusted FROM cryo.runs r WHERE r.id = p_run_id);
BEGIN
    RETURN QUERY SELECT * FROM cryo._grant_run_secrets(p_run_id, v_q.org, v_q.project, v_untrusted);
END
$$;

COMMENT ON FUNCTION cryo.claim_secrets(p_run_id text, p_token uuid) IS 'Returns the secrets the claimed run may see: sealed values of its project, or names only (withheld) for an untrusted run. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.collect_activity(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text, p_path text DEFAULT NULL::text) RETURNS TABLE(parked boolean, child_run_id text, exit_code integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'activity.collect', p_name, p_ordinal, p_path);
    v_path text := v_memo.path;
    v_child cryo.runs;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.ref_run_id, v_memo.exit_code;
        RETURN;
    END IF;
    SELECT * INTO v_child FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no activity % was submitted in run %', p_name, p_run_id USING ERRCODE = 'CR005';
    END IF;
    IF cryo.is_terminal(v_child.status) THEN
        PERFORM cryo._record(v_q, p_position, v_path, 'activity.collect', p_name, p_ordinal, NULL, NULL,
                             cryo._outcome_code(v_child.status, v_child.exit_code), v_child.id);
        -- collected at once (the activity had already ended): say so, as a wake would
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activity_completed',
                              'activity.collect', p_name, p_ordinal);
        RETURN QUERY SELECT false, v_child.id, cryo._outcome_code(v_child.status, v_child.exit_code);
        RETURN;
    END IF;
    PERFORM cryo._park_on(v_q, p_position, v_path, 'activity.collect', p_name, p_ordinal,
                          'awaiting-children', p_name, NULL, v_child.id);
    RETURN QUERY SELECT true, v_child.id, NULL::integer;
END
$$;

COMMENT ON FUNCTION cryo.collect_activity(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text, p_path text) IS 'Returns (parked false, child, exit code) for a finished activity of the claimed run, or parks the run until it finishes (parked true). Raises CR002 for a stale claim, CR005 when no activity has the name, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.collect_artifacts(p_cached interval, p_grace interval, p_batch integer DEFAULT 1000) RETURNS TABLE(org text, project text, sha256 text)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    IF p_cached <= interval '0' OR p_grace < interval '0' THEN
        RAISE EXCEPTION 'retention must be a positive interval' USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.artifacts a WHERE (a.scope, a.name, a.tainted) IN (
        SELECT c.scope, c.name, c.tainted FROM cryo.artifacts c
         WHERE c.cache_key IS NOT NULL AND c.created_at < cryo.now() - p_cached
         ORDER BY c.created_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED);
    RETURN QUERY
    DELETE FROM cryo.artifact_blobs b WHERE (b.org, b.project, b.sha256) IN (
        SELECT o.org, o.project, o.sha256 FROM cryo.artifact_blobs o
         WHERE o.touched_at < cryo.now() - p_grace
           AND NOT EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = o.org AND a.project = o.project AND a.sha256 = o.sha256)
         ORDER BY o.touched_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED)
    RETURNING b.org, b.project, b.sha256;
END
$$;

COMMENT ON FUNCTION cryo.collect_artifacts(p_cached interval, p_grace interval, p_batch integer) IS 'Deletes cached artifacts put more than p_cached ago, then the blobs no artifact points at that nobody touched within p_grace, at most p_batch of each; returns the removed blobs (org, project, sha256), whose bytes the caller deletes. Raises CR004 for a non-positive retention.';

CREATE FUNCTION cryo.connection_for_run(p_run_id text, p_name text) RETURNS TABLE(name text, base_url text, auth text, secret text, username text, header text, headers jsonb, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_c record;
BEGIN
    SELECT * INTO v_c FROM cryo.get_connection(v_org, v_project, p_name);
    IF v_c.auth <> 'none' AND cryo._run_untrusted(p_run_id) THEN
        RAISE EXCEPTION 'connection %''s credential (secret %) is withheld from an untrusted run',
            p_name, v_c.secret USING ERRCODE = 'CR208';
    END IF;
    PERFORM cryo._connection_secret_check(v_org, v_project, p_name, v_c.secret);
    RETURN QUERY SELECT v_c.name, v_c.base_url, v_c.auth, v_c.secret, v_c.username, v_c.header,
                        v_c.headers, v_c.created_at, v_c.updated_at;
END
$$;

COMMENT ON FUNCTION cryo.connection_for_run(p_run_id text, p_name text) IS 'Returns the connection a connector node of run p_run_id names, from the run''s project. Raises CR206 when there is none, CR207 when its secret is gone, CR208 when the run is untrusted and the connection has a credential.';

CREATE FUNCTION cryo.count_runs(p_org text, p_project text, p_search boolean, p_text text DEFAULT NULL::text, p_status text DEFAULT NULL::text, p_workflow text DEFAULT NULL::text, p_match text DEFAULT NULL::text, p_trigger text DEFAULT NULL::text, p_since timestamp with time zone DEFAULT NULL::timestamp with time zone, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_parent text DEFAULT NULL::text, p_input_hash bytea DEFAULT NULL::bytea) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    WITH pat AS (
        SELECT '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS t,
               '%' || replace(replace(replace(p_match, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS w
    )
    SELECT count(*) FROM pat, cryo.runs r
     WHERE r.org = p_org AND r.project = p_project
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) = p_workflow)
       AND (p_search OR CASE WHEN p_parent IS NULL THEN r.parent_run_id IS NULL
                             ELSE r.parent_run_id = p_parent END)
       AND (p_match IS NULL OR coalesce(r.workflow, r.filename) ILIKE pat.w)
       AND (p_trigger IS NULL OR CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                                      ELSE coalesce(r.trigger_kind, 'manual') END = p_trigger)
       AND (p_since IS NULL OR r.created_at >= p_since)
       AND (p_until IS NULL OR r.created_at < p_until)
       AND (p_text IS NULL OR r.id ILIKE pat.t OR coalesce(r.workflow, r.filename) ILIKE pat.t
            OR r.input_clear::text ILIKE pat.t
            OR (p_input_hash IS NOT NULL AND p_input_hash = ANY (r.input_hashes))
            OR EXISTS (SELECT 1 FROM cryo.journal j WHERE j.run_id = r.id AND j.label ILIKE pat.t))
$$;

COMMENT ON FUNCTION cryo.count_runs(p_org text, p_project text, p_search boolean, p_text text, p_status text, p_workflow text, p_match text, p_trigger text, p_since timestamp with time zone, p_until timestamp with time zone, p_parent text, p_input_hash bytea) IS 'Returns how many runs of the project match the runs list''s filters: with p_search those of cryo.search_runs (children included; p_input_hash as there), else those of cryo.list_runs_page (top-level runs or p_parent''s children, status, exact workflow). Raises nothing.';

CREATE FUNCTION cryo.create_connection(p_org text, p_project text, p_name text, p_base_url text, p_auth text, p_secret text DEFAULT NULL::text, p_username text DEFAULT NULL::text, p_header text DEFAULT NULL::text, p_headers jsonb DEFAULT '{}'::jsonb, p_replace boolean DEFAULT false) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_created boolean;
BEGIN
    PERFORM cryo._connection_check(p_name, p_base_url, p_auth, p_secret, p_username,
                                   p_header, coalesce(p_headers, '{}'));
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._connection_secret_check(p_org, p_project, p_name, p_secret);
    INSERT INTO cryo.connections AS c (org, project, name, base_url, auth, secret, username,
                                       header, headers, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_base_url, p_auth, p_secret, p_username, p_header,
            coalesce(p_headers, '{}'), v_now, v_now)
    ON CONFLICT (org, project, name) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT p_replace THEN
        RAISE EXCEPTION 'connection % already exists in %/% (replace it, or delete it first)',
            p_name, p_org, p_project USING ERRCODE = 'CR205';
    END IF;
    UPDATE cryo.connections c
       SET base_url = p_base_url, auth = p_auth, secret = p_secret, username = p_username,
           header = p_header, headers = coalesce(p_headers, '{}'), updated_at = v_now
     WHERE c.org = p_org AND c.project = p_project AND c.name = p_name;
    RETURN false;
END
$$;

COMMENT ON FUNCTION cryo.create_connection(p_org text, p_project text, p_name text, p_base_url text, p_auth text, p_secret text, p_username text, p_header text, p_headers jsonb, p_replace boolean) IS 'Stores a connection of a project (base URL, auth scheme none/bearer/basic/header, the name of the project secret holding its credential, a basic user name or the header name, default headers); with p_replace an existing one is replaced. Returns true when it was new. Raises CR004 for a malformed field, CR005 for an unknown project, CR205 when it exists and p_replace is false, CR207 when the project has no secret of that name.';

CREATE FUNCTION cryo.create_handler(p_org text, p_project text, p_name text, p_event text, p_workflow text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('handler', p_name);
    PERFORM cryo._check_name('event', p_event);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    INSERT INTO cryo.event_handlers (org, project, name, event, workflow, created_at)
    VALUES (p_org, p_project, p_name, p_event, p_workflow, cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'handler % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.create_handler(p_org text, p_project text, p_name text, p_event text, p_workflow text) IS 'Creates an event handler: each event p_event published on the project bus starts one run of p_workflow. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad or taken name or a bad event name.';

CREATE FUNCTION cryo.create_schedule(p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text, p_every_seconds double precision, p_input bytea, p_next_fire_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('schedule', p_name);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    IF (p_cron IS NULL) = (p_every_seconds IS NULL) THEN
        RAISE EXCEPTION 'a schedule needs either a cron expression or an interval' USING ERRCODE = 'CR004';
    END IF;
    IF p_every_seconds IS NOT NULL AND NOT (p_every_seconds >= 1 AND p_every_seconds < 'infinity') THEN
        RAISE EXCEPTION 'a schedule''s interval must be at least 1 second' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.schedules (org, project, name, workflow, cron, timezone, every_seconds, input,
                                next_fire_at, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_workflow, p_cron, coalesce(p_timezone, 'UTC'),
            p_every_seconds, p_input, p_next_fire_at, cryo.now(), cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.create_schedule(p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text, p_every_seconds double precision, p_input bytea, p_next_fire_at timestamp with time zone) IS 'Creates a schedule that starts a stored workflow on a cron expression (in p_timezone) or every p_every_seconds, first at p_next_fire_at (the server computes it; NULL: on the scheduler''s next round); p_input is sealed. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad name, both or neither of cron and interval, an interval under 1 s, or a name already taken.';

CREATE FUNCTION cryo.create_token(p_kind text, p_org text, p_name text, p_secret_hash bytea, p_capabilities text[] DEFAULT '{}'::text[], p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_member text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_id text := 'tok-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    v_member text;
    v_caps text[] := coalesce(p_capabilities, '{}');
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('user', 'agent') THEN
        RAISE EXCEPTION 'token kind must be user or agent, not %', p_kind USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    IF p_kind = 'user' THEN
        SELECT m.id INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = p_member;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'a user token needs a member of org %; no member %', p_org, p_member
                USING ERRCODE = 'CR005';
        END IF;
        v_caps := '{}';
    ELSE
        IF cardinality(v_caps) = 0 THEN
            v_caps := '{shell,polyglot}';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(v_caps) c WHERE c IS NULL OR c !~ '^[a-z][a-z0-9_-]{0,31}$') THEN
            RAISE EXCEPTION 'capabilities must be short lower-case names' USING ERRCODE = 'CR004';
        END IF;
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= cryo.now() THEN
        RAISE EXCEPTION 'a token cannot expire in the past (%)', p_expires_at USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.tokens (id, kind, org, name, secret_hash, capabilities, expires_at, member_id)
    VALUES (v_id, p_kind, p_org, coalesce(p_name, ''), p_secret_hash, v_caps, p_expires_at, v_member);
    RETURN v_id;
END
$_$;

COMMENT ON FUNCTION cryo.create_token(p_kind text, p_org text, p_name text, p_secret_hash bytea, p_capabilities text[], p_expires_at timestamp with time zone, p_member text) IS 'Creates a user token (for the member whose login is p_member) or an agent token (with a capability ceiling, default shell+polyglot) from the hash of its secret; returns the token id. Raises CR004 for a bad kind, capability or expiry, CR005 for an unknown org or member.';

CREATE FUNCTION cryo.create_webhook(p_org text, p_project text, p_name text, p_workflow text, p_secret bytea, p_status_url text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('webhook', p_name);
    IF p_workflow IS NOT NULL THEN
        PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    END IF;
    IF p_secret IS NULL THEN
        RAISE EXCEPTION 'a webhook needs a signing secret' USING ERRCODE = 'CR004';
    END IF;
    IF p_status_url IS NOT NULL AND p_workflow IS NULL THEN
        RAISE EXCEPTION 'a commit status URL needs a workflow whose run it reports' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.webhooks (org, project, name, workflow, secret, status_url, created_at)
    VALUES (p_org, p_project, p_name, p_workflow, p_secret, p_status_url, cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.create_webhook(p_org text, p_project text, p_name text, p_workflow text, p_secret bytea, p_status_url text) IS 'Creates a webhook with its sealed signing secret; with p_workflow a delivery starts that workflow, without one it is published as event webhook.<event>; p_status_url receives the run''s outcome. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad or taken name, a missing secret, or a status URL without a workflow.';

CREATE FUNCTION cryo.delete_connection(p_org text, p_project text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.connections c
     WHERE c.org = p_org AND c.project = p_project AND c.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no connection % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR206';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.delete_connection(p_org text, p_project text, p_name text) IS 'Deletes a connection (its secret stays). A connector node started later that names it fails. Raises CR206 when there is none of that name.';

CREATE FUNCTION cryo.delete_handler(p_org text, p_project text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.event_handlers WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.delete_handler(p_org text, p_project text, p_name text) IS 'Deletes an event handler (runs it started stay). Returns nothing. Raises CR005 for an unknown handler.';

CREATE FUNCTION cryo.delete_project(p_org text, p_project text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.delete_project(p_org text, p_project text) IS 'Deletes a project with all its runs (live ones included), journals, logs (moved ones queued for the movers to delete), cells of both scopes, cached node outputs, events, leases, secrets and workflows, in one transaction; returns how many runs went. Raises CR005 for an unknown project.';

CREATE FUNCTION cryo.delete_role_map(p_org text, p_claim text, p_value text) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH gone AS (DELETE FROM cryo.oidc_role_maps
                   WHERE org = p_org AND claim = p_claim AND value = p_value RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

COMMENT ON FUNCTION cryo.delete_role_map(p_org text, p_claim text, p_value text) IS 'Deletes one entry of the org''s claim map; returns false when there was none. Raises nothing.';

CREATE FUNCTION cryo.delete_schedule(p_org text, p_project text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.schedules WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.delete_schedule(p_org text, p_project text, p_name text) IS 'Deletes a schedule (runs it started stay). Returns nothing. Raises CR005 for an unknown schedule.';

CREATE FUNCTION cryo.delete_secret(p_org text, p_project text, p_name text) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH gone AS (DELETE FROM cryo.secrets
                   WHERE org = p_org AND project = p_project AND name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;

COMMENT ON FUNCTION cryo.delete_secret(p_org text, p_project text, p_name text) IS 'Deletes a secret; returns false when there was none. Raises nothing.';

CREATE FUNCTION cryo.delete_webhook(p_org text, p_project text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM cryo.webhooks WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.delete_webhook(p_org text, p_project text, p_name text) IS 'Deletes a webhook and its delivery records (runs it started stay). Returns nothing. Raises CR005 for an unknown webhook.';

CREATE FUNCTION cryo.delete_workflow(p_org text, p_project text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_users text;
BEGIN
    PERFORM 1 FROM cryo.workflows
      WHERE org = p_org AND project = p_project AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    SELECT string_agg(what, ', ' ORDER BY what) INTO v_users FROM (
        SELECT 'schedule ' || s.name AS what FROM cryo.schedules s
         WHERE s.org = p_org AND s.project = p_project AND s.workflow = p_name
           AND s.source_workflow IS DISTINCT FROM p_name
        UNION ALL
        SELECT 'handler ' || h.name FROM cryo.event_handlers h
         WHERE h.org = p_org AND h.project = p_project AND h.workflow = p_name
           AND h.source_workflow IS DISTINCT FROM p_name
        UNION ALL
        SELECT 'webhook ' || k.name FROM cryo.webhooks k
         WHERE k.org = p_org AND k.project = p_project AND k.workflow = p_name) u;
    IF v_users IS NOT NULL THEN
        RAISE EXCEPTION 'workflow % is started by %; delete those first', p_name, v_users
            USING ERRCODE = 'CR055';
    END IF;
    -- Its own schedules and handlers go by the foreign keys' ON DELETE CASCADE.
    DELETE FROM cryo.workflows WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;

COMMENT ON FUNCTION cryo.delete_workflow(p_org text, p_project text, p_name text) IS 'Deletes a stored workflow with the schedules and handlers its on: registered. Returns nothing. Raises CR005 for an unknown workflow, CR055 when a schedule, handler or webhook made separately still starts it.';

CREATE FUNCTION cryo.deliver_webhook(p_org text, p_project text, p_name text, p_body_hash bytea, p_event text, p_trigger jsonb, p_input bytea, p_payload bytea, p_untrusted boolean, p_refused text DEFAULT NULL::text) RETURNS TABLE(outcome text, run_id text, event_id bigint, duplicate boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_hook cryo.webhooks;
    v_id bigint;
    v_route record;
BEGIN
    SELECT * INTO v_hook FROM cryo.webhooks w
     WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook %/%/%', p_org, p_project, p_name USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_name('webhook event', p_event);
    -- A concurrent redelivery waits here for the first one to commit, then finds it.
    INSERT INTO cryo.webhook_deliveries (org, project, webhook, body_hash, event, input,
                                         untrusted, created_at)
    VALUES (p_org, p_project, p_name, p_body_hash, p_event, p_input,
            coalesce(p_untrusted, false), cryo.now())
    ON CONFLICT DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN QUERY SELECT d.outcome, d.run_id, d.event_id, true FROM cryo.webhook_deliveries d
                      WHERE d.org = p_org AND d.project = p_project AND d.webhook = p_name
                        AND d.body_hash = p_body_hash AND d.redelivery_of IS NULL;
        RETURN;
    END IF;
    v_route := cryo._route_delivery(v_hook, p_event, p_trigger, p_input, p_payload, p_untrusted,
                                    p_refused);
    UPDATE cryo.webhook_deliveries d
       SET outcome = v_route.outcome, run_id = v_route.run_id, event_id = v_route.event_id
     WHERE d.org = p_org AND d.project = p_project AND d.id = v_id;
    RETURN QUERY SELECT v_route.outcome, v_route.run_id, v_route.event_id, false;
END
$$;

COMMENT ON FUNCTION cryo.deliver_webhook(p_org text, p_project text, p_name text, p_body_hash bytea, p_event text, p_trigger jsonb, p_input bytea, p_payload bytea, p_untrusted boolean, p_refused text) IS 'Records a signed delivery (by its body hash, with its sealed input) and, in the same transaction, starts the webhook''s workflow (unless the webhook is paused, its if is false, its on.webhook leaves the event out, or p_refused says why its input failed the workflow''s input_schema) or, for a webhook without a workflow, publishes webhook.<event> on the bus; returns (outcome started | skipped | ignored | refused | published | paused, run_id, event_id, duplicate), a redelivery of the same body answering what the first did. Raises CR005 for an unknown webhook or a workflow gone, CR004 for a bad event name.';

CREATE FUNCTION cryo.drain_agents(p_org text, p_build text DEFAULT NULL::text, p_agent_id text DEFAULT NULL::text) RETURNS integer
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_ids text[];
    v_note text;
BEGIN
    IF p_build IS NULL AND p_agent_id IS NULL THEN
        RAISE EXCEPTION 'name a build or an agent to drain' USING ERRCODE = 'CR004';
    END IF;
    WITH marked AS (
        UPDATE cryo.agents a SET drain_requested_at = cryo.now()
         WHERE a.org = p_org AND a.drain_requested_at IS NULL
           AND (p_build IS NULL OR a.build = p_build)
           AND (p_agent_id IS NULL OR a.id = p_agent_id
                OR (left(a.id, length(p_agent_id) + 1) = p_agent_id || '-'
                    AND substr(a.id, length(p_agent_id) + 2) ~ '^[0-9]+$'))
        RETURNING a.id)
    SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM marked;
    IF cardinality(v_ids) > 0 THEN
        -- Every replica hears it at commit and refuses these agents at once, so a claim
        -- held open on another replica is not granted one last run. The ids ride along
        -- when they fit a notification (8000 bytes); else replicas re-read every mark.
        v_note := json_build_object('org', p_org, 'ids', v_ids)::text;
        IF octet_length(v_note) > 7000 THEN
            v_note := json_build_object('org', p_org)::text;
        END IF;
        PERFORM pg_notify('cryo_drain', v_note);
    END IF;
    RETURN cardinality(v_ids);
END
$_$;

COMMENT ON FUNCTION cryo.drain_agents(p_org text, p_build text, p_agent_id text) IS 'Marks the org''s agents of build p_build and/or id p_agent_id (or p_agent_id-N) as draining and notifies cryo_drain (JSON: org, and ids when they fit); returns how many were newly marked. Raises CR004 when neither is given.';

CREATE FUNCTION cryo.draining_agents() RETURNS TABLE(org text, id text)
    LANGUAGE sql STABLE
    AS $$
    SELECT a.org, a.id FROM cryo.agents a WHERE a.drain_requested_at IS NOT NULL
$$;

COMMENT ON FUNCTION cryo.draining_agents() IS 'Returns (org, id) of every agent asked to drain. Raises nothing.';

CREATE FUNCTION cryo.drive_graphs(p_driver text, p_limit integer DEFAULT 1, p_documents boolean DEFAULT true) RETURNS TABLE(run_id text, claim_token uuid, org text, project text, source bytea, input bytea, input_clear jsonb, graph jsonb, more boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_ids text[];
    v_tokens uuid[];
    v_more boolean;
BEGIN
    -- Two statements, not one join: _drive's queries see runs committed after this
    -- statement's snapshot was taken, and a join under the older snapshot would drop a
    -- just-submitted run while its claim still committed (a run held by no driver).
    SELECT array_agg(d.run_id), array_agg(d.claim_token) INTO v_ids, v_tokens
      FROM cryo._drive(p_driver, p_limit) d;
    -- Whether others still wait: the driver wakes another at once (the turns go on side
    -- by side) and looks again after its own, without asking in a round trip of its own.
    v_more := v_ids IS NOT NULL AND cryo.graph_runs_waiting();
    -- Without p_documents the document and structure stay in the table: a driver that
    -- kept them from an earlier turn would otherwise take both across on every turn, a
    -- cost that grows with the graph (about 1 ms a turn at 400 nodes, 10 at 5,000).
    RETURN QUERY
        SELECT d.run_id, d.claim_token, r.org, r.project,
               CASE WHEN p_documents THEN r.source END, r.input, r.input_clear,
               CASE WHEN p_documents THEN r.graph END, v_more
          FROM unnest(v_ids, v_tokens) AS d(run_id, claim_token)
          -- A probe by key per run taken (OFFSET 0: as a plain join, a young table's
          -- generic plan hashed a scan of every run in it).
          CROSS JOIN LATERAL (SELECT * FROM cryo.runs x WHERE x.id = d.run_id OFFSET 0) r;
END
$$;

COMMENT ON FUNCTION cryo.drive_graphs(p_driver text, p_limit integer, p_documents boolean) IS 'Takes up to p_limit graph runs needing a step forward, for a server driver, with a claim token each; returns each run''s input and, unless p_documents is false (a driver that keeps documents reads them with cryo.read_graph when it has not), its sealed document and clear structure, and (more) whether other graph runs were still pending once these were taken. Settle each with graph_settle in the same transaction. Raises nothing of its own.';

CREATE FUNCTION cryo.emit_from_run(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text, p_payload bytea, p_path text DEFAULT NULL::text, p_public boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'emit', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_id bigint;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN (v_memo.answer_clear ->> 'event_id')::bigint;
    END IF;
    v_id := cryo._publish_event(v_q.org, v_q.project, p_name, p_payload, NULL, p_run_id,
                                p_public => p_public);
    PERFORM cryo._record(v_q, p_position, v_path, 'emit', '', p_ordinal, NULL,
                         jsonb_build_object('event_id', v_id, 'name', p_name), 0);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'event_emitted', 'emit', '', p_ordinal);
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION cryo.emit_from_run(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text, p_payload bytea, p_path text, p_public boolean) IS 'Publishes an event from the claimed run and records that it did; a repeat at the same path returns the first event id. An untrusted run''s event is tainted (trusted runs hear it only when they opt in); a trusted run''s p_public lets untrusted runs hear it too. Raises CR002 for a stale claim, CR004 for a bad name or identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.end_session(p_secret_hash bytea) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH ended AS (UPDATE cryo.sessions s SET revoked_at = cryo.now()
                    WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM ended)
$$;

COMMENT ON FUNCTION cryo.end_session(p_secret_hash bytea) IS 'Revokes the session whose secret hashes to the argument; returns false when there was no live one. Raises nothing.';

CREATE FUNCTION cryo.ensure_member(p_org text, p_login text, p_role text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_id text;
BEGIN
    SELECT id INTO v_id FROM cryo.members WHERE org = p_org AND login = p_login;
    IF FOUND THEN
        RETURN v_id;
    END IF;
    RETURN cryo.put_member(p_org, p_login, p_role, NULL);
END
$$;

COMMENT ON FUNCTION cryo.ensure_member(p_org text, p_login text, p_role text) IS 'Returns the id of member p_login, creating it with p_role when missing. Raises what put_member raises.';

CREATE FUNCTION cryo.ensure_org(p_slug text, p_name text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT cryo._slug_ok(p_slug) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_slug
            USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.orgs (slug, name) VALUES (p_slug, coalesce(nullif(p_name, ''), p_slug))
    ON CONFLICT (slug) DO NOTHING;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION cryo.ensure_org(p_slug text, p_name text) IS 'Creates the org if missing; returns true when created. Raises CR004 for a malformed slug.';

CREATE FUNCTION cryo.ensure_project(p_org text, p_slug text, p_name text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT cryo._slug_ok(p_slug) THEN
        RAISE EXCEPTION 'project slug % must be lower-case letters, digits and - (up to 63)', p_slug
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.projects (org, slug, name)
    VALUES (p_org, p_slug, coalesce(nullif(p_name, ''), p_slug))
    ON CONFLICT (org, slug) DO NOTHING;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION cryo.ensure_project(p_org text, p_slug text, p_name text) IS 'Creates the project in the org if missing; returns true when created. Raises CR004 for a malformed slug, CR005 for an unknown org.';

CREATE FUNCTION cryo.error_codes() RETURNS TABLE(code text, name text, meaning text)
    LANGUAGE sql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    VALUES
        ('CR001', 'reserved_key', 'the key belongs to the engine and cannot be written'),
        ('CR002', 'stale_claim', 'the claim token is not the live claim of that run'),
        ('CR003', 'run_not_found', 'no run with that id'),
        ('CR004', 'invalid_argument', 'an argument is malformed or out of range'),
        ('CR005', 'not_found', 'the named org, project, workflow, member, token or activity does not exist'),
        ('CR006', 'run_finished', 'the run already reached a terminal status'),
        ('CR007', 'duplicate_call', 'that durable call (or activity name) is already recorded for the run'),
        ('CR008', 'unauthorized', 'the token is unknown, revoked or expired'),
        ('CR009', 'identity_mismatch', 'a durable call''s path disagrees with its family, name and ordinal'),
        ('CR020', 'forbidden', 'the member''s role does not allow this'),
        ('CR021', 'tenant_denied', 'the database role is not bound to that org and project (or to no tenant at all)'),
        ('CR030', 'queue_full', 'the concurrency group''s queue holds its limit of runs'),
        ('CR031', 'lease_held', 'the run already holds the lease on that concurrency group'),
        ('CR040', 'not_a_member', 'the person who signed in is not a member of that org, and no claim of theirs maps to a role'),
        ('CR041', 'sign_in_expired', 'no sign-in of this browser matches: unknown, expired, already used, or a forged state'),
        ('CR150', 'sign_in_refused', 'an ID token traded before, a nonce this server did not hand a CLI sign-in (or used), or no CLI session to renew'),
        ('CR055', 'in_use', 'a schedule, handler or webhook still starts the workflow being deleted'),
        ('CR075', 'artifact_quota', 'a new artifact would take its project past CRYOPG_ARTIFACTS_MAX_BYTES'),
        ('CR170', 'artifact_unverified', 'an untrusted run named a blob by its digest without uploading the bytes through the server, which checks them'),
        ('CR100', 'log_move_lost', 'the log mover''s attempt no longer holds the lease on that run''s log (it lapsed and another replica took it over, or the run was collected)'),
        ('CR160', 'log_gap', 'a log chunk does not start at the end of the pass''s stored log (a gap, or at a finish a partial repeat); the message names the stored end'),
        ('CR205', 'connection_exists', 'a connection of that name already exists in the project'),
        ('CR206', 'connection_not_found', 'the project has no connection of that name'),
        ('CR207', 'connection_secret_missing', 'the connection names a project secret the project does not have'),
        ('CR208', 'connection_withheld', 'an untrusted run named a connection that carries a credential'),
        ('CR190', 'bad_traceparent', 'a trace context given for a run is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)'),
        ('CR230', 'bad_fold_batch', 'cryo.fold_metrics was given a batch size below 1'),
        ('CR225', 'approval_answered', 'that member already answered this approval: each approver counts once'),
        ('CR226', 'not_an_approver', 'the member lacks the role or group the approval is restricted to'),
        ('CR227', 'input_refused', 'the input does not match the workflow''s input_schema'),
        ('CR228', 'bad_concurrency_limit', 'a concurrency limit below 1 or a window not longer than 0'),
        ('CR240', 'workflow_changed', 'a workflow was saved over a version other than its current one: it changed since the editor opened it'),
        ('CR241', 'not_redeliverable', 'a webhook delivery stored before deliveries kept their input cannot be delivered again'),
        ('CR242', 'trigger_owned', 'a schedule or handler registered by a workflow''s on: is changed by putting that workflow again'),
        ('CR215', 'run_timed_out', 'the run passed its deadline and was failed with exit code 124; its agent stops the job'),
        ('CR190', 'bad_traceparent', 'a trace context given for a run is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)'),
        ('CR210', 'fan_out_too_large', 'a graph''s fan_out has more items than the deployment allows (CRYOPG_GRAPH_FAN_OUT_MAX)'),
        ('CR231', 'bad_queue_recount', 'cryo.fold_metrics was given a NULL or negative queue recount interval'),
        ('CR236', 'bad_run_order', 'the runs search was given an order other than started, ended, duration, status or workflow (with an optional leading - for descending)'),
        ('CR237', 'bad_input_digests', 'a run''s input digests for the search were more than 256, or not 32-byte SHA-256 digests')
$$;

COMMENT ON FUNCTION cryo.error_codes() IS 'Returns every SQLSTATE the engine raises (class CR) with its name and meaning. Raises nothing.';

CREATE FUNCTION cryo.eval_expression(p_expr jsonb, p_scope jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT cryo._eval(p_expr, p_scope)
$$;

COMMENT ON FUNCTION cryo.eval_expression(p_expr jsonb, p_scope jsonb) IS 'Returns the value of a compiled graph expression over a scope (a missing path is null). Raises nothing.';

CREATE FUNCTION cryo.find_artifact(p_org text, p_project text, p_scope text, p_name text, p_tainted boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone, cache_key text, created_by_run text, tainted boolean, published boolean, executable boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo.artifacts a
                  WHERE a.scope = p_scope AND a.name = p_name
                    AND a.org = p_org AND a.project = p_project
                    AND (a.run_id IS NOT NULL OR a.tainted = coalesce(p_tainted, false));
END
$$;

COMMENT ON FUNCTION cryo.find_artifact(p_org text, p_project text, p_scope text, p_name text, p_tainted boolean) IS 'Returns the artifact p_name of scope p_scope in the project (of a cache key, the trusted one, or with p_tainted the one untrusted runs put), with its trust flags; no row when there is none. Raises CR021 for an application role of another tenant.';

CREATE FUNCTION cryo.find_artifact_blob(p_org text, p_project text, p_sha256 text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    SELECT b.size FROM cryo.artifact_blobs b
     WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
       AND EXISTS (SELECT 1 FROM cryo.artifacts a
                    WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256)
$$;

COMMENT ON FUNCTION cryo.find_artifact_blob(p_org text, p_project text, p_sha256 text) IS 'Returns the size of the project''s blob with that SHA-256 when a name points at it, else NULL. Raises nothing.';

CREATE FUNCTION cryo.find_run_artifact(p_run_id text, p_token uuid, p_run text, p_key text, p_name text, p_tainted boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone, cache_key text, created_by_run text, tainted boolean, published boolean, executable boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo._run_artifacts(
                        p_run_id, cryo.artifact_scope(cryo._run_org(p_run_id),
                                                      cryo._run_project(p_run_id),
                                                      coalesce(p_run, p_run_id), p_key),
                        p_name, p_tainted) a;
END
$$;

COMMENT ON FUNCTION cryo.find_run_artifact(p_run_id text, p_token uuid, p_run text, p_key text, p_name text, p_tainted boolean) IS 'Returns the artifact p_name the claimed run may read -- its own, run p_run''s, or with p_key the cached one: a trusted run reads trusted ones (with p_tainted those untrusted runs put), an untrusted run tainted ones and, where it has none, published trusted ones; no row when there is none it may read. Raises CR002 for a stale claim token, CR004 for a bad key or a run of another project.';

CREATE FUNCTION cryo.find_run_artifact_blob(p_run_id text, p_token uuid, p_sha256 text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN (SELECT b.size FROM cryo.artifact_blobs b
             WHERE b.org = cryo._run_org(p_run_id) AND b.project = cryo._run_project(p_run_id)
               AND b.sha256 = p_sha256
               AND EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256
                              AND (NOT cryo._run_untrusted(p_run_id) OR a.tainted
                                   OR a.published)));
END
$$;

COMMENT ON FUNCTION cryo.find_run_artifact_blob(p_run_id text, p_token uuid, p_sha256 text) IS 'Returns the size of the project''s blob with that SHA-256 when an artifact the claimed run may read names it (for a trusted run, a tainted one too: it fetches those only by a name it asked for with --tainted), else NULL. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.finish_and_claim_grants(p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[], p_errors text[], p_logs bytea[], p_org text, p_ask_agent_ids text[], p_capabilities text[], p_claim_seconds double precision, p_ask_agent_tokens text[] DEFAULT NULL::text[], p_log_offsets bigint[] DEFAULT NULL::bigint[], p_log_lengths bigint[] DEFAULT NULL::bigint[]) RETURNS TABLE(finished_run_id text, finished boolean, agent_id text, agent_token text, run_id text, claim_token uuid, attempt integer, filename text, interpreter text, source bytea, input bytea, input_clear jsonb, workdir text, journal jsonb, secrets jsonb, untrusted boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_done text[] := '{}';
    v_agents text[];
    v_tokens text[];
    v_f record;
BEGIN
    IF coalesce(cardinality(p_ask_agent_ids), 0) <> coalesce(cardinality(p_run_ids), 0)
       OR (p_ask_agent_tokens IS NOT NULL
           AND cardinality(p_ask_agent_tokens) <> cardinality(p_run_ids)) THEN
        RAISE EXCEPTION 'finish_and_claim_grants needs one ask (or NULL) per run'
            USING ERRCODE = 'CR004';
    END IF;
    FOR v_f IN SELECT * FROM cryo.finish_runs(p_run_ids, p_tokens, p_outcomes, p_exit_codes,
                                              p_errors, p_logs, p_log_offsets,
                                              p_log_lengths) LOOP
        RETURN QUERY SELECT v_f.run_id, v_f.finished, NULL::text, NULL::text, NULL::text,
                            NULL::uuid, NULL::integer, NULL::text, NULL::text, NULL::bytea,
                            NULL::bytea, NULL::jsonb, NULL::text, NULL::jsonb, NULL::jsonb,
                            NULL::boolean;
        IF v_f.finished THEN
            v_done := v_done || v_f.run_id;
        END IF;
    END LOOP;
    SELECT array_agg(a.agent ORDER BY a.n), array_agg(a.token ORDER BY a.n)
      INTO v_agents, v_tokens
      FROM unnest(p_run_ids, p_ask_agent_ids,
                  coalesce(p_ask_agent_tokens, array_fill(NULL::text,
                                                          ARRAY[cardinality(p_run_ids)])))
           WITH ORDINALITY AS a(run, agent, token, n)
     WHERE a.agent IS NOT NULL AND a.run = ANY (v_done);
    IF v_agents IS NOT NULL THEN
        RETURN QUERY SELECT NULL::text, NULL::boolean, g.*
          FROM cryo.claim_grants(p_org, v_agents, p_capabilities, p_claim_seconds,
                                 CASE WHEN p_ask_agent_tokens IS NULL THEN NULL
                                      ELSE v_tokens END) g;
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.finish_and_claim_grants(p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[], p_errors text[], p_logs bytea[], p_org text, p_ask_agent_ids text[], p_capabilities text[], p_claim_seconds double precision, p_ask_agent_tokens text[], p_log_offsets bigint[], p_log_lengths bigint[]) IS 'Ends each listed run as cryo.finish_runs does (with its log offsets and lengths), then claims one run for the asking agent (p_ask_agent_ids, NULL for none) of each run that ended, as cryo.claim_grants does for org p_org and capabilities p_capabilities, in one transaction. Returns one row per finish (finished_run_id, finished; the grant columns NULL), then one row per claim (finished_run_id NULL; the grant columns as claim_grants returns them). Raises CR004 for asks not one per run, and what finish_runs and claim_grants raise.';

CREATE FUNCTION cryo.finish_run(p_run_id text, p_token uuid, p_outcome text, p_exit_code integer DEFAULT NULL::integer, p_error text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    IF p_outcome IS NULL OR NOT cryo.is_terminal(p_outcome) THEN
        PERFORM cryo._check_outcome(p_outcome);  -- raises, with the one message
    END IF;
    IF p_outcome = 'failed' AND cryo._retry_if_allowed(p_run_id, p_exit_code) THEN
        RETURN;
    END IF;
    PERFORM cryo._finalize(p_run_id, p_outcome, p_exit_code, p_error);
END
$$;

COMMENT ON FUNCTION cryo.finish_run(p_run_id text, p_token uuid, p_outcome text, p_exit_code integer, p_error text) IS 'Ends the claimed run with the given terminal outcome, or parks a failed activity that has retries left until its backoff passes. Returns nothing. Raises CR002 for a stale claim token, CR004 for an unknown outcome.';

CREATE FUNCTION cryo.finish_runs(p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[], p_errors text[], p_logs bytea[] DEFAULT NULL::bytea[], p_log_offsets bigint[] DEFAULT NULL::bigint[], p_log_lengths bigint[] DEFAULT NULL::bigint[]) RETURNS TABLE(run_id text, finished boolean)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_run_ids), 0);
    v_row record;
    v_retried boolean;
    v_end bigint;
BEGIN
    IF coalesce(cardinality(p_tokens), 0) <> v_n OR coalesce(cardinality(p_outcomes), 0) <> v_n
       OR (p_exit_codes IS NOT NULL AND cardinality(p_exit_codes) <> v_n)
       OR (p_errors IS NOT NULL AND cardinality(p_errors) <> v_n)
       OR (p_logs IS NOT NULL AND cardinality(p_logs) <> v_n)
       OR (p_log_offsets IS NOT NULL AND cardinality(p_log_offsets) <> v_n)
       OR (p_log_lengths IS NOT NULL AND cardinality(p_log_lengths) <> v_n) THEN
        RAISE EXCEPTION 'finish_runs needs arrays of one length (% run ids)', v_n
            USING ERRCODE = 'CR004';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o WHERE o IS NULL OR NOT cryo.is_terminal(o)) THEN
        RAISE EXCEPTION 'every outcome must be succeeded, failed, cancelled or unreadable'
            USING ERRCODE = 'CR004';
    END IF;
    -- Lock the live claims in run id order, so two overlapping batches cannot deadlock;
    -- a run listed twice is finished once.
    FOR v_row IN
        SELECT i.run_id, i.token, i.outcome, i.exit_code, i.error, i.log, i.log_offset,
               i.log_length, (q.run_id IS NOT NULL) AS live
          FROM (SELECT DISTINCT ON (u.run_id) u.*
                  FROM unnest(p_run_ids, p_tokens, p_outcomes,
                              coalesce(p_exit_codes, array_fill(NULL::integer, ARRAY[v_n])),
                              coalesce(p_errors, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_logs, array_fill(NULL::bytea, ARRAY[v_n])),
                              coalesce(p_log_offsets, array_fill(NULL::bigint, ARRAY[v_n])),
                              coalesce(p_log_lengths, array_fill(NULL::bigint, ARRAY[v_n])))
                       AS u(run_id, token, outcome, exit_code, error, log, log_offset,
                            log_length)
                 ORDER BY u.run_id) i
          LEFT JOIN LATERAL (
               SELECT c.run_id FROM cryo.queue c
                WHERE c.run_id = i.run_id AND c.state = 'claimed' AND c.claim_token = i.token
                  AND c.claim_expires_at > cryo.now()  -- as cryo._claimed_row checks
                  FOR UPDATE) q ON true
         ORDER BY i.run_id
    LOOP
        v_end := NULL;
        IF v_row.live THEN
            -- A numbered last chunk follows append_log_at's rule, save that a partial
            -- repeat is refused like a gap (the server cuts and sends its tail again).
            IF v_row.log_offset IS NOT NULL AND length(v_row.log) > 0 THEN
                v_end := cryo._log_take(v_row.run_id, v_row.token, v_row.log_offset,
                                        v_row.log_length);
                IF v_end <> v_row.log_offset
                   AND v_end < v_row.log_offset + v_row.log_length THEN
                    RAISE EXCEPTION 'log chunk at byte % of run % overlaps its stored log, which ends at byte %',
                        v_row.log_offset, v_row.run_id, v_end USING ERRCODE = 'CR160';
                END IF;
            END IF;
            IF length(v_row.log) > 0
               AND (v_row.log_offset IS NULL OR v_end = v_row.log_offset) THEN
                INSERT INTO cryo.logs (run_id, org, project, attempt, data, created_at)
                SELECT r.id, r.org, r.project, r.attempt, v_row.log, cryo.now()
                  FROM cryo.runs r WHERE r.id = v_row.run_id;
                PERFORM cryo._notify_run(v_row.run_id);
            END IF;
            -- Nested, not OR: SQL does not promise to skip the retry for a success.
            IF v_row.outcome = 'failed' THEN
                v_retried := cryo._retry_if_allowed(v_row.run_id, v_row.exit_code);
            ELSE
                v_retried := false;
            END IF;
            IF NOT v_retried THEN
                PERFORM cryo._finalize(v_row.run_id, v_row.outcome, v_row.exit_code,
                                       v_row.error);
            END IF;
        END IF;
        run_id := v_row.run_id;
        finished := v_row.live;
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION cryo.finish_runs(p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[], p_errors text[], p_logs bytea[], p_log_offsets bigint[], p_log_lengths bigint[]) IS 'Ends each listed run whose claim token is its live claim with the matching outcome, after storing its last sealed log bytes (exit codes, errors, logs, log offsets and lengths may be NULL arrays); bytes given with an offset (and their plain length) are stored only at the pass''s stored end and not again when already stored (see append_log_at). A failed activity with retries left is parked for its retry instead. Returns (run_id, finished) per input, finished false for a stale token. Raises CR004 for arrays of different lengths, an unknown outcome or a negative offset or length, CR160 for log bytes past or overlapping the stored end (the message names it).';

CREATE FUNCTION cryo.finish_status_post(p_run_id text, p_error text) RETURNS void
    LANGUAGE sql
    AS $$
    UPDATE cryo.status_posts
       SET state = CASE WHEN p_error IS NULL THEN 'sent' ELSE 'failed' END, last_error = p_error
     WHERE run_id = p_run_id
$$;

COMMENT ON FUNCTION cryo.finish_status_post(p_run_id text, p_error text) IS 'Records that a commit status was sent (p_error NULL) or refused or failed (p_error says why; it is not retried). Returns nothing. Raises nothing.';

CREATE FUNCTION cryo.fire_schedule(p_org text, p_project text, p_name text, p_scheduled_at timestamp with time zone, p_next timestamp with time zone, p_input bytea, p_scope jsonb, p_refused text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_s cryo.schedules;
    v_id text;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name FOR UPDATE;
    IF NOT FOUND OR v_s.paused OR v_s.next_fire_at IS DISTINCT FROM p_scheduled_at
       OR p_scheduled_at > cryo.now() THEN
        RETURN NULL;
    END IF;
    IF p_next IS NULL OR p_next <= p_scheduled_at THEN
        RAISE EXCEPTION 'a schedule''s next fire time must come after the tick it fires' USING ERRCODE = 'CR004';
    END IF;
    IF p_refused IS NOT NULL THEN
        -- The tick's input failed the workflow's input_schema: it says why and fires nothing.
        UPDATE cryo.schedules
           SET next_fire_at = p_next, last_refusal = left(p_refused, 1000), updated_at = cryo.now()
         WHERE org = p_org AND project = p_project AND name = p_name;
        RETURN NULL;
    END IF;
    v_id := cryo._start_triggered(
        p_org, p_project, v_s.workflow, p_input, NULL, p_scope, false,
        'schedule:' || p_name || ':' || to_char(p_scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'schedule', p_name);
    UPDATE cryo.schedules
       SET next_fire_at = p_next, last_fire_at = p_scheduled_at, last_refusal = NULL,
           last_run_id = coalesce(v_id, last_run_id), updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name;
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION cryo.fire_schedule(p_org text, p_project text, p_name text, p_scheduled_at timestamp with time zone, p_next timestamp with time zone, p_input bytea, p_scope jsonb, p_refused text) IS 'Starts the run of a due schedule tick (claimed by claim_schedules) with the sealed p_input (with p_refused, the reason its input failed the workflow''s input_schema: records it as last_refusal and starts nothing) and moves the schedule to p_next (the next tick, possibly due as well, so a late round calls it once per missed tick); returns the run id, NULL when the workflow''s if was false or the tick is not the schedule''s due next one (another server fired it). Raises CR004 when p_next is not after the tick, CR005 when the workflow is gone.';

CREATE FUNCTION cryo.fold_metrics(p_limit integer DEFAULT 20000, p_recount_after interval DEFAULT '00:00:10'::interval) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_f cryo.metric_fold;
    v_snap pg_snapshot;
    v_ids bigint[];
    v_n integer := 0;
    v_recount boolean;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'fold_metrics needs a positive batch size, not %', p_limit
            USING ERRCODE = 'CR230';
    END IF;
    IF p_recount_after IS NULL OR p_recount_after < interval '0' THEN
        RAISE EXCEPTION 'fold_metrics needs a queue recount interval of 0 or more, not %',
            p_recount_after USING ERRCODE = 'CR231';
    END IF;
    SELECT * INTO v_f FROM cryo.metric_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;  -- another replica is folding (or the migration made no row: nothing)
    END IF;
    -- The queue is recounted when its last count is p_recount_after old (or from the
    -- future: a test's fake clock went back).
    v_recount := v_f.queue_counted_at IS NULL OR v_f.queue_counted_at > cryo.now()
                 OR cryo.now() - v_f.queue_counted_at >= p_recount_after;
    v_snap := pg_current_snapshot();
    IF v_f.seen_xmax IS NOT NULL AND pg_snapshot_xmin(v_snap) >= v_f.seen_xmax THEN
        SELECT array_agg(b.id ORDER BY b.id) INTO v_ids
          FROM (SELECT h.id FROM cryo.history h
                 WHERE h.id > v_f.folded_through AND h.id <= v_f.seen_through
                 ORDER BY h.id LIMIT p_limit) b;
        PERFORM cryo._add_counts(v_ids);
        v_n := coalesce(cardinality(v_ids), 0);
        IF v_n < p_limit THEN  -- everything up to seen_through is in
            v_f.folded_through := greatest(v_f.folded_through, v_f.seen_through);
            v_f.seen_through := NULL;
            v_f.seen_xmax := NULL;
        ELSE
            v_f.folded_through := v_ids[v_n];
        END IF;
    END IF;
    IF v_f.seen_through IS NULL AND v_f.next_through IS NOT NULL THEN
        v_f.seen_through := v_f.next_through;
        v_f.seen_xmax := pg_snapshot_xmax(v_snap);
        v_f.next_through := NULL;
    END IF;
    IF v_f.next_through IS NULL THEN
        v_f.next_through := (SELECT max(h.id) FROM cryo.history h);
        IF v_f.next_through <= coalesce(v_f.seen_through, v_f.folded_through) THEN
            v_f.next_through := NULL;  -- nothing new
        END IF;
    END IF;
    UPDATE cryo.metric_fold
       SET folded_through = v_f.folded_through, seen_through = v_f.seen_through,
           seen_xmax = v_f.seen_xmax, next_through = v_f.next_through,
           folded_at = cryo.now(),
           queue_counted_at = CASE WHEN v_recount THEN cryo.now() ELSE v_f.queue_counted_at END;
    -- The artifact blobs' deltas.
    WITH gone AS (
        DELETE FROM cryo.metric_deltas RETURNING *
    ), summed AS (
        SELECT g.metric, g.org, g.project, g.label, g.label2, sum(g.n) AS n,
               sum(g.total) AS total
          FROM gone g GROUP BY 1, 2, 3, 4, 5
    )
    INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
    SELECT s.metric, s.org, s.project, s.label, s.label2, s.n, s.total FROM summed s
     ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (metric, org, project, label, label2)
    DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total;
    -- The queue's depth, as this snapshot sees it (a series that emptied reads 0).
    IF v_recount THEN
        WITH fresh AS (
            SELECT q.org, q.project, q.state, count(*) AS n FROM cryo.queue q GROUP BY 1, 2, 3
        ), emptied AS (
            UPDATE cryo.metric_counts c SET n = 0
             WHERE c.metric = 'queue' AND c.n <> 0
               AND NOT EXISTS (SELECT 1 FROM fresh f
                                WHERE f.org = c.org AND f.project = c.project
                                  AND f.state = c.label)
        )
        INSERT INTO cryo.metric_counts AS c (metric, org, project, label, n)
        SELECT 'queue', f.org, f.project, f.state, f.n FROM fresh f ORDER BY 2, 3, 4
        ON CONFLICT (metric, org, project, label, label2)
        DO UPDATE SET n = excluded.n WHERE c.n <> excluded.n;
    END IF;
    -- A deleted project's series go with it (its runs' rows are gone too).
    DELETE FROM cryo.metric_counts c
     WHERE NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = c.org AND p.slug = c.project)
       AND c.project <> '';
    RETURN v_n;
END
$$;

COMMENT ON FUNCTION cryo.fold_metrics(p_limit integer, p_recount_after interval) IS 'Folds up to p_limit history rows past the cursor in cryo.metric_fold into cryo.metric_counts (runs submitted and finished, queue latencies, claims lapsed, wakes), folds the artifact deltas, recounts the queue''s depth by state when its last count (metric_fold.queue_counted_at) is p_recount_after old, and drops the series of deleted projects; one replica at a time (the others return 0 at once). Returns how many history rows it folded. Raises CR230 for a batch size below 1, CR231 for a NULL or negative recount interval.';

CREATE FUNCTION cryo.forget_log_objects(p_ids bigint[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.log_objects_to_delete WHERE id = ANY (p_ids);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

COMMENT ON FUNCTION cryo.forget_log_objects(p_ids bigint[]) IS 'Deletes the queued rows p_ids once their objects are deleted from the store; returns how many went (0 when another replica forgot them first). Raises nothing.';

CREATE FUNCTION cryo.get_connection(p_org text, p_project text, p_name text) RETURNS TABLE(name text, base_url text, auth text, secret text, username text, header text, headers jsonb, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT * FROM cryo.list_connections(p_org, p_project) c WHERE c.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no connection % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR206';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_connection(p_org text, p_project text, p_name text) IS 'Returns one connection of a project (its secret''s name, never a value). Raises CR206 when there is none of that name.';

CREATE FUNCTION cryo.get_org_key(p_org text) RETURNS TABLE(key_id text, wrapped_key bytea)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT o.key_id, o.wrapped_key FROM cryo.orgs o WHERE o.slug = p_org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_org_key(p_org text) IS 'Returns the org''s key id and wrapped data key (both null before the first seal). Raises CR005 for an unknown org.';

CREATE FUNCTION cryo.get_retention(p_org text, p_project text) RETURNS TABLE(runs interval, events interval)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT p.run_retention, p.event_retention FROM cryo.projects p
                  WHERE p.org = p_org AND p.slug = p_project;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_retention(p_org text, p_project text) IS 'Returns how long a project keeps terminal runs and bus events. Raises CR005 for an unknown project.';

CREATE FUNCTION cryo.get_run(p_run_id text) RETURNS TABLE(id text, org text, project text, workflow text, filename text, status text, substate text, attempt integer, exit_code integer, error text, idempotency_key text, created_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, wake_at timestamp with time zone, agent_id text, concurrency_group text, queue_position integer, finished boolean, parent_run_id text, activity_name text, kind text, outcome_code integer)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
BEGIN
    PERFORM cryo._app_run_check(p_run_id);
    RETURN QUERY
        SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
               r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
               r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
               CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
               cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind,
               CASE WHEN cryo.is_terminal(r.status) THEN cryo._outcome_code(r.status, r.exit_code) END
          FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
         WHERE r.id = p_run_id;
    IF NOT FOUND THEN
        PERFORM cryo._no_run(p_run_id);
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_run(p_run_id text) IS 'Returns one run with its queue facts (wake time, agent), whether it finished (and then the exit code it reports, outcome_code), and its parent run and activity name when it is a child. Raises CR003 for an unknown run, CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.get_webhook(p_org text, p_project text, p_name text) RETURNS TABLE(workflow text, secret bytea, status_url text)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT w.workflow, w.secret, w.status_url FROM cryo.webhooks w
                  WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook %/%/%', p_org, p_project, p_name USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_webhook(p_org text, p_project text, p_name text) IS 'Returns a webhook''s workflow, sealed secret and status URL. Raises CR005 for an unknown webhook.';

CREATE FUNCTION cryo.get_workflow(p_org text, p_project text, p_name text) RETURNS TABLE(filename text, interpreter text, source bytea, kind text, graph jsonb, workdir text, version integer)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT w.filename, w.interpreter, w.source, w.kind, w.graph, w.workdir, w.version
                   FROM cryo.workflows w
                  WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_workflow(p_org text, p_project text, p_name text) IS 'Returns a stored workflow: filename, interpreter, sealed source, kind (script or graph), for a graph its compiled structure, the directory it was stored from and its current version number. Raises CR005 for an unknown workflow.';

CREATE FUNCTION cryo.get_workflow_version(p_org text, p_project text, p_name text, p_version integer) RETURNS TABLE(filename text, interpreter text, source bytea, kind text, graph jsonb, workdir text, created_by text, created_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY SELECT v.filename, v.interpreter, v.source, v.kind, v.graph, v.workdir,
                        v.created_by, v.created_at
                   FROM cryo.workflow_versions v
                  WHERE v.org = p_org AND v.project = p_project AND v.workflow = p_name
                    AND v.version = p_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % in project %/% has no version %', p_name, p_org, p_project, p_version
            USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.get_workflow_version(p_org text, p_project text, p_name text, p_version integer) IS 'Returns one version of a stored workflow: filename, interpreter, sealed source, kind, compiled graph, directory, who stored it and when. Raises CR005 for an unknown workflow or version.';

CREATE FUNCTION cryo.graph_cache_take(p_run_id text, p_token uuid, p_node text, p_item integer, p_key bytea, p_ttl double precision) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_entry cryo.graph_cache;
BEGIN
    IF p_key IS NULL OR length(p_key) <> 32 OR p_ttl IS NULL OR NOT p_ttl > 0 THEN
        RAISE EXCEPTION 'a cache key is 32 bytes and a ttl more than 0 seconds' USING ERRCODE = 'CR004';
    END IF;
    SELECT * INTO v_entry FROM cryo.graph_cache c
     WHERE c.org = v_q.org AND c.project = v_q.project
       AND c.untrusted = cryo._graph_cache_trust(p_run_id) AND c.key_hash = p_key
       AND c.stored_at > cryo.now() - make_interval(secs => p_ttl);
    IF NOT FOUND THEN
        PERFORM cryo._instance_cache(p_run_id, p_node, p_item, p_key, false);
        RETURN false;
    END IF;
    PERFORM cryo._instance_cache(p_run_id, p_node, p_item, NULL, true);
    PERFORM cryo._instance_ended(p_run_id, v_q.org, v_q.project, p_node, p_item, 'succeeded',
                                 v_entry.value, NULL, NULL, v_entry.value_clear, false,
                                 'node_cached');
    RETURN true;
END
$$;

COMMENT ON FUNCTION cryo.graph_cache_take(p_run_id text, p_token uuid, p_node text, p_item integer, p_key bytea, p_ttl double precision) IS 'Before an instance of a node with a cache starts: when the run''s project holds an entry under p_key (a 32-byte keyed digest of the rendered key) for the run''s trust, stored less than p_ttl seconds ago, ends the instance succeeded with its output, marked cached, and returns true; else keeps the key on the instance (its output is stored there when it succeeds) and returns false. Raises CR002 for a stale token, CR004 for a bad key or ttl, CR005 for an instance never started.';

CREATE FUNCTION cryo.graph_defer(p_run_id text, p_token uuid, p_error text) RETURNS double precision
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_failures integer;
    v_secs double precision;
BEGIN
    UPDATE cryo.runs r SET drive_failures = r.drive_failures + 1 WHERE r.id = p_run_id
    RETURNING r.drive_failures INTO v_failures;
    v_secs := least(60, 0.5 * power(2, least(v_failures - 1, 10)));
    -- The reason is the event's name (clear, as node errors are), the count its ordinal.
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'graph_turn_failed', 'graph',
                          left(coalesce(p_error, 'failed'), 200), v_failures);
    PERFORM cryo._park(p_run_id, 'driver-backoff', NULL, NULL,
                       cryo.now() + make_interval(secs => v_secs));
    RETURN v_secs;
END
$$;

COMMENT ON FUNCTION cryo.graph_defer(p_run_id text, p_token uuid, p_error text) IS 'Parks a graph run whose driver turn failed with p_error (one line, kept in history as graph_turn_failed), to be driven again after a backoff that doubles with each failure in a row, from 0.5 s up to 60 s; returns the backoff in seconds. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_jobs(p_run_id text) RETURNS TABLE(job_run_id text, label text, attempt bigint, status text, exit_code integer, error text, finished boolean, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    WITH RECURSIVE jobs AS (
        SELECT c.id, c.kind, c.status, c.exit_code, c.error, c.created_at,
               c.graph_node || CASE WHEN n.items IS NULL THEN '' ELSE '#' || c.graph_item END AS label,
               1 AS depth
          FROM cryo.runs c
          LEFT JOIN cryo.node_states n ON n.run_id = c.parent_run_id AND n.node_id = c.graph_node
         WHERE c.parent_run_id = p_run_id AND c.graph_node IS NOT NULL
        UNION ALL
        SELECT c.id, c.kind, c.status, c.exit_code, c.error, c.created_at,
               j.label || '/' || c.graph_node
                   || CASE WHEN n.items IS NULL THEN '' ELSE '#' || c.graph_item END,
               j.depth + 1
          FROM jobs j
          JOIN cryo.runs c ON c.parent_run_id = j.id AND c.graph_node IS NOT NULL
          LEFT JOIN cryo.node_states n ON n.run_id = c.parent_run_id AND n.node_id = c.graph_node
         WHERE j.kind = 'graph' AND j.depth < 16
    )
    SELECT j.id, j.label, row_number() OVER (PARTITION BY j.label ORDER BY j.created_at, j.id),
           j.status, j.exit_code, j.error, cryo.is_terminal(j.status), j.created_at
      FROM jobs j
     WHERE j.kind = 'script'
     ORDER BY j.created_at, j.id
$$;

COMMENT ON FUNCTION cryo.graph_jobs(p_run_id text) IS 'Returns the child runs that did the nodes of a graph run (and of the graph runs its workflow nodes started), oldest first: each with a label naming its node (id, #item for a fan-out instance, outer/inner when nested), which attempt of that label it is, its status, exit code and error, and whether it has finished. Raises nothing.';

CREATE FUNCTION cryo.graph_plan(p_run_id text, p_token uuid, p_configs jsonb, p_scope jsonb, p_calls jsonb DEFAULT NULL::jsonb) RETURNS TABLE(action text, node_id text, type text, item integer, attempt integer, config jsonb, item_value jsonb, idempotency_key text, output jsonb)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_node cryo.node_states;
    v_start record;
    v_failing boolean;
    v_done boolean;
    v_again boolean;
    v_ran integer := 0;
    -- The database nodes one call runs before the turn yields and commits.
    v_share constant integer := 500;
    v_out jsonb;
    v_err text;
    v_run cryo.runs;
    v_answer jsonb;
    v_output jsonb;
    v_default jsonb;
    v_sealed boolean;
    -- The instances one call starts (a fan-out's are created a slice at a time): past
    -- it the turn yields, so no turn holds a driver for a whole large fan-out.
    v_slice constant integer := cryo._graph_slice();
    v_started integer := 0;
BEGIN
    IF p_calls IS NOT NULL THEN
        PERFORM cryo._graph_set_calls(p_run_id, cryo._graph_checked_calls(p_run_id, p_calls));
    END IF;
    LOOP
        v_again := false;
        -- Loops and early stop decide first, over this round's scope (74_graph_flow.sql).
        IF cryo._graph_flow_due(p_run_id) THEN
            p_scope := coalesce(cryo._graph_flow(v_q, p_scope), p_scope);
        END IF;
        -- A failed node (after its retries, without continue_on_error) fails the run: from
        -- then on only always nodes and the failure branch start.
        v_failing := cryo._graph_failing(p_run_id);
        -- What was skipped is said too, so the driver's scope follows without a re-read;
        -- and the constant state nodes the schedule ran at once ('done').
        FOR v_start IN SELECT * FROM cryo._graph_schedule(v_q, p_scope, v_failing, v_share - v_ran) LOOP
            action := v_start.action;
            node_id := v_start.node_id;
            type := NULL; item := NULL; attempt := NULL; config := NULL; item_value := NULL;
            idempotency_key := NULL; output := v_start.output;
            IF v_start.action = 'done' THEN
                type := 'state'; item := 0; attempt := 1;
                -- The schedule decides what its own runs readied before it returns: only
                -- a share used up (or a node run below) calls for another pass.
                v_ran := v_ran + 1;
                v_again := v_ran >= v_share;
                IF v_start.is_read THEN
                    p_scope := jsonb_set(p_scope, ARRAY['nodes', v_start.node_id],
                        jsonb_build_object('status', 'succeeded', 'output', v_start.output));
                END IF;
            END IF;
            RETURN NEXT;
        END LOOP;
        -- Start what can start: new instances of running nodes (up to max_parallel), and
        -- instances whose retry backoff has passed or whose concurrency group came free.
        FOR v_node IN SELECT * FROM cryo.node_states n
                       WHERE n.run_id = p_run_id AND cryo._node_status_in(n.status, 'under way')
                       ORDER BY n.ord LOOP
            v_failing := cryo._graph_failing(p_run_id);
            CONTINUE WHEN v_failing AND NOT cryo._graph_runs_on_failure(v_node.def);
            IF v_node.state_call IS NOT NULL AND v_node.def ? 'concurrency'
               AND NOT cryo._graph_scope_covers(p_scope, v_node.node_id) THEN
                action := 'config'; node_id := v_node.node_id; type := v_node.type;
                item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                CONTINUE;  -- its group reads the scope: in the round that covers it
            END IF;
            IF v_node.state_call IS NOT NULL THEN
                -- A constant state node: run here, recorded at once (a failure the
                -- database raises fails the node with its one-line reason, as on the
                -- driver's path; its retry, if any, is the record's to schedule).
                FOR v_start IN SELECT * FROM cryo._graph_start_instances(v_q, v_node, '{}', p_scope) LOOP
                    v_out := NULL;
                    v_err := NULL;
                    BEGIN
                        v_out := cryo._graph_state_call(v_q, v_node, v_start.item, v_start.attempt);
                    EXCEPTION WHEN OTHERS THEN
                        IF SQLSTATE NOT LIKE 'CR%' OR SQLSTATE = 'CR002' THEN
                            RAISE;
                        END IF;
                        v_err := split_part(SQLERRM, E'\n', 1);
                    END;
                    PERFORM cryo.graph_record_item(p_run_id, p_token, v_node.node_id, v_start.item,
                                                   CASE WHEN v_err IS NULL THEN 'succeeded' ELSE 'failed' END,
                                                   NULL, v_err, NULL, v_out);
                    IF coalesce((v_node.state_call ->> 'read')::boolean, false) THEN
                        p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id], jsonb_build_object(
                            'status', (SELECT n.status FROM cryo.node_states n
                                        WHERE n.run_id = p_run_id AND n.node_id = v_node.node_id),
                            'output', v_out));
                    END IF;
                    v_again := true;
                    v_ran := v_ran + 1;
                    action := 'done';
                    node_id := v_node.node_id;
                    type := v_node.type; item := v_start.item; attempt := v_start.attempt;
                    config := NULL; item_value := NULL; idempotency_key := NULL; output := v_out;
                    RETURN NEXT;
                END LOOP;
                CONTINUE;
            END IF;
            -- The driver sends only the configs of the nodes it expects to start (sending all
            -- of them made every call cost the graph's size). A node with instances to start
            -- and no config sent is asked for, and starts in the driver's next round.
            IF NOT p_configs ? v_node.node_id AND (
                   EXISTS (SELECT 1 FROM cryo.node_instances i
                            WHERE i.run_id = p_run_id AND i.node_id = v_node.node_id
                              AND (i.status = 'ready' OR (i.status = 'retrying' AND i.due_at <= cryo.now())))
                   OR coalesce((SELECT i.item + 1 FROM cryo.node_instances i
                                 WHERE i.run_id = p_run_id AND i.node_id = v_node.node_id
                                 ORDER BY i.item DESC LIMIT 1), 0) < coalesce(v_node.items, 1)) THEN
                action := 'config';
                node_id := v_node.node_id;
                type := v_node.type; item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF v_started >= v_slice THEN  -- this call's slice is used: yield below
                v_again := true;
                EXIT;
            END IF;
            FOR v_start IN SELECT * FROM cryo._graph_start_instances(v_q, v_node, p_configs, p_scope,
                                                                     v_slice - v_started) LOOP
                v_started := v_started + 1;
                action := 'start';
                node_id := v_node.node_id;
                type := v_node.type;
                item := v_start.item;
                attempt := v_start.attempt;
                config := v_start.config;
                item_value := v_start.item_value;
                idempotency_key := v_start.idempotency_key;
                output := NULL;
                RETURN NEXT;
            END LOOP;
        END LOOP;
        -- What ran here may have readied more. After a bounded share the turn yields and
        -- commits: in one transaction every node's earlier row versions stay in the
        -- indexes each read walks, so a longer turn would cost more a node.
        EXIT WHEN NOT v_again OR v_ran >= v_share OR v_started >= v_slice;
    END LOOP;
    IF v_started >= v_slice THEN
        v_again := true;
    END IF;
    IF v_again THEN
        action := 'yield';
        node_id := NULL; type := NULL; item := NULL; attempt := NULL; config := NULL;
        item_value := NULL; idempotency_key := NULL; output := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    v_failing := cryo._graph_failing(p_run_id);
    IF v_failing THEN
        -- Over when no always node or failure branch node is left to run.
        v_done := NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id
                                 AND cryo._node_status_in(n.status, 'live')
                                 AND cryo._graph_runs_on_failure(n.def));
    ELSE
        -- Over when nothing is open but the failure branch, which is then skipped.
        v_done := NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id
                                 AND cryo._node_status_in(n.status, 'live')
                                 AND NOT (n.status = 'pending'
                                          AND coalesce((n.def ->> 'on_failure')::boolean, false)));
        IF v_done THEN
            PERFORM cryo._nodes_skip_unstarted(v_q, 'the run did not fail');
        END IF;
    END IF;
    IF v_done THEN
        node_id := (SELECT n.node_id FROM cryo.node_states n
                     WHERE n.run_id = p_run_id AND n.status = 'failed' AND NOT n.tolerated
                     ORDER BY n.finished_at LIMIT 1);
        SELECT * INTO v_run FROM cryo.runs r WHERE r.id = p_run_id;
        -- An answer holding no user data is settled here: a failed run's (null), or the
        -- default output made of clear outputs. Not for a script's graph call, whose memo
        -- carries the sealed form.
        IF node_id IS NULL AND v_run.graph ? 'output'
           AND NOT cryo._graph_scope_covers(p_scope, '$output') THEN
            -- The output expression's reads come in the next round, asked for as '$output'.
            action := 'config'; node_id := '$output'; type := NULL; item := NULL;
            attempt := NULL; config := NULL; item_value := NULL; idempotency_key := NULL;
            output := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
        IF node_id IS NULL THEN
            v_output := CASE WHEN v_run.graph ? 'output'
                             THEN cryo._eval(v_run.graph -> 'output', p_scope) END;
            -- (An output expression that gives null gives the default output too.)
            IF v_output IS NULL OR v_output = 'null'::jsonb THEN
                SELECT d.answer, d.sealed INTO v_default, v_sealed
                  FROM cryo._graph_default_output(p_run_id) d;
            END IF;
        END IF;
        IF node_id IS NOT NULL OR NOT v_run.graph ? 'output' THEN
            v_answer := CASE WHEN node_id IS NOT NULL THEN 'null'::jsonb
                             WHEN NOT v_sealed THEN v_default END;
            IF v_answer IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM cryo.runs p WHERE p.id = v_run.parent_run_id AND p.kind = 'script') THEN
                action := 'settled';
                type := cryo.graph_settle(p_run_id, p_token, true, NULL,
                                          jsonb_build_object('answer', v_answer));
                item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        -- The driver seals the answer: the output expression's value, or (type 'default')
        -- the default output, whose sealed outputs it opens first.
        action := 'finish';
        type := CASE WHEN v_default IS NOT NULL THEN 'default' END;
        item := NULL; attempt := NULL; config := NULL; item_value := NULL;
        idempotency_key := NULL;
        output := coalesce(v_default, v_output);
        RETURN NEXT;
    END IF;
END
$_$;

COMMENT ON FUNCTION cryo.graph_plan(p_run_id text, p_token uuid, p_configs jsonb, p_scope jsonb, p_calls jsonb) IS 'Decides every node of the driven graph run that can be decided over the given scope: skips it (if false, or all predecessors skipped), runs it when it is a constant state node (p_calls, once per run: {node: {op, key, entity, expected, read, value as hex of the sealed value}}), or starts its instances (fan-out items up to max_parallel, concurrency leases taken or waited for, retries whose backoff passed). Returns (action ''skip'', node) per node skipped, (action ''done'', node, type, item, attempt, output) per constant state instance run and recorded here, (action ''config'', node) per node with instances to start whose config was not given (the driver sends it in its next call), and (action ''start'', node, type, item, attempt, rendered config, item value, idempotency key) per instance to start. When every node ended or one failed: a row with action ''settled'' (type the run''s final status) when the run''s answer held no user data and it was settled here, else a row with action ''finish'' (node_id names the failed node; when it succeeded, output is the graph''s output expression, or with type ''default'' its default output: the outputs of the nodes nothing depends on, a sealed one as {"$sealed": hex}). After 500 state nodes run in one call it returns a row with action ''yield'': more to do, in a new turn (cryo.graph_yield). A concurrency group that renders to a bad name fails its node. Costs what is ready, not the size of the graph. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_record_item(p_run_id text, p_token uuid, p_node text, p_item integer, p_outcome text, p_output bytea DEFAULT NULL::bytea, p_error text DEFAULT NULL::text, p_exit_code integer DEFAULT NULL::integer, p_output_clear jsonb DEFAULT NULL::jsonb) RETURNS text
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_status text;
    v_if jsonb;
BEGIN
    IF p_outcome = 'failed' THEN  -- its retry_if decides over the failure
        SELECT n.def #> '{retry,retry_if}' INTO v_if FROM cryo.node_states n
         WHERE n.run_id = p_run_id AND n.node_id = p_node;
    END IF;
    v_status := cryo._instance_ended(
        p_run_id, v_q.org, v_q.project, p_node, p_item, p_outcome, p_output, p_error,
        p_exit_code, p_output_clear,
        v_if IS NULL OR cryo._truthy(cryo._eval(v_if, jsonb_build_object(
            'failure', jsonb_build_object(
                'exit_code', p_exit_code, 'error', p_error,
                'status', substring(p_error FROM '^HTTP ([0-9]{3})$')::integer)))));
    IF v_status = 'succeeded' AND p_outcome = 'succeeded' THEN  -- its cache, if it has one
        PERFORM cryo._graph_cache_keep(p_run_id, p_node, p_item, p_output, p_output_clear);
    END IF;
    RETURN v_status;
END
$_$;

COMMENT ON FUNCTION cryo.graph_record_item(p_run_id text, p_token uuid, p_node text, p_item integer, p_outcome text, p_output bytea, p_error text, p_exit_code integer, p_output_clear jsonb) IS 'Records that an instance of a node of the driven graph run ended (succeeded or failed, with its sealed output, or p_output_clear for one holding no user data), or schedules its retry; ends the node when all its instances have (a loop''s node is decided by the next round); a success stores its output under the instance''s cache key, if its cache missed. Returns the instance''s status (succeeded, failed, retrying). Raises CR002 for a stale token, CR004 for a bad outcome, CR005 for an instance never started.';

CREATE FUNCTION cryo.graph_refuse_input(p_run_id text, p_token uuid, p_reason text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    IF EXISTS (SELECT 1 FROM cryo.lease_waiters w WHERE w.run_id = p_run_id) THEN
        PERFORM cryo._leave_lease_queues(p_run_id);
    END IF;
    PERFORM cryo._graph_cancel_nodes(p_run_id, true);
    PERFORM cryo._nodes_skip_unstarted(v_q, 'the run''s input was refused');
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'input_refused', 'input', '', 0);
    PERFORM cryo._finalize(p_run_id, 'failed', 1, 'CR227 ' || left(coalesce(p_reason, 'input: refused'), 2000));
    RETURN 'failed';
END
$$;

COMMENT ON FUNCTION cryo.graph_refuse_input(p_run_id text, p_token uuid, p_reason text) IS 'Fails graph run p_run_id (claimed by the driver with p_token) because its input fails its input_schema: its error reads ''CR227 '' and p_reason (the schema''s message), its nodes are skipped, a history entry input_refused is written. Returns ''failed''. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_runs_waiting() RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM cryo.queue q
                    WHERE q.state = 'pending' AND q.required_caps = '{graph}');
END
$$;

COMMENT ON FUNCTION cryo.graph_runs_waiting() IS 'Returns whether a graph run is pending for a driver (cryo.drive_graphs would hand one out, unless another driver takes it first). Raises nothing.';

CREATE FUNCTION cryo.graph_settle(p_run_id text, p_token uuid, p_finish boolean, p_output bytea DEFAULT NULL::bytea, p_output_clear jsonb DEFAULT NULL::jsonb) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_failed cryo.node_states;
    v_child record;
    v_reason text;
BEGIN
    IF p_finish THEN
        SELECT * INTO v_failed FROM cryo.node_states n
         WHERE n.run_id = p_run_id AND n.status = 'failed' AND NOT n.tolerated
         ORDER BY n.finished_at LIMIT 1;
        -- A failed node fails the run and cancels what is still running.
        FOR v_child IN SELECT i.job_run_id FROM cryo.node_instances i JOIN cryo.runs c ON c.id = i.job_run_id
                        WHERE i.run_id = p_run_id AND NOT cryo.is_terminal(c.status) LOOP
            PERFORM cryo.cancel_run(v_child.job_run_id);
        END LOOP;
        -- (Asked first: the call is planned afresh each time, the question is not.)
        IF EXISTS (SELECT 1 FROM cryo.lease_waiters w WHERE w.run_id = p_run_id) THEN
            PERFORM cryo._leave_lease_queues(p_run_id);
        END IF;
        IF p_output IS NOT NULL OR p_output_clear IS NOT NULL THEN
            INSERT INTO cryo.run_outputs (run_id, org, project, key, value, value_clear, updated_at)
            VALUES (p_run_id, v_q.org, v_q.project, 'output', p_output,
                    CASE WHEN p_output IS NULL THEN p_output_clear END, cryo.now())
            ON CONFLICT (run_id, key) DO UPDATE
               SET value = excluded.value, value_clear = excluded.value_clear,
                   updated_at = excluded.updated_at;
        END IF;
        IF v_failed.node_id IS NOT NULL THEN
            -- What was still running was cancelled above: its nodes say so; and what
            -- never started is skipped, so no node of a finished run is left pending.
            PERFORM cryo._graph_cancel_nodes(p_run_id, true);
            PERFORM cryo._nodes_skip_unstarted(v_q, 'the run failed');
            -- The run exits as its failing node's job did (1 when no job ran it).
            PERFORM cryo._finalize(p_run_id, 'failed',
                coalesce((SELECT c.exit_code FROM cryo.node_instances i
                            JOIN cryo.runs c ON c.id = i.job_run_id
                           WHERE i.run_id = p_run_id AND i.node_id = v_failed.node_id
                             AND i.status = 'failed' AND c.exit_code BETWEEN 1 AND 255
                           ORDER BY i.finished_at LIMIT 1), 1),
                'node ' || v_failed.node_id || ' failed: ' || coalesce(v_failed.error, ''));
            RETURN 'failed';
        END IF;
        PERFORM cryo._finalize(p_run_id, 'succeeded', 0, NULL);
        RETURN 'succeeded';
    END IF;
    SELECT CASE WHEN bool_or(i.status = 'running') THEN 'running-nodes'
                WHEN bool_or(i.wait_kind = 'approval') THEN 'awaiting-approval'
                WHEN bool_or(i.wait_kind = 'signal') THEN 'awaiting-signal'
                WHEN bool_or(i.wait_kind = 'event') THEN 'awaiting-event'
                WHEN bool_or(i.wait_kind = 'sleep') THEN 'sleeping'
                WHEN bool_or(i.status = 'ready') THEN 'awaiting-lease'
                ELSE 'retry-backoff' END
      INTO v_reason
      FROM cryo.node_instances i WHERE i.run_id = p_run_id
       AND cryo._node_status_in(i.status, 'instance live');
    UPDATE cryo.runs r SET drive_failures = 0 WHERE r.id = p_run_id AND r.drive_failures <> 0;
    PERFORM cryo._park(p_run_id, coalesce(v_reason, 'running-nodes'), NULL, NULL,
                       (SELECT min(i.due_at) FROM cryo.node_instances i
                         WHERE i.run_id = p_run_id
                           AND cryo._node_status_in(i.status, 'instance timed')));
    RETURN 'parked';
END
$$;

COMMENT ON FUNCTION cryo.graph_settle(p_run_id text, p_token uuid, p_finish boolean, p_output bytea, p_output_clear jsonb) IS 'Ends a driver''s turn on a graph run: with p_finish, ends the run (failed when a node failed, with that node''s job''s exit code, cancelling its running children and their nodes; else succeeded), storing p_output (sealed) or p_output_clear (an answer holding no user data, as {"answer": v}) as its output; otherwise parks it until its earliest timer or retry, or until something it waits on wakes it. Returns ''succeeded'', ''failed'' or ''parked''. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_start_job(p_run_id text, p_token uuid, p_node text, p_item integer, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[], p_graph jsonb DEFAULT NULL::jsonb, p_workflow text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_child text;
BEGIN
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, p_filename, p_interpreter, p_source, p_input, NULL,
        p_required_caps, p_workflow, p_parent_run_id => p_run_id, p_graph => p_graph,
        -- the node's timeout bounds each attempt's job (79_timeouts.sql)
        p_timeout => (SELECT (n.def ->> 'timeout')::float8 FROM cryo.node_states n
                       WHERE n.run_id = p_run_id AND n.node_id = p_node)) s;
    UPDATE cryo.runs SET graph_node = p_node, graph_item = p_item WHERE id = v_child;
    PERFORM cryo._instance_job(p_run_id, p_node, p_item, v_child);
    RETURN v_child;
END
$$;

COMMENT ON FUNCTION cryo.graph_start_job(p_run_id text, p_token uuid, p_node text, p_item integer, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[], p_graph jsonb, p_workflow text) IS 'Starts the child run that does an instance of a node of the driven graph run (a job for an agent, or with p_graph a child graph run); returns its id. Raises CR002 for a stale token, CR004 for a missing source.';

CREATE FUNCTION cryo.graph_state(p_run_id text, p_token uuid, p_nodes text[] DEFAULT NULL::text[], p_started boolean DEFAULT false) RETURNS TABLE(node_id text, type text, node_status text, items integer, item integer, item_status text, attempt integer, output bytea, error text, job_run_id text, job_status text, job_finished boolean, job_exit_code integer, job_error text, wait_kind text, wait_name text, due boolean, signal_id bigint, event_id bigint, started_at timestamp with time zone, output_clear jsonb)
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
DECLARE
    v_untrusted boolean := cryo._run_untrusted(p_run_id);
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    -- Two keyed parts, whatever the planner's statistics say about a brand-new run: the
    -- nodes asked for with all their instances (by primary key), and the instances still
    -- in flight of the others (through a partial index). LATERAL keeps each instance
    -- lookup on (run_id, node_id), never a scan of the run's instances per node; OFFSET 0
    -- keeps each a probe (pulled up into plain joins, the generic plans hashed or merged
    -- in every node and instance of the run, and a turn grew with the graph).
    RETURN QUERY
        WITH picked AS (
            SELECT n.*, true AS whole FROM cryo.node_states n
             WHERE p_nodes IS NULL AND n.run_id = p_run_id
            UNION ALL
            SELECT n.*, true FROM unnest(p_nodes) AS k(id)
             CROSS JOIN LATERAL (SELECT * FROM cryo.node_states m
                                  WHERE m.run_id = p_run_id AND m.node_id = k.id
                                    AND NOT (p_started AND m.status = 'pending') OFFSET 0) n
            UNION ALL
            SELECT n.*, false FROM (SELECT DISTINCT l.node_id FROM cryo.node_instances l
                                     WHERE p_nodes IS NOT NULL AND l.run_id = p_run_id
                                       AND cryo._node_status_in(l.status, 'instance live')
                                       AND NOT (l.node_id = ANY (p_nodes))) k
             CROSS JOIN LATERAL (SELECT * FROM cryo.node_states m
                                  WHERE m.run_id = p_run_id AND m.node_id = k.node_id OFFSET 0) n
        )
        SELECT n.node_id, n.type, n.status, n.items, i.item, i.status, i.attempt,
               coalesce(i.output, CASE WHEN i.item IS NULL THEN n.output END), coalesce(i.error, n.error),
               i.job_run_id, j.status, cryo.is_terminal(j.status), j.exit_code, j.error,
               i.wait_kind, i.wait_name, i.due_at <= cryo.now(),
               (SELECT s.id FROM cryo.signals s
                 WHERE i.wait_kind = 'signal' AND i.status = 'waiting' AND s.run_id = p_run_id
                   AND s.name = i.wait_name AND s.consumed_at IS NULL ORDER BY s.id LIMIT 1),
               (SELECT e.id FROM cryo.events e
                 WHERE i.wait_kind = 'event' AND i.status = 'waiting' AND e.org = n.org
                   AND e.project = n.project AND e.name = i.wait_name
                   AND e.created_at >= i.started_at
                   -- the namespaces the run hears (cryo._publish_event)
                   AND CASE WHEN v_untrusted THEN e.untrusted OR e.published ELSE NOT e.untrusted END
                 ORDER BY e.id LIMIT 1),
               i.started_at,
               coalesce(i.output_clear, CASE WHEN i.item IS NULL THEN n.output_clear END)
          FROM picked n
          LEFT JOIN LATERAL (
              SELECT x.* FROM cryo.node_instances x
               WHERE x.run_id = p_run_id AND x.node_id = n.node_id
                 AND (n.whole OR cryo._node_status_in(x.status, 'instance live'))
              OFFSET 0) i ON true
          LEFT JOIN LATERAL (SELECT c.status, c.exit_code, c.error FROM cryo.runs c
                              WHERE c.id = i.job_run_id OFFSET 0) j ON true
         ORDER BY n.node_id, i.item;
END
$$;

COMMENT ON FUNCTION cryo.graph_state(p_run_id text, p_token uuid, p_nodes text[], p_started boolean) IS 'Returns the nodes of the driven graph run with their instances: status, attempt, sealed output (or output_clear, for one holding no user data), the child run doing it and how it ended, and for a wait whether it is due and which signal or event answers it. With p_nodes, only those nodes and the instances still in flight of the others (a turn reads what it needs, by key); with p_started as well, only those of the listed nodes that have left pending (a pending node has no output and one status). Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_take_signal(p_run_id text, p_token uuid, p_signal_id bigint, p_node text, p_item integer) RETURNS TABLE(payload bytea, payload_clear jsonb)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY
        UPDATE cryo.signals s SET consumed_at = cryo.now(),
                                  consumed_path = 'node/' || p_node || '/' || p_item
         WHERE s.id = p_signal_id AND s.run_id = p_run_id AND s.consumed_at IS NULL
        RETURNING s.payload, s.payload_clear;
END
$$;

COMMENT ON FUNCTION cryo.graph_take_signal(p_run_id text, p_token uuid, p_signal_id bigint, p_node text, p_item integer) IS 'Consumes a queued signal for a waiting node instance of the driven graph run; returns its payload (sealed, or clear from SQL), no row when it was taken already. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.graph_wait_item(p_run_id text, p_token uuid, p_node text, p_item integer, p_kind text, p_name text, p_seconds double precision) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    IF p_kind NOT IN ('sleep', 'signal', 'event', 'approval') THEN
        RAISE EXCEPTION 'a node waits on sleep, signal, event or approval, not %', p_kind
            USING ERRCODE = 'CR004';
    END IF;
    PERFORM cryo._check_timeout(p_seconds);
    PERFORM cryo._instance_wait(v_q, p_node, p_item, p_kind, p_name, p_seconds);
END
$$;

COMMENT ON FUNCTION cryo.graph_wait_item(p_run_id text, p_token uuid, p_node text, p_item integer, p_kind text, p_name text, p_seconds double precision) IS 'Makes an instance of a node of the driven graph run wait for a timer, a signal or event of p_name, or an approval, at most p_seconds (NULL: no limit). Returns nothing. Raises CR002 for a stale token, CR004 for an unknown kind or bad duration.';

CREATE FUNCTION cryo.graph_yield(p_run_id text, p_token uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs r SET drive_failures = 0 WHERE r.id = p_run_id AND r.drive_failures <> 0;
    PERFORM cryo._park(p_run_id, 'running-nodes', NULL, NULL, NULL);
    PERFORM cryo._wake(ARRAY[p_run_id], 'turn_yielded');
END
$$;

COMMENT ON FUNCTION cryo.graph_yield(p_run_id text, p_token uuid) IS 'Ends a driver''s turn on a graph run that has more to do: the run is pending again at once, behind those already waiting. Returns nothing. Raises CR002 for a stale token.';

CREATE FUNCTION cryo.index_run_input(p_run_id text, p_hashes bytea[]) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_hashes IS NOT NULL AND (cardinality(p_hashes) > 256
            OR EXISTS (SELECT 1 FROM unnest(p_hashes) h WHERE h IS NULL OR length(h) <> 32)) THEN
        RAISE EXCEPTION 'input digests are at most 256 SHA-256 digests of 32 bytes'
            USING ERRCODE = 'CR237';
    END IF;
    UPDATE cryo.runs SET input_hashes = p_hashes
     WHERE id = p_run_id AND NOT untrusted AND input_hashes IS NULL;
    RETURN FOUND;
END
$$;

COMMENT ON FUNCTION cryo.index_run_input(p_run_id text, p_hashes bytea[]) IS 'Stores the keyed digests of a run''s input values, for the runs search (cryo.search_runs p_input_hash), once: returns false for an untrusted run (never indexed), an unknown run, or one already indexed. Raises CR237 for more than 256 digests or one that is not 32 bytes.';

CREATE FUNCTION cryo.is_terminal(p_status text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT p_status IN ('succeeded', 'failed', 'cancelled', 'unreadable')
$$;

COMMENT ON FUNCTION cryo.is_terminal(p_status text) IS 'Returns true for the statuses a run never leaves (succeeded, failed, cancelled, unreadable). Raises nothing.';

CREATE FUNCTION cryo.keep_log_context(p_run_id text, p_token uuid, p_context bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs SET log_context = nullif(p_context, ''::bytea) WHERE id = p_run_id;
END
$$;

COMMENT ON FUNCTION cryo.keep_log_context(p_run_id text, p_token uuid, p_context bytea) IS 'Stores the sealed log context (the log''s last bytes, which may begin a secret) for the run''s next pass; NULL or empty clears it. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.list_agents(p_org text, p_gone_after interval DEFAULT '00:02:00'::interval) RETURNS TABLE(id text, build text, capabilities text[], registered_at timestamp with time zone, last_seen_at timestamp with time zone, last_claim_at timestamp with time zone, claimed_run text, drain_requested_at timestamp with time zone, state text, replica text, last_contact_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT a.id, a.build, a.capabilities, a.registered_at, a.last_seen_at,
           greatest(a.last_claim_at, c.claimed_at), c.run_id, a.drain_requested_at,
           CASE WHEN a.gone_at IS NOT NULL
                  OR (c.run_id IS NULL AND a.last_seen_at < cryo.now() - p_gone_after)
                  OR c.claim_expires_at < cryo.now() THEN 'gone'
                WHEN a.drain_requested_at IS NOT NULL THEN 'draining'
                WHEN c.run_id IS NOT NULL THEN 'busy'
                ELSE 'idle' END,
           a.replica, greatest(a.last_seen_at, c.claimed_at, a.gone_at)
      FROM cryo.agents a
      LEFT JOIN LATERAL (SELECT q.run_id, q.claimed_at, q.claim_expires_at FROM cryo.queue q
                          WHERE q.org = a.org AND q.state = 'claimed' AND q.agent_id = a.id
                          ORDER BY q.claimed_at DESC LIMIT 1) c ON true
     WHERE a.org = p_org
     ORDER BY a.id
$$;

COMMENT ON FUNCTION cryo.list_agents(p_org text, p_gone_after interval) IS 'Returns the org''s agents with build, capabilities, times seen and last given a run, the run each holds now, the replica it claims through, its last contact, and state: gone (said goodbye or closed its long-poll since its last refresh, its claim lapsed unrenewed, or not seen for p_gone_after), draining, busy or idle. Raises nothing.';

CREATE FUNCTION cryo.list_app_roles() RETURNS TABLE(role text, org text, project text, can_login boolean, in_cryo_app boolean, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT b.role, b.org, b.project, r.rolcanlogin,
           r.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
                                          WHERE a.rolname = 'cryo_app' AND m.member = r.oid),
           b.created_at
      FROM cryo.app_roles b LEFT JOIN pg_roles r ON r.rolname = b.role
     ORDER BY b.role
$$;

COMMENT ON FUNCTION cryo.list_app_roles() IS 'Returns every bound application role with its org and project (NULL: all of the org''s), whether it can log in (NULL: the role no longer exists) and whether it is a member of cryo_app. Raises nothing.';

CREATE FUNCTION cryo.list_artifacts(p_org text, p_project text, p_scope text, p_tainted boolean DEFAULT NULL::boolean) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone, cache_key text, created_by_run text, tainted boolean, published boolean, executable boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo.artifacts a
                  WHERE a.org = p_org AND a.project = p_project
                    AND (a.scope = p_scope OR (p_scope IS NULL AND a.cache_key IS NOT NULL))
                    AND (p_tainted IS NULL OR a.run_id IS NOT NULL OR a.tainted = p_tainted)
                  ORDER BY a.scope, a.name, a.tainted;
END
$$;

COMMENT ON FUNCTION cryo.list_artifacts(p_org text, p_project text, p_scope text, p_tainted boolean) IS 'Returns the artifacts of scope p_scope (a run id or a cache key''s scope), or every cached artifact of the project when p_scope is NULL, by scope and name, with their trust flags; p_tainted (NULL: both) keeps one namespace of cached ones. Raises CR021 for an application role of another tenant.';

CREATE FUNCTION cryo.list_connections(p_org text, p_project text) RETURNS TABLE(name text, base_url text, auth text, secret text, username text, header text, headers jsonb, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.name, c.base_url, c.auth, c.secret, c.username, c.header, c.headers,
           c.created_at, c.updated_at
      FROM cryo.connections c WHERE c.org = p_org AND c.project = p_project ORDER BY c.name
$$;

COMMENT ON FUNCTION cryo.list_connections(p_org text, p_project text) IS 'Returns a project''s connections by name (secret names, never values). Raises nothing.';

CREATE FUNCTION cryo.list_events(p_org text, p_project text, p_name text DEFAULT NULL::text, p_limit integer DEFAULT 50) RETURNS TABLE(id bigint, name text, payload bytea, payload_clear jsonb, emitted_by_run text, created_at timestamp with time zone, depth integer, untrusted boolean, refused text)
    LANGUAGE sql STABLE
    AS $$
    SELECT e.id, e.name, e.payload, e.payload_clear, e.emitted_by_run, e.created_at, e.depth,
           e.untrusted, e.refused
      FROM cryo.events e
     WHERE e.org = p_org AND e.project = p_project AND (p_name IS NULL OR e.name = p_name)
     ORDER BY e.id DESC LIMIT greatest(p_limit, 0)
$$;

COMMENT ON FUNCTION cryo.list_events(p_org text, p_project text, p_name text, p_limit integer) IS 'Returns a project''s newest bus events first (payloads sealed unless sent in the clear from SQL), each with its depth in a chain of handler runs, whether it is untrusted, and why no handler run started (refused), if so. Raises nothing.';

CREATE FUNCTION cryo.list_handlers(p_org text, p_project text) RETURNS TABLE(name text, event text, workflow text, source_workflow text, created_at timestamp with time zone, paused boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT h.name, h.event, h.workflow, h.source_workflow, h.created_at, h.paused
      FROM cryo.event_handlers h
     WHERE h.org = p_org AND h.project = p_project ORDER BY h.name
$$;

COMMENT ON FUNCTION cryo.list_handlers(p_org text, p_project text) IS 'Returns a project''s event handlers by name, with whether each is paused. Raises nothing.';

CREATE FUNCTION cryo.list_members(p_org text) RETURNS TABLE(login text, role text, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT m.login, m.role, m.created_at FROM cryo.members m
     WHERE m.org = p_org ORDER BY m.login
$$;

COMMENT ON FUNCTION cryo.list_members(p_org text) IS 'Returns the members of an org by login. Raises nothing.';

CREATE FUNCTION cryo.list_org_keys() RETURNS TABLE(org text, key_id text, wrapped_key bytea)
    LANGUAGE sql STABLE
    AS $$
    SELECT o.slug, o.key_id, o.wrapped_key FROM cryo.orgs o
     WHERE o.wrapped_key IS NOT NULL ORDER BY o.slug
$$;

COMMENT ON FUNCTION cryo.list_org_keys() IS 'Returns every org that has a data key, with its key id and wrapped key. Raises nothing.';

CREATE FUNCTION cryo.list_projects(p_org text) RETURNS TABLE(slug text, name text, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT p.slug, p.name, p.created_at FROM cryo.projects p WHERE p.org = p_org ORDER BY p.slug
$$;

COMMENT ON FUNCTION cryo.list_projects(p_org text) IS 'Returns the projects of an org by slug. Raises nothing.';

CREATE FUNCTION cryo.list_role_maps(p_org text) RETURNS TABLE(claim text, value text, role text, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT r.claim, r.value, r.role, r.created_at FROM cryo.oidc_role_maps r
     WHERE r.org = p_org ORDER BY r.claim, r.value
$$;

COMMENT ON FUNCTION cryo.list_role_maps(p_org text) IS 'Returns the org''s claim map by claim and value. Raises nothing.';

CREATE FUNCTION cryo.list_run_artifacts(p_run_id text, p_token uuid, p_run text, p_cached boolean, p_tainted boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone, cache_key text, created_by_run text, tainted boolean, published boolean, executable boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo._run_artifacts(
                        p_run_id,
                        CASE WHEN NOT coalesce(p_cached, false) THEN cryo.artifact_scope(
                            cryo._run_org(p_run_id), cryo._run_project(p_run_id),
                            coalesce(p_run, p_run_id), NULL) END,
                        NULL, p_tainted) a
                  ORDER BY a.scope, a.name;
END
$$;

COMMENT ON FUNCTION cryo.list_run_artifacts(p_run_id text, p_token uuid, p_run text, p_cached boolean, p_tainted boolean) IS 'Returns the artifacts the claimed run may read (as find_run_artifact) of its own scope, of run p_run, or with p_cached every cached one, by scope and name. Raises CR002 for a stale claim token, CR004 for a run of another project.';

CREATE FUNCTION cryo.list_runs(p_org text, p_project text, p_limit integer DEFAULT 50) RETURNS TABLE(id text, org text, project text, workflow text, filename text, status text, substate text, attempt integer, exit_code integer, error text, idempotency_key text, created_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, wake_at timestamp with time zone, agent_id text, concurrency_group text, queue_position integer, finished boolean, parent_run_id text, activity_name text, kind text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    SELECT cryo._app_tenant_check(p_org, p_project);
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
     ORDER BY r.created_at DESC, r.id
     LIMIT greatest(p_limit, 0)
$$;

COMMENT ON FUNCTION cryo.list_runs(p_org text, p_project text, p_limit integer) IS 'Returns a project''s newest runs first, at most p_limit. Raises CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.list_runs_page(p_org text, p_project text, p_status text DEFAULT NULL::text, p_workflow text DEFAULT NULL::text, p_parent text DEFAULT NULL::text, p_before text DEFAULT NULL::text, p_limit integer DEFAULT 50) RETURNS TABLE(id text, org text, project text, workflow text, filename text, status text, substate text, attempt integer, exit_code integer, error text, idempotency_key text, created_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, wake_at timestamp with time zone, agent_id text, concurrency_group text, queue_position integer, finished boolean, parent_run_id text, trig text, children bigint)
    LANGUAGE sql STABLE
    AS $$
    WITH cursor_row AS (
        SELECT c.created_at, c.id FROM cryo.runs c
         WHERE c.id = p_before AND c.org = p_org AND c.project = p_project
    )
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id,
           CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                WHEN r.trigger_kind IS NOT NULL THEN r.trigger_kind ELSE 'manual' END,
           (SELECT count(*) FROM cryo.runs k WHERE k.parent_run_id = r.id)
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) = p_workflow)
       AND (CASE WHEN p_parent IS NULL THEN r.parent_run_id IS NULL
                 ELSE r.parent_run_id = p_parent END)
       AND (p_before IS NULL OR (r.created_at, r.id) < (SELECT c.created_at, c.id FROM cursor_row c))
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT least(greatest(p_limit, 0), 200)
$$;

COMMENT ON FUNCTION cryo.list_runs_page(p_org text, p_project text, p_status text, p_workflow text, p_parent text, p_before text, p_limit integer) IS 'Returns one page (at most 200) of a project''s runs newest first, top-level or one parent''s children, filtered by status and workflow, after the cursor run p_before; with each run''s trigger (parent, schedule, webhook, event or manual) and child count. Raises nothing.';

CREATE FUNCTION cryo.list_schedules(p_org text, p_project text) RETURNS TABLE(name text, workflow text, cron text, timezone text, every_seconds double precision, paused boolean, source_workflow text, next_fire_at timestamp with time zone, last_fire_at timestamp with time zone, last_run_id text, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.name, s.workflow, s.cron, s.timezone, s.every_seconds, s.paused, s.source_workflow,
           s.next_fire_at, s.last_fire_at, s.last_run_id, s.created_at
      FROM cryo.schedules s WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;

COMMENT ON FUNCTION cryo.list_schedules(p_org text, p_project text) IS 'Returns a project''s schedules by name with their last and next fire times. Raises nothing.';

CREATE FUNCTION cryo.list_secrets(p_org text, p_project text) RETURNS TABLE(name text, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.name, s.created_at, s.updated_at FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;

COMMENT ON FUNCTION cryo.list_secrets(p_org text, p_project text) IS 'Returns the names of a project''s secrets (never values), by name. Raises nothing.';

CREATE FUNCTION cryo.list_sessions(p_org text) RETURNS TABLE(id text, member text, kind text, subject text, created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.id, m.login, s.kind, s.subject, s.created_at, s.expires_at, s.revoked_at
      FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
     WHERE s.org = p_org AND s.revoked_at IS NULL AND s.expires_at > cryo.now()
     ORDER BY s.created_at, s.id
$$;

COMMENT ON FUNCTION cryo.list_sessions(p_org text) IS 'Returns the live sessions of an org (never a secret or its hash), oldest first. Raises nothing.';

CREATE FUNCTION cryo.list_tokens(p_org text) RETURNS TABLE(id text, kind text, name text, member text, capabilities text[], created_at timestamp with time zone, expires_at timestamp with time zone, revoked_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT t.id, t.kind, t.name, m.login, t.capabilities, t.created_at, t.expires_at, t.revoked_at
      FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
     WHERE t.org = p_org ORDER BY t.created_at, t.id
$$;

COMMENT ON FUNCTION cryo.list_tokens(p_org text) IS 'Returns every token of an org (never a secret or its hash), oldest first. Raises nothing.';

CREATE FUNCTION cryo.list_webhook_deliveries(p_org text, p_project text, p_limit integer DEFAULT 20) RETURNS TABLE(webhook text, event text, outcome text, run_id text, event_id bigint, created_at timestamp with time zone, id bigint, redelivery_of bigint, redelivered_by text, redeliverable boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT d.webhook, d.event, d.outcome, d.run_id, d.event_id, d.created_at, d.id,
           d.redelivery_of, d.redelivered_by, d.input IS NOT NULL
      FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project
     ORDER BY d.created_at DESC LIMIT least(greatest(p_limit, 0), 200)
$$;

COMMENT ON FUNCTION cryo.list_webhook_deliveries(p_org text, p_project text, p_limit integer) IS 'Returns a project''s latest accepted webhook deliveries, newest first (at most 200): the webhook, the event, the outcome (started | skipped | ignored | published | paused), the run started or event published, the delivery''s id, the first delivery a redelivery repeats and who asked for it, and whether it can be delivered again. Raises nothing.';

CREATE FUNCTION cryo.list_webhooks(p_org text, p_project text) RETURNS TABLE(name text, workflow text, status_url text, created_at timestamp with time zone, deliveries bigint, last_delivery_at timestamp with time zone, paused boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT w.name, w.workflow, w.status_url, w.created_at,
           (SELECT count(*) FROM cryo.webhook_deliveries d
             WHERE d.org = w.org AND d.project = w.project AND d.webhook = w.name),
           (SELECT max(d.created_at) FROM cryo.webhook_deliveries d
             WHERE d.org = w.org AND d.project = w.project AND d.webhook = w.name),
           w.paused
      FROM cryo.webhooks w WHERE w.org = p_org AND w.project = p_project ORDER BY w.name
$$;

COMMENT ON FUNCTION cryo.list_webhooks(p_org text, p_project text) IS 'Returns a project''s webhooks by name (never their secrets) with how many deliveries each accepted and whether it is paused. Raises nothing.';

CREATE FUNCTION cryo.list_workflow_versions(p_org text, p_project text, p_name text) RETURNS TABLE(version integer, filename text, kind text, pipeline text, created_by text, created_at timestamp with time zone, current boolean)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_current integer;
BEGIN
    SELECT w.version INTO v_current FROM cryo.workflows w
     WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN QUERY
    SELECT v.version, v.filename, CASE WHEN v.graph ? 'pipeline' THEN 'pipeline' ELSE v.kind END,
           v.graph ->> 'pipeline', v.created_by, v.created_at, v.version = v_current
      FROM cryo.workflow_versions v
     WHERE v.org = p_org AND v.project = p_project AND v.workflow = p_name
     ORDER BY v.version DESC;
END
$$;

COMMENT ON FUNCTION cryo.list_workflow_versions(p_org text, p_project text, p_name text) IS 'Returns the versions of a stored workflow, newest first: number, filename, kind (script, graph or pipeline), pipeline version, who stored it (NULL: from SQL or before versions were kept), when, and whether it is the current one. Raises CR005 for an unknown workflow.';

CREATE FUNCTION cryo.list_workflows(p_org text, p_project text) RETURNS TABLE(name text, filename text, kind text, pipeline text, updated_at timestamp with time zone, schedules bigint, handlers bigint, webhooks bigint, version integer, updated_by text)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    RETURN QUERY
    SELECT w.name, w.filename,
           CASE WHEN w.graph ? 'pipeline' THEN 'pipeline' ELSE w.kind END,
           w.graph ->> 'pipeline', w.updated_at,
           (SELECT count(*) FROM cryo.schedules s
             WHERE s.org = w.org AND s.project = w.project AND s.workflow = w.name),
           (SELECT count(*) FROM cryo.event_handlers h
             WHERE h.org = w.org AND h.project = w.project AND h.workflow = w.name),
           (SELECT count(*) FROM cryo.webhooks k
             WHERE k.org = w.org AND k.project = w.project AND k.workflow = w.name),
           w.version,
           (SELECT v.created_by FROM cryo.workflow_versions v
             WHERE v.org = w.org AND v.project = w.project AND v.workflow = w.name
               AND v.version = w.version)
      FROM cryo.workflows w
     WHERE w.org = p_org AND w.project = p_project
     ORDER BY w.name;
END
$$;

COMMENT ON FUNCTION cryo.list_workflows(p_org text, p_project text) IS 'Returns the stored workflows of a project by name: filename, kind (script, graph or pipeline), the pipeline version, when it was last put, how many schedules, event handlers and webhooks start it, its current version and who stored that. Raises CR005 for an unknown project.';

CREATE FUNCTION cryo.log_context(p_run_id text) RETURNS bytea
    LANGUAGE sql STABLE
    AS $$
    SELECT log_context FROM cryo.runs WHERE id = p_run_id
$$;

COMMENT ON FUNCTION cryo.log_context(p_run_id text) IS 'The run''s sealed log context (see keep_log_context), NULL when it has none or there is no such run.';

CREATE FUNCTION cryo.log_objects_to_delete(p_limit integer) RETURNS TABLE(id bigint, object_key text)
    LANGUAGE sql STABLE
    AS $$
    SELECT d.id, d.object_key FROM cryo.log_objects_to_delete d
     WHERE d.not_before IS NULL OR d.not_before <= cryo.now()
     ORDER BY d.id LIMIT p_limit
$$;

COMMENT ON FUNCTION cryo.log_objects_to_delete(p_limit integer) IS 'Returns up to p_limit queued (id, object key) of objects to delete from the log store (collected runs, failed or taken-over move attempts) whose deletion is due, oldest first. Raises nothing.';

CREATE FUNCTION cryo.log_tail_start(p_run_id text, p_bytes bigint) RETURNS TABLE(after_id bigint, skipped_bytes bigint, total_bytes bigint)
    LANGUAGE sql STABLE
    AS $$
    WITH sized AS (
        SELECT l.id, octet_length(l.data) AS n,
               sum(octet_length(l.data)) OVER (ORDER BY l.id DESC) AS from_end
          FROM cryo.logs l WHERE l.run_id = p_run_id
    ), cut AS (
        SELECT min(id) AS first_kept FROM sized WHERE from_end - n < p_bytes
    )
    SELECT coalesce((SELECT max(s.id) FROM sized s, cut WHERE s.id < cut.first_kept), 0),
           coalesce((SELECT sum(s.n) FROM sized s, cut WHERE s.id < cut.first_kept), 0)::bigint,
           coalesce((SELECT sum(s.n) FROM sized s), 0)::bigint
$$;

COMMENT ON FUNCTION cryo.log_tail_start(p_run_id text, p_bytes bigint) IS 'Returns where a tail window of about p_bytes of a run''s log starts: the chunk id to read after, how many (sealed) bytes come before it, and the log''s total. Raises nothing.';

CREATE FUNCTION cryo.log_trim_point(p_run_id text, p_keep_bytes bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    SELECT max(s.id) FROM (
        SELECT l.id, sum(length(l.data)) OVER (ORDER BY l.id DESC) AS from_end
          FROM cryo.logs l WHERE l.run_id = p_run_id) s
     WHERE s.from_end > greatest(p_keep_bytes, 0)
$$;

COMMENT ON FUNCTION cryo.log_trim_point(p_run_id text, p_keep_bytes bigint) IS 'Returns the id of the newest log chunk of a run that must be dropped for the rest to hold at most p_keep_bytes (sealed sizes); NULL when it fits already. Raises nothing.';

CREATE FUNCTION cryo.logs_to_archive(p_older_than interval, p_limit integer) RETURNS TABLE(run_id text, org text, project text, bytes bigint, last_chunk_id bigint)
    LANGUAGE sql STABLE
    AS $$
    WITH RECURSIVE hot(run_id) AS (
        (SELECT l.run_id FROM cryo.logs l ORDER BY l.run_id LIMIT 1)
        UNION ALL
        SELECT (SELECT l.run_id FROM cryo.logs l WHERE l.run_id > h.run_id
                 ORDER BY l.run_id LIMIT 1)
          FROM hot h WHERE h.run_id IS NOT NULL
    ), due AS (
        SELECT r.id, r.org, r.project, r.finished_at
          FROM hot h JOIN cryo.runs r ON r.id = h.run_id
         WHERE r.finished_at <= cryo.now() - p_older_than
         ORDER BY r.finished_at, r.id
         LIMIT p_limit
    )
    SELECT d.id, d.org, d.project, s.bytes, s.last_id
      FROM due d
      CROSS JOIN LATERAL (SELECT sum(length(l.data))::bigint AS bytes, max(l.id) AS last_id
                            FROM cryo.logs l WHERE l.run_id = d.id) s
     WHERE s.last_id IS NOT NULL
     ORDER BY d.finished_at, d.id
$$;

COMMENT ON FUNCTION cryo.logs_to_archive(p_older_than interval, p_limit integer) IS 'Returns up to p_limit runs finished at least p_older_than ago whose log has chunks in cryo.logs: run, org, project, sealed bytes held and last chunk id. Raises nothing.';

CREATE FUNCTION cryo.mark_step(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    -- A marker is a sign for readers, not a memo: nothing replays from it, and a crash
    -- that loses it loses nothing. So its commit does not wait for the WAL flush.
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM cryo._mark(v_q, p_position,
                       cryo.call_path(p_family, coalesce(p_name, ''), p_ordinal, p_path),
                       p_family, coalesce(p_name, ''), p_ordinal, NULL);
    PERFORM cryo._notify_run(p_run_id);  -- a run page shows the step running
END
$$;

COMMENT ON FUNCTION cryo.mark_step(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_path text) IS 'Pins a pending journal marker for a step that is about to run, at the agent''s position p_position. Returns nothing. Raises CR002 for a stale claim token, CR004 for a malformed identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.mark_test_database() RETURNS void
    LANGUAGE sql
    AS $$
    INSERT INTO cryo.test_database DEFAULT VALUES ON CONFLICT DO NOTHING
$$;

COMMENT ON FUNCTION cryo.mark_test_database() IS 'Marks this database as a test database: cryo.now() honours cryo.fake_now from then on. Never call it on a production database. Returns nothing; raises nothing.';

CREATE FUNCTION cryo.note_agent(p_org text, p_agent_id text, p_instance text, p_state text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_found boolean;
BEGIN
    IF p_state = 'draining' THEN
        UPDATE cryo.agents a SET drain_requested_at = coalesce(a.drain_requested_at, cryo.now())
         WHERE a.org = p_org AND a.id = p_agent_id
           AND (p_instance IS NULL OR a.instance IS NOT DISTINCT FROM p_instance);
        v_found := FOUND;
        IF v_found THEN
            PERFORM pg_notify('cryo_drain', json_build_object('org', p_org,
                                                              'ids', ARRAY[p_agent_id])::text);
        END IF;
    ELSIF p_state = 'gone' THEN
        UPDATE cryo.agents a SET gone_at = cryo.now()
         WHERE a.org = p_org AND a.id = p_agent_id
           AND (p_instance IS NULL OR a.instance IS NOT DISTINCT FROM p_instance);
        v_found := FOUND;
    ELSE
        RAISE EXCEPTION 'an agent''s state is draining or gone, not %', coalesce(p_state, 'NULL')
            USING ERRCODE = 'CR004';
    END IF;
    RETURN v_found;
END
$$;

COMMENT ON FUNCTION cryo.note_agent(p_org text, p_agent_id text, p_instance text, p_state text) IS 'Marks the org''s agent p_agent_id (only its process instance p_instance, when given) draining (and notifies cryo_drain, as cryo.drain_agents does) or gone until its next refresh. Returns false when no such agent (instance) is known. Raises CR004 for another state.';

CREATE FUNCTION cryo.now() RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE WHEN coalesce(pg_catalog.current_setting('cryo.fake_now', true), '') = ''
                THEN pg_catalog.now()
                WHEN cryo._test_clock()
                THEN pg_catalog.current_setting('cryo.fake_now')::timestamptz
                ELSE pg_catalog.now() END
$$;

COMMENT ON FUNCTION cryo.now() IS 'Returns the engine time: the session setting cryo.fake_now when set in a test database (one marked by cryo.mark_test_database), else now(). Raises nothing.';

CREATE FUNCTION cryo.oidc_sign_in(p_org text, p_issuer text, p_subject text, p_email text, p_claims jsonb, p_secret_hash bytea, p_kind text, p_ttl_seconds double precision) RETURNS TABLE(session_id text, member text, role text, expires_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_now timestamptz := cryo.now();
    v_member cryo.members;
    v_mapped text;
    v_login text;
    v_id text := 'ses-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    v_expires timestamptz;
    v_login_re constant text := '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$';
BEGIN
    IF coalesce(p_subject, '') = '' OR coalesce(p_issuer, '') = '' OR p_secret_hash IS NULL THEN
        RAISE EXCEPTION 'a sign-in needs the issuer, the subject and a session secret' USING ERRCODE = 'CR004';
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('web', 'cli') THEN
        RAISE EXCEPTION 'a session is web or cli, not %', p_kind USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 60 AND 90 * 86400 THEN
        RAISE EXCEPTION 'a session lasts 60 seconds to 90 days, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs o WHERE o.slug = p_org) THEN
        -- Said the same way as for a known org: a sign-in page must not tell whether an org exists.
        RAISE EXCEPTION '% is not a member of org %', coalesce(p_email, p_subject), coalesce(p_org, '')
            USING ERRCODE = 'CR040';
    END IF;
    SELECT * INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = p_subject FOR UPDATE;
    IF NOT FOUND AND p_email IS NOT NULL THEN
        SELECT * INTO v_member FROM cryo.members m
         WHERE m.org = p_org AND lower(m.login) = lower(p_email)
         ORDER BY m.login = p_email DESC LIMIT 1 FOR UPDATE;
    END IF;
    v_mapped := cryo._mapped_role(p_org, coalesce(p_claims, '{}'));
    IF v_member.id IS NULL THEN
        IF v_mapped IS NULL THEN
            RAISE EXCEPTION '% is not a member of org %', coalesce(p_email, p_subject), p_org
                USING ERRCODE = 'CR040';
        END IF;
        v_login := CASE WHEN p_email ~ v_login_re THEN lower(p_email)
                        WHEN p_subject ~ v_login_re THEN p_subject END;
        IF v_login IS NULL THEN
            RAISE EXCEPTION 'neither the email nor the subject of % can be a member login', p_subject
                USING ERRCODE = 'CR040';
        END IF;
        PERFORM cryo.put_member(p_org, v_login, v_mapped, NULL);
        SELECT * INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = v_login;
    ELSIF v_mapped IS NOT NULL AND v_mapped <> v_member.role
          AND NOT (v_member.role = 'owner'
                   AND NOT EXISTS (SELECT 1 FROM cryo.members o WHERE o.org = p_org
                                      AND o.role = 'owner' AND o.id <> v_member.id)) THEN
        UPDATE cryo.members m SET role = v_mapped WHERE m.id = v_member.id;
        v_member.role := v_mapped;
    END IF;
    -- Sessions long over are of no use to anybody; the member's go as it signs in again.
    DELETE FROM cryo.sessions s WHERE s.member_id = v_member.id AND s.expires_at < v_now - interval '7 days';
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    -- The token's groups claim (a list, or one name) is kept for approvals restricted to a group.
    INSERT INTO cryo.sessions (id, org, member_id, secret_hash, kind, issuer, subject,
                               created_at, expires_at, groups)
    VALUES (v_id, p_org, v_member.id, p_secret_hash, p_kind, p_issuer, p_subject, v_now, v_expires,
            CASE jsonb_typeof(p_claims -> 'groups')
                WHEN 'array' THEN ARRAY(SELECT jsonb_array_elements_text(p_claims -> 'groups'))
                WHEN 'string' THEN ARRAY[p_claims ->> 'groups'] END);
    RETURN QUERY SELECT v_id, v_member.login, v_member.role, v_expires;
END
$_$;

COMMENT ON FUNCTION cryo.oidc_sign_in(p_org text, p_issuer text, p_subject text, p_email text, p_claims jsonb, p_secret_hash bytea, p_kind text, p_ttl_seconds double precision) IS 'Opens a session (web or cli, for p_ttl_seconds) for the person the issuer verified, as the org''s member whose login is the subject or the email, with the role the org''s claim map gives (creating the member when the map admits a newcomer); returns the session id, member login, role and expiry. Raises CR040 when the org does not know the person and maps none of its claims (or the org does not exist), CR004 for a missing identity, a bad kind or lifetime.';

CREATE FUNCTION cryo.park_sleep(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_seconds double precision, p_path text DEFAULT NULL::text) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text := cryo.call_path('sleep', '', p_ordinal, p_path);
    v_wake timestamptz;
BEGIN
    IF p_seconds IS NULL OR p_seconds < 0 OR p_seconds = 'infinity'::float8 OR p_seconds = 'NaN'::float8 THEN
        RAISE EXCEPTION 'sleep needs a finite duration of zero or more seconds, not %', p_seconds
            USING ERRCODE = 'CR004';
    END IF;
    -- A deadline pinned by an earlier pass stands (_park_on).
    v_wake := cryo._park_on(v_q, p_position, v_path, 'sleep', '', p_ordinal, 'sleeping', NULL,
                            cryo.now() + make_interval(secs => p_seconds));
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'timer_scheduled', 'sleep', '', p_ordinal);
    RETURN v_wake;
END
$$;

COMMENT ON FUNCTION cryo.park_sleep(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_seconds double precision, p_path text) IS 'Parks the claimed run until now + p_seconds (or the deadline an earlier pass pinned) and ends the claim; returns the wake time. Raises CR002 for a stale claim token, CR004 for a bad duration or identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.pause_handler(p_org text, p_project text, p_name text, p_paused boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.event_handlers SET paused = p_paused
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.pause_handler(p_org text, p_project text, p_name text, p_paused boolean) IS 'Pauses (p_paused true) or resumes an event handler: while paused, events of its name start no run of it (and are not caught up). Returns nothing. Raises CR005 for an unknown handler.';

CREATE FUNCTION cryo.pause_schedule(p_org text, p_project text, p_name text, p_paused boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.schedules
       SET paused = p_paused, updated_at = cryo.now(),
           next_fire_at = CASE WHEN p_paused OR NOT paused THEN next_fire_at END
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.pause_schedule(p_org text, p_project text, p_name text, p_paused boolean) IS 'Pauses (p_paused true) or resumes a schedule; a resumed schedule fires next at its first tick after now, with no catch-up for the ticks it skipped. Returns nothing. Raises CR005 for an unknown schedule.';

CREATE FUNCTION cryo.pause_webhook(p_org text, p_project text, p_name text, p_paused boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.webhooks SET paused = p_paused
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.pause_webhook(p_org text, p_project text, p_name text, p_paused boolean) IS 'Pauses (p_paused true) or resumes a webhook: while paused each signed delivery is recorded with outcome paused and starts nothing (deliver it again once resumed). Returns nothing. Raises CR005 for an unknown webhook.';

CREATE FUNCTION cryo.plan_schedule(p_org text, p_project text, p_name text, p_next timestamp with time zone) RETURNS void
    LANGUAGE sql
    AS $$
    UPDATE cryo.schedules
       SET next_fire_at = p_next, paused = p_next IS NULL, updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name AND next_fire_at IS NULL
$$;

COMMENT ON FUNCTION cryo.plan_schedule(p_org text, p_project text, p_name text, p_next timestamp with time zone) IS 'Sets the next fire time of a schedule that has none; NULL pauses it (an expression the server could not read). Returns nothing. Raises nothing.';

CREATE FUNCTION cryo.prepare_artifact(p_org text, p_project text, p_sha256 text, p_size bigint, p_max_bytes bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM cryo._check_artifact_room(p_org, p_project, p_sha256, p_size, p_max_bytes);
    RETURN EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                    WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
                      AND b.size = p_size);
END
$$;

COMMENT ON FUNCTION cryo.prepare_artifact(p_org text, p_project text, p_sha256 text, p_size bigint, p_max_bytes bigint) IS 'Returns true when the project already holds a blob with that SHA-256 and size (no upload needed). Raises CR004 for a malformed digest or size, CR075 when a new blob of that size would take the project past p_max_bytes.';

CREATE FUNCTION cryo.prepare_run_artifact(p_run_id text, p_token uuid, p_sha256 text, p_size bigint, p_max_bytes bigint) RETURNS TABLE(present boolean, verify boolean)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_untrusted boolean;
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    v_untrusted := cryo._run_untrusted(p_run_id);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM cryo._check_artifact_room(v_org, v_project, p_sha256, p_size, p_max_bytes,
                                      v_untrusted);
    RETURN QUERY SELECT EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                                 WHERE b.org = v_org AND b.project = v_project
                                   AND b.sha256 = p_sha256 AND b.size = p_size
                                   AND (b.untrusted_known OR NOT v_untrusted)),
                        v_untrusted;
END
$$;

COMMENT ON FUNCTION cryo.prepare_run_artifact(p_run_id text, p_token uuid, p_sha256 text, p_size bigint, p_max_bytes bigint) IS 'Returns (present, verify) for the claimed run''s put of a blob: present when the project holds it with that size and the run may know so (for an untrusted run, only a blob an untrusted run uploaded or a published artifact named); verify when the bytes must be uploaded through the server, which checks them against the digest (an untrusted run''s). Raises CR002 for a stale claim token, CR004 for a malformed digest or size, CR075 when a new blob would take the project past p_max_bytes.';

CREATE FUNCTION cryo.publish_event(p_org text, p_project text, p_name text, p_payload jsonb DEFAULT NULL::jsonb, p_sealed bytea DEFAULT NULL::bytea, p_public boolean DEFAULT false) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    SELECT cryo._app_tenant_check(p_org, p_project);
    SELECT cryo._publish_event(p_org, p_project, p_name, p_sealed,
                               CASE WHEN p_sealed IS NULL THEN coalesce(p_payload, 'null'::jsonb) END,
                               NULL, false, p_public)
$$;

COMMENT ON FUNCTION cryo.publish_event(p_org text, p_project text, p_name text, p_payload jsonb, p_sealed bytea, p_public boolean) IS 'Publishes a trusted event on the project bus -- p_payload as jsonb (applications; stored as sent, not sealed) or p_sealed (the server''s sealed payload) -- and wakes every trusted run parked on its name (with p_public, untrusted runs waiting on it too); returns the event id. Raises CR005 for an unknown project, CR004 for a bad name, CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.put_artifact(p_org text, p_project text, p_key text, p_name text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_public boolean DEFAULT false, p_executable boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    IF p_key IS NULL THEN
        RAISE EXCEPTION 'outside a run an artifact needs a cache key (--key)' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = p_org AND p.slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN QUERY SELECT * FROM cryo._put_artifact(
        p_org, p_project, NULL, p_key, p_name, p_sha256, p_size, p_max_bytes, NULL, p_public,
        p_executable);
END
$$;

COMMENT ON FUNCTION cryo.put_artifact(p_org text, p_project text, p_key text, p_name text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_public boolean, p_executable boolean) IS 'Points the project''s trusted cached artifact (p_key, p_name) at a blob already stored (with p_public, published to untrusted runs; p_executable: the file was executable); returns (scope, name, sha256, size, created_at). Raises CR004 without a key or for a bad name, key, digest or size, CR005 for an unknown project, CR075 past p_max_bytes.';

CREATE FUNCTION cryo.put_compiled_workflow(p_org text, p_project text, p_name text, p_compiled jsonb) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.put_compiled_workflow(p_org text, p_project text, p_name text, p_compiled jsonb) IS 'Stores a graph or pipeline compiled by `cryopg pipeline compile --compiled` ({filename, structure, document}) under a name, its document in the clear, for cryo.submit_run. Returns nothing. Raises CR004 for a value of another shape or a bad name, CR005 for an unknown project.';

CREATE FUNCTION cryo.put_member(p_org text, p_login text, p_role text, p_by text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_by_role text;
    v_old cryo.members;
    v_id text;
BEGIN
    IF p_role IS NULL OR p_role NOT IN ('owner', 'admin', 'member', 'viewer') THEN
        RAISE EXCEPTION 'role must be owner, admin, member or viewer, not %', p_role USING ERRCODE = 'CR004';
    END IF;
    IF p_login IS NULL OR p_login !~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$' THEN
        RAISE EXCEPTION 'member login % must be letters, digits, _ . @ - (up to 128)', p_login
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    SELECT * INTO v_old FROM cryo.members WHERE org = p_org AND login = p_login FOR UPDATE;
    IF p_by IS NOT NULL THEN
        SELECT role INTO v_by_role FROM cryo.members WHERE org = p_org AND login = p_by;
        IF cryo._role_rank(v_by_role) < 3
           OR ((p_role = 'owner' OR v_old.role = 'owner') AND v_by_role <> 'owner') THEN
            RAISE EXCEPTION 'role % cannot make % a member of role %', coalesce(v_by_role, 'none'),
                p_login, p_role USING ERRCODE = 'CR020';
        END IF;
    END IF;
    IF v_old.role = 'owner' AND p_role <> 'owner'
       AND NOT EXISTS (SELECT 1 FROM cryo.members
                        WHERE org = p_org AND role = 'owner' AND login <> p_login) THEN
        RAISE EXCEPTION '% is the last owner of org %', p_login, p_org USING ERRCODE = 'CR004';
    END IF;
    IF v_old.id IS NOT NULL THEN
        UPDATE cryo.members SET role = p_role WHERE id = v_old.id;
        RETURN v_old.id;
    END IF;
    v_id := 'mem-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    INSERT INTO cryo.members (id, org, login, role, created_at)
    VALUES (v_id, p_org, p_login, p_role, cryo.now());
    RETURN v_id;
END
$_$;

COMMENT ON FUNCTION cryo.put_member(p_org text, p_login text, p_role text, p_by text) IS 'Adds a member with a role or changes its role, acting as member p_by (NULL: operator); returns the member id. Raises CR004 for a bad role or login or for demoting the last owner, CR005 for an unknown org, CR020 when p_by may not grant that.';

CREATE FUNCTION cryo.put_role_map(p_org text, p_claim text, p_value text, p_role text) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    v_created boolean;
BEGIN
    IF p_role IS NULL OR p_role NOT IN ('owner', 'admin', 'member', 'viewer') THEN
        RAISE EXCEPTION 'role must be owner, admin, member or viewer, not %', p_role USING ERRCODE = 'CR004';
    END IF;
    IF p_claim IS NULL OR p_claim !~ '^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$' THEN
        RAISE EXCEPTION 'a claim name is 1 to 128 letters, digits and _ : . / - (starting with a letter or _)'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_claim IN ('sub', 'iss', 'aud', 'exp', 'iat', 'nbf', 'nonce', 'azp', 'email') THEN
        RAISE EXCEPTION 'claim % names the person or the token, not a group or role', p_claim
            USING ERRCODE = 'CR004';
    END IF;
    IF coalesce(length(p_value), 0) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'a claim value is 1 to 256 characters' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.oidc_role_maps AS r (org, claim, value, role, created_at)
    VALUES (p_org, p_claim, p_value, p_role, cryo.now())
    ON CONFLICT (org, claim, value) DO UPDATE SET role = excluded.role
    RETURNING (r.xmax = 0) INTO v_created;
    RETURN v_created;
END
$_$;

COMMENT ON FUNCTION cryo.put_role_map(p_org text, p_claim text, p_value text, p_role text) IS 'Maps ID token claim p_claim holding p_value to member role p_role in the org (replacing an earlier role for it); returns true when new. Raises CR004 for a bad role, claim name (or one naming the person or token) or value, CR005 for an unknown org.';

CREATE FUNCTION cryo.put_run_artifact(p_run_id text, p_token uuid, p_key text, p_name text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_public boolean DEFAULT false, p_executable boolean DEFAULT false) RETURNS TABLE(scope text, name text, sha256 text, size bigint, created_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT * FROM cryo._put_artifact(
        cryo._run_org(p_run_id), cryo._run_project(p_run_id), p_run_id, p_key, p_name,
        p_sha256, p_size, p_max_bytes, p_run_id, p_public, p_executable);
END
$$;

COMMENT ON FUNCTION cryo.put_run_artifact(p_run_id text, p_token uuid, p_key text, p_name text, p_sha256 text, p_size bigint, p_max_bytes bigint, p_public boolean, p_executable boolean) IS 'Points the run''s artifact p_name (or, with p_key, the project''s cached artifact) at a blob already stored, remembering whether the file was executable (p_executable); returns (scope, name, sha256, size, created_at). An untrusted run''s put is tainted and never replaces a trusted artifact; a trusted run''s p_public lets untrusted runs read it. Raises CR002 for a stale claim token, CR004 for a bad name, key, digest or size, CR075 past p_max_bytes, CR170 when an untrusted run names a blob it did not upload through the server (cryo.record_run_artifact_upload) and no published artifact names.';

CREATE FUNCTION cryo.put_workflow(p_org text, p_project text, p_name text, p_filename text, p_interpreter text, p_source bytea, p_graph jsonb DEFAULT NULL::jsonb, p_workdir text DEFAULT NULL::text, p_digest bytea DEFAULT NULL::bytea, p_by text DEFAULT NULL::text, p_base_version integer DEFAULT NULL::integer, p_timeout double precision DEFAULT NULL::double precision, p_priority integer DEFAULT NULL::integer) RETURNS integer
    LANGUAGE plpgsql
    AS $_$
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
$_$;

COMMENT ON FUNCTION cryo.put_workflow(p_org text, p_project text, p_name text, p_filename text, p_interpreter text, p_source bytea, p_graph jsonb, p_workdir text, p_digest bytea, p_by text, p_base_version integer, p_timeout double precision, p_priority integer) IS 'Stores a sealed script (or, with p_graph, a sealed graph document and its compiled structure) under a name in a project, replacing any earlier one and keeping it as a new version by p_by (unless p_digest, filename, interpreter, directory, timeout and priority equal the current version''s); p_workdir is the absolute directory it was stored from, which runs started by name get (a local agent runs them there); p_timeout (seconds) and p_priority are the defaults of its runs; the schedules and handlers its on names replace those its earlier version registered. Returns the current version number. Raises CR005 for an unknown project, CR004 for a bad name, a relative working directory, or a bad timeout or priority, CR240 when p_base_version is given and is not the current version (0: the workflow must not exist yet).';

CREATE FUNCTION cryo.queue_position(p_run_id text) RETURNS integer
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    SELECT cryo._app_run_check(p_run_id);
    SELECT cryo._queue_position(p_run_id)
$$;

COMMENT ON FUNCTION cryo.queue_position(p_run_id text) IS 'Returns a queued run''s 1-based position in its concurrency group''s queue, or NULL when it is not queued. Raises CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.read_approvals(p_run_id text, p_node text) RETURNS TABLE(approver text, answer text, answered_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT a.approver, a.answer, min(a.answered_at) FROM cryo.node_approvals a
     WHERE a.run_id = p_run_id AND a.node_id = p_node
     GROUP BY a.approver, a.answer ORDER BY 3, 1
$$;

COMMENT ON FUNCTION cryo.read_approvals(p_run_id text, p_node text) IS 'Returns the answers approval node p_node of graph run p_run_id got (approver, approved or rejected, when), oldest first. Raises nothing.';

CREATE FUNCTION cryo.read_checkpoints(p_run_id text, p_limit integer DEFAULT 1000) RETURNS TABLE(seq integer, family text, name text, ordinal integer, label text, attempt integer, status text, exit_code integer, due_at timestamp with time zone, created_at timestamp with time zone, completed_at timestamp with time zone, ref_run_id text)
    LANGUAGE sql STABLE
    AS $$
    SELECT j.seq, j.key_family, j.key_name, j.key_ordinal, j.label, j.attempt, j.status,
           j.exit_code, j.due_at, j.created_at, j.completed_at, j.ref_run_id
      FROM cryo.journal j WHERE j.run_id = p_run_id
     ORDER BY j.seq LIMIT greatest(p_limit, 0)
$$;

COMMENT ON FUNCTION cryo.read_checkpoints(p_run_id text, p_limit integer) IS 'Returns up to p_limit of a run''s journal entries in position order, without payloads (status pending: running now, or waited on). Raises nothing.';

CREATE FUNCTION cryo.read_event(p_id bigint) RETURNS TABLE(name text, payload bytea, payload_clear jsonb)
    LANGUAGE sql STABLE
    AS $$
    SELECT e.name, e.payload, e.payload_clear FROM cryo.events e WHERE e.id = p_id
$$;

COMMENT ON FUNCTION cryo.read_event(p_id bigint) IS 'Returns one bus event''s name and payload (sealed, or clear from SQL); no row when it is gone. Raises nothing.';

CREATE FUNCTION cryo.read_graph(p_run_id text) RETURNS TABLE(graph jsonb, source bytea)
    LANGUAGE sql STABLE
    AS $$
    SELECT r.graph, r.source FROM cryo.runs r WHERE r.id = p_run_id AND r.kind = 'graph'
$$;

COMMENT ON FUNCTION cryo.read_graph(p_run_id text) IS 'Returns a graph run''s clear structure and its sealed document; no row for a script run. Raises nothing.';

CREATE FUNCTION cryo.read_graph_logs(p_run_id text, p_jobs text[], p_after bigint[], p_limit integer DEFAULT 500) RETURNS TABLE(job_run_id text, id bigint, data bytea, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.job, l.id, l.data, l.created_at
      FROM unnest(p_jobs, p_after) AS c(job, after)
      JOIN cryo.graph_jobs(p_run_id) g ON g.job_run_id = c.job
      CROSS JOIN LATERAL (SELECT l.id, l.data, l.created_at FROM cryo.logs l
                           WHERE l.run_id = c.job AND l.id > coalesce(c.after, 0)
                           ORDER BY l.id LIMIT p_limit) l
     ORDER BY l.id
$$;

COMMENT ON FUNCTION cryo.read_graph_logs(p_run_id text, p_jobs text[], p_after bigint[], p_limit integer) IS 'Returns sealed log chunks of the jobs of a graph run, with when each was stored: for each job in p_jobs (one of the run''s, see graph_jobs) up to p_limit chunks after the id at the same place in p_after, all in chunk order. Raises nothing.';

CREATE FUNCTION cryo.read_graph_nodes(p_run_id text) RETURNS TABLE(node_id text, type text, status text, items integer, item integer, item_status text, attempt integer, output bytea, error text, job_run_id text, wait_kind text, started_at timestamp with time zone, finished_at timestamp with time zone, output_clear jsonb, cached boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT n.node_id, n.type, n.status, n.items, i.item, i.status, i.attempt,
           coalesce(i.output, CASE WHEN i.item IS NULL THEN n.output END), coalesce(i.error, n.error),
           i.job_run_id, i.wait_kind, n.started_at, n.finished_at,
           coalesce(i.output_clear, CASE WHEN i.item IS NULL THEN n.output_clear END),
           coalesce(i.cached, false)
      FROM cryo.node_states n
      LEFT JOIN cryo.node_instances i ON i.run_id = n.run_id AND i.node_id = n.node_id
     WHERE n.run_id = p_run_id
     ORDER BY n.node_id, i.item
$$;

COMMENT ON FUNCTION cryo.read_graph_nodes(p_run_id text) IS 'Returns every node of a graph run with each started instance (a fan-out''s items, a loop''s iterations): status, attempt, sealed output (or output_clear, for one holding no user data), error, the child run doing it, and cached (its output came from the node''s cache). Raises nothing.';

CREATE FUNCTION cryo.read_history(p_run_id text) RETURNS TABLE(id bigint, kind text, family text, name text, ordinal integer, attempt integer, payload bytea, created_at timestamp with time zone, label text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
    SELECT cryo._app_run_check(p_run_id);
    SELECT h.id, h.kind, h.key_family, h.key_name, h.key_ordinal, h.attempt, h.payload,
           h.created_at, j.label
      FROM cryo.history h
      LEFT JOIN cryo.journal j
        ON h.key_family IS NOT NULL AND h.key_ordinal IS NOT NULL AND j.run_id = h.run_id
       AND j.path = h.key_family || '/' || replace(replace(h.key_name, '%', '%25'), '/', '%2F')
                    || '/' || h.key_ordinal
     WHERE h.run_id = p_run_id ORDER BY h.id
$$;

COMMENT ON FUNCTION cryo.read_history(p_run_id text) IS 'Returns a run''s history events in order (payloads sealed), each with the label of its durable call when it has one. Raises CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.read_journal(p_run_id text, p_token uuid) RETURNS TABLE(seq integer, path text, family text, name text, ordinal integer, status text, result bytea, exit_code integer, answer_clear jsonb, ref_run_id text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY
        SELECT j.seq, j.path, j.key_family, j.key_name, j.key_ordinal, j.status, j.result,
               j.exit_code, j.answer_clear, j.ref_run_id
          FROM cryo.journal j WHERE j.run_id = p_run_id ORDER BY j.seq;
END
$$;

COMMENT ON FUNCTION cryo.read_journal(p_run_id text, p_token uuid) IS 'Returns the claimed run''s memos in position order (results sealed; answer_clear holds engine answers such as child ids and counts, or a payload an application sent in the clear). Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.read_last_attempt_log(p_run_id text) RETURNS TABLE(id bigint, data bytea, created_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY
    SELECT l.id, l.data, l.created_at FROM cryo.logs l JOIN cryo.runs r ON r.id = l.run_id
     WHERE l.run_id = p_run_id AND l.attempt = r.attempt ORDER BY l.id;
END
$$;

COMMENT ON FUNCTION cryo.read_last_attempt_log(p_run_id text) IS 'Returns the sealed log chunks of a run''s latest attempt, in order. Raises nothing.';

CREATE FUNCTION cryo.read_log_archive(p_run_id text) RETURNS TABLE(object_key text, last_chunk_id bigint, bytes bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT a.object_key, a.last_chunk_id, a.bytes FROM cryo.log_archives a
     WHERE a.run_id = p_run_id
$$;

COMMENT ON FUNCTION cryo.read_log_archive(p_run_id text) IS 'Returns the object key, last chunk id and size of a run''s log moved to the object store; no row when it has not moved. Raises nothing.';

CREATE FUNCTION cryo.read_log_page(p_run_id text, p_after bigint, p_upto bigint, p_max_bytes integer) RETURNS TABLE(id bigint, data bytea)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_total bigint := 0;
BEGIN
    FOR id, data IN
        SELECT l.id, l.data FROM cryo.logs l
         WHERE l.run_id = p_run_id AND l.id > p_after AND l.id <= p_upto
         ORDER BY l.id
    LOOP
        RETURN NEXT;
        v_total := v_total + length(data);
        EXIT WHEN v_total >= p_max_bytes;
    END LOOP;
END
$$;

COMMENT ON FUNCTION cryo.read_log_page(p_run_id text, p_after bigint, p_upto bigint, p_max_bytes integer) IS 'Returns a run''s sealed log chunks after chunk id p_after up to p_upto, in order, stopping after the chunk that brings the page to p_max_bytes. Raises nothing.';

CREATE FUNCTION cryo.read_logs(p_run_id text, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500) RETURNS TABLE(id bigint, data bytea, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT l.id, l.data, l.created_at FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id > p_after
     ORDER BY l.id LIMIT p_limit
$$;

COMMENT ON FUNCTION cryo.read_logs(p_run_id text, p_after bigint, p_limit integer) IS 'Returns up to p_limit sealed log chunks of a run after chunk id p_after, in order, each with the time it was stored. Raises nothing.';

CREATE FUNCTION cryo.read_logs_before(p_run_id text, p_before bigint, p_limit integer DEFAULT 64) RETURNS TABLE(id bigint, data bytea, created_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT l.id, l.data, l.created_at FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id < p_before
     ORDER BY l.id DESC LIMIT greatest(p_limit, 0)
$$;

COMMENT ON FUNCTION cryo.read_logs_before(p_run_id text, p_before bigint, p_limit integer) IS 'Returns up to p_limit sealed log chunks of a run before chunk id p_before, newest first, each with the time it was stored (a log viewer reading backwards). Raises nothing.';

CREATE FUNCTION cryo.read_metrics(p_log_move_after interval DEFAULT NULL::interval, p_gone_after interval DEFAULT '00:02:00'::interval) RETURNS TABLE(metric text, org text, project text, label text, label2 text, value double precision, total double precision)
    LANGUAGE plpgsql STABLE
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        WITH agents AS MATERIALIZED (
            SELECT o.slug AS org, a.state, a.build, a.capabilities
              FROM cryo.orgs o CROSS JOIN LATERAL cryo.list_agents(o.slug, p_gone_after) a
        )
        SELECT m.metric, m.org, m.project, m.label, m.label2, sum(m.n)::double precision,
               sum(m.total)
          FROM (SELECT c.metric, c.org, c.project, c.label, c.label2, c.n, c.total
                  FROM cryo.metric_counts c
                UNION ALL
                SELECT d.metric, d.org, d.project, d.label, d.label2, d.n, d.total
                  FROM cryo.metric_deltas d) m
         GROUP BY 1, 2, 3, 4, 5
        UNION ALL
        SELECT 'queue_oldest_pending_seconds', o.slug, '', '', '',
               greatest(extract(epoch FROM cryo.now() - x.enqueued_at), 0)::double precision, 0
          FROM cryo.orgs o
          CROSS JOIN LATERAL (SELECT q.enqueued_at FROM cryo.queue q
                               WHERE q.org = o.slug AND q.state = 'pending'
                               ORDER BY q.enqueued_at LIMIT 1) x
        UNION ALL
        SELECT 'agents', a.org, '', a.state, coalesce(a.build, ''), count(*), 0
          FROM agents a
         GROUP BY a.org, a.state, a.build
        UNION ALL
        SELECT 'agent_capabilities', a.org, '', cap, '', count(*), 0
          FROM agents a
         CROSS JOIN LATERAL unnest(a.capabilities) cap
         WHERE a.state IN ('idle', 'busy')
         GROUP BY a.org, cap
        UNION ALL
        SELECT 'queue_pending_capability', o.slug, '', cap, '', count(*), 0
          FROM cryo.orgs o
          CROSS JOIN LATERAL (SELECT q.required_caps FROM cryo.queue q
                               WHERE q.org = o.slug AND q.state = 'pending'
                               ORDER BY q.enqueued_at LIMIT 1000) p
          CROSS JOIN LATERAL unnest(p.required_caps) cap
         WHERE cap <> 'graph'
         GROUP BY o.slug, cap;
    RETURN QUERY
    SELECT 'log_move_backlog'::text, ''::text, ''::text, ''::text, ''::text,
           count(*)::double precision, 0::double precision
      FROM cryo.logs_to_archive(p_log_move_after, 10000)
     WHERE p_log_move_after IS NOT NULL;
END
$$;

COMMENT ON FUNCTION cryo.read_metrics(p_log_move_after interval, p_gone_after interval) IS 'Returns every metric series the database holds as (metric, org, project, label, label2, value, total): counters and the queue depth as of the last cryo.fold_metrics, queue_oldest_pending_seconds per org, agents by state and build, agent_capabilities of live agents, queue_pending_capability (of up to 1000 oldest pending runs an org), and log_move_backlog (up to 10000; only with p_log_move_after). A read: changes nothing. Raises nothing.';

CREATE FUNCTION cryo.read_outputs(p_run_id text) RETURNS TABLE(key text, value bytea, value_clear jsonb)
    LANGUAGE sql STABLE
    AS $$
    SELECT o.key, o.value, o.value_clear FROM cryo.run_outputs o WHERE o.run_id = p_run_id ORDER BY o.key
$$;

COMMENT ON FUNCTION cryo.read_outputs(p_run_id text) IS 'Returns a run''s outputs by key: sealed, or (value NULL) value_clear, an answer holding no user data as {"answer": v}. Raises nothing.';

CREATE FUNCTION cryo.read_run_detail(p_run_id text) RETURNS TABLE(input bytea, input_clear jsonb, parent_run_id text, trigger_kind text, trigger_name text, trigger_depth integer, untrusted boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT r.input, r.input_clear, r.parent_run_id, r.trigger_kind, r.trigger_name, r.trigger_depth,
           r.untrusted
      FROM cryo.runs r WHERE r.id = p_run_id
$$;

COMMENT ON FUNCTION cryo.read_run_detail(p_run_id text) IS 'Returns a run''s input (sealed, or in the clear until its first claim seals it; both for a handler run of a sealed event, see _start_triggered), its parent run id, the trigger (kind, name, handler depth) that started it and whether it runs untrusted; no row for an unknown run. Raises nothing.';

CREATE FUNCTION cryo.read_schedule_input(p_org text, p_project text, p_name text) RETURNS bytea
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_input bytea;
BEGIN
    SELECT s.input INTO v_input FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN v_input;
END
$$;

COMMENT ON FUNCTION cryo.read_schedule_input(p_org text, p_project text, p_name text) IS 'Returns a schedule''s sealed input (NULL when it has none). Raises CR005 for an unknown schedule.';

CREATE FUNCTION cryo.read_secret_values(p_org text, p_project text) RETURNS TABLE(name text, value bytea)
    LANGUAGE sql STABLE
    AS $$
    SELECT s.name, s.value FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;

COMMENT ON FUNCTION cryo.read_secret_values(p_org text, p_project text) IS 'Returns a project''s secrets with their sealed values, by name, for the server to mask them in what users read. Raises nothing.';

CREATE FUNCTION cryo.read_status_post(p_run_id text) RETURNS TABLE(webhook text, url text, state text, attempts integer, last_error text)
    LANGUAGE sql STABLE
    AS $$
    SELECT p.webhook, p.url, p.state, p.attempts, p.last_error FROM cryo.status_posts p
     WHERE p.run_id = p_run_id
$$;

COMMENT ON FUNCTION cryo.read_status_post(p_run_id text) IS 'Returns the commit status of a webhook run: where it goes, whether it was sent, and why not. Raises nothing.';

CREATE FUNCTION cryo.read_webhook_delivery(p_org text, p_project text, p_id bigint) RETURNS TABLE(webhook text, event text, input bytea, untrusted boolean)
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    v_d cryo.webhook_deliveries;
BEGIN
    SELECT * INTO v_d FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project AND d.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook delivery % in %/%', p_id, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF v_d.input IS NULL THEN
        RAISE EXCEPTION 'webhook delivery % was stored before deliveries kept their input: it cannot be delivered again', p_id
            USING ERRCODE = 'CR241';
    END IF;
    RETURN QUERY SELECT v_d.webhook, v_d.event, v_d.input, v_d.untrusted;
END
$$;

COMMENT ON FUNCTION cryo.read_webhook_delivery(p_org text, p_project text, p_id bigint) IS 'Returns a stored delivery''s webhook, event, sealed input and untrusted flag, for a redelivery. Raises CR005 for an unknown delivery, CR241 for one stored without its input.';

CREATE FUNCTION cryo.record_run_artifact_upload(p_run_id text, p_token uuid, p_sha256 text, p_size bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_now timestamptz := cryo.now();
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    IF NOT cryo._run_untrusted(p_run_id) THEN
        RETURN false;
    END IF;
    -- The project's artifact lock: the store sweep does not remove these bytes meanwhile.
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || v_org || ':' || v_project, 0));
    INSERT INTO cryo.artifact_blobs AS b (org, project, sha256, size, created_at, touched_at,
                                          untrusted_known)
    VALUES (v_org, v_project, p_sha256, p_size, v_now, v_now, true)
    ON CONFLICT (org, project, sha256) DO UPDATE
       SET touched_at = excluded.touched_at, untrusted_known = true;
    RETURN true;
END
$$;

COMMENT ON FUNCTION cryo.record_run_artifact_upload(p_run_id text, p_token uuid, p_sha256 text, p_size bigint) IS 'Records that the claimed run uploaded the blob p_sha256 of p_size bytes through the server, which checked the bytes against the digest; for an untrusted run, untrusted runs may then know the blob and name it (returns true), for a trusted run nothing changes (false). Call it only after that check. Raises CR002 for a stale claim token, CR004 for a malformed digest or size.';

CREATE FUNCTION cryo.record_step(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_label text, p_result bytea, p_exit_code integer, p_path text DEFAULT NULL::text, p_started_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text := cryo.call_path(p_family, coalesce(p_name, ''), p_ordinal, p_path);
    v_seq integer;
    v_prior cryo.journal;
BEGIN
    v_seq := cryo._record(v_q, p_position, v_path, p_family, coalesce(p_name, ''), p_ordinal,
                          p_result, NULL, p_exit_code, NULL, p_label, p_complete_marker => true,
                          p_started_at => p_started_at);
    IF v_seq IS NULL THEN
        SELECT * INTO v_prior FROM cryo.journal j WHERE j.run_id = p_run_id AND j.path = v_path;
        IF v_prior.attempt = (SELECT r.attempt FROM cryo.runs r WHERE r.id = p_run_id)
           AND v_prior.status = 'done' THEN
            RETURN v_prior.seq;
        END IF;
        RAISE EXCEPTION 'run % already recorded %', p_run_id, v_path USING ERRCODE = 'CR007';
    END IF;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'step_completed', p_family,
                          coalesce(p_name, ''), p_ordinal);
    PERFORM cryo._notify_run(p_run_id);
    RETURN v_seq;
END
$$;

COMMENT ON FUNCTION cryo.record_step(p_run_id text, p_token uuid, p_position integer, p_family text, p_name text, p_ordinal integer, p_label text, p_result bytea, p_exit_code integer, p_path text, p_started_at timestamp with time zone) IS 'Records a durable call''s sealed result at the agent''s position p_position for the claimed run; the path is derived from (family, name, ordinal) and p_path, when given, must agree; p_started_at, when earlier, is the entry''s start time (never before the run was created). Returns its position (seq), the same one again when this attempt already recorded it. Raises CR002 for a stale claim token, CR004 for a malformed identity, CR009 for a disagreeing path, CR007 when an earlier attempt recorded the path.';

CREATE FUNCTION cryo.record_steps(p_run_ids text[], p_tokens uuid[], p_positions integer[], p_families text[], p_names text[], p_ordinals integer[], p_labels text[], p_results bytea[], p_exit_codes integer[], p_paths text[], p_started_ats timestamp with time zone[] DEFAULT NULL::timestamp with time zone[]) RETURNS TABLE(n integer, seq integer, error_code text, error_message text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_run_ids), 0);
    v_i integer;
BEGIN
    IF coalesce(cardinality(p_tokens), 0) <> v_n OR coalesce(cardinality(p_positions), 0) <> v_n
       OR coalesce(cardinality(p_families), 0) <> v_n OR coalesce(cardinality(p_names), 0) <> v_n
       OR coalesce(cardinality(p_ordinals), 0) <> v_n OR coalesce(cardinality(p_labels), 0) <> v_n
       OR coalesce(cardinality(p_results), 0) <> v_n
       OR coalesce(cardinality(p_exit_codes), 0) <> v_n
       OR coalesce(cardinality(p_paths), 0) <> v_n THEN
        RAISE EXCEPTION 'record_steps needs arrays of one length (% run ids)', v_n
            USING ERRCODE = 'CR004';
    END IF;
    FOR v_i IN SELECT u.i FROM unnest(p_run_ids) WITH ORDINALITY AS u(run_id, i)
                ORDER BY u.run_id, u.i
    LOOP
        n := v_i;
        BEGIN
            seq := cryo.record_step(p_run_ids[v_i], p_tokens[v_i], p_positions[v_i],
                                    p_families[v_i], p_names[v_i], p_ordinals[v_i],
                                    p_labels[v_i], p_results[v_i], p_exit_codes[v_i],
                                    p_paths[v_i], p_started_ats[v_i]);
            error_code := NULL;
            error_message := NULL;
        EXCEPTION WHEN OTHERS THEN
            seq := NULL;
            GET STACKED DIAGNOSTICS error_code = RETURNED_SQLSTATE,
                                    error_message = MESSAGE_TEXT;
        END;
        RETURN NEXT;
    END LOOP;
END
$$;

COMMENT ON FUNCTION cryo.record_steps(p_run_ids text[], p_tokens uuid[], p_positions integer[], p_families text[], p_names text[], p_ordinals integer[], p_labels text[], p_results bytea[], p_exit_codes integer[], p_paths text[], p_started_ats timestamp with time zone[]) IS 'Records each listed step as cryo.record_step does, in one transaction; returns per item (n, its 1-based index) the seq, or NULL with the SQLSTATE and message that refused that item alone. Raises CR004 for arrays of different lengths.';

CREATE FUNCTION cryo.redeliver_webhook(p_org text, p_project text, p_id bigint, p_trigger jsonb, p_input bytea, p_payload bytea, p_by text, p_refused text DEFAULT NULL::text) RETURNS TABLE(id bigint, outcome text, run_id text, event_id bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_d cryo.webhook_deliveries;
    v_hook cryo.webhooks;
    v_id bigint;
    v_route record;
BEGIN
    SELECT * INTO v_d FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project AND d.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook delivery % in %/%', p_id, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF v_d.input IS NULL OR p_input IS NULL THEN
        RAISE EXCEPTION 'webhook delivery % was stored before deliveries kept their input: it cannot be delivered again', p_id
            USING ERRCODE = 'CR241';
    END IF;
    SELECT * INTO v_hook FROM cryo.webhooks w
     WHERE w.org = p_org AND w.project = p_project AND w.name = v_d.webhook;
    INSERT INTO cryo.webhook_deliveries (org, project, webhook, body_hash, event, input, untrusted,
                                         redelivery_of, redelivered_by, created_at)
    VALUES (p_org, p_project, v_d.webhook, v_d.body_hash, v_d.event, p_input, v_d.untrusted,
            coalesce(v_d.redelivery_of, v_d.id), p_by, cryo.now())
    RETURNING webhook_deliveries.id INTO v_id;
    v_route := cryo._route_delivery(v_hook, v_d.event, p_trigger, p_input, p_payload, v_d.untrusted,
                                    p_refused);
    UPDATE cryo.webhook_deliveries d
       SET outcome = v_route.outcome, run_id = v_route.run_id, event_id = v_route.event_id
     WHERE d.org = p_org AND d.project = p_project AND d.id = v_id;
    RETURN QUERY SELECT v_id, v_route.outcome, v_route.run_id, v_route.event_id;
END
$$;

COMMENT ON FUNCTION cryo.redeliver_webhook(p_org text, p_project text, p_id bigint, p_trigger jsonb, p_input bytea, p_payload bytea, p_by text, p_refused text) IS 'Delivers a stored webhook delivery again as a new delivery (redelivery_of the first, redelivered_by p_by), routed as deliver_webhook routes one (p_refused: why its input fails the workflow''s input_schema now), without the body-hash dedup; returns (id, outcome, run_id, event_id). Raises CR005 for an unknown delivery or a workflow gone, CR241 for a delivery stored without its input.';

CREATE FUNCTION cryo.register_agent(p_org text, p_agent_id text, p_capabilities text[], p_build text DEFAULT NULL::text, p_instance text DEFAULT NULL::text, p_last_claim_at timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS boolean
    LANGUAGE sql
    AS $$
    INSERT INTO cryo.agents (id, org, capabilities, registered_at, last_seen_at, build,
                             instance, last_claim_at, replica)
    VALUES (p_agent_id, p_org, p_capabilities, cryo.now(), cryo.now(), p_build, p_instance,
            p_last_claim_at, nullif(current_setting('cryo.replica_id', true), ''))
    ON CONFLICT (org, id) DO UPDATE  -- an org's agent ids are its own (V0013)
       SET capabilities = excluded.capabilities, last_seen_at = excluded.last_seen_at,
           -- another process under an old id is a restarted agent: a drain was for the old one
           drain_requested_at = CASE WHEN excluded.instance IS DISTINCT FROM cryo.agents.instance
                                     THEN NULL ELSE cryo.agents.drain_requested_at END,
           build = excluded.build, instance = excluded.instance,
           last_claim_at = coalesce(excluded.last_claim_at, cryo.agents.last_claim_at),
           replica = excluded.replica,  -- the replica it claims through (cryo.replica_id)
           gone_at = NULL  -- it claims: it is here
    RETURNING drain_requested_at IS NOT NULL
$$;

COMMENT ON FUNCTION cryo.register_agent(p_org text, p_agent_id text, p_capabilities text[], p_build text, p_instance text, p_last_claim_at timestamp with time zone) IS 'Records (or refreshes) an agent: the capabilities it advertises, its build, its process instance (a new one clears a drain asked of the old), when it last received a run (a known one is kept when NULL), the server replica it claims through (the session''s cryo.replica_id), and that it is not gone. Returns true when the agent was asked to drain. Raises nothing of its own.';

CREATE FUNCTION cryo.reject_node(p_run_id text, p_node text, p_payload bytea, p_by text, p_auth text DEFAULT NULL::text, p_item integer DEFAULT NULL::integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_run cryo.runs := cryo._approvable(p_run_id);
BEGIN
    PERFORM 1 FROM cryo._approval_record(v_run, p_node, p_by, p_auth, 'rejected', p_item);
    IF NOT FOUND OR NOT cryo._instance_reject(p_run_id, v_run.org, v_run.project, p_node, p_by,
                                              p_payload, p_item) THEN
        RETURN false;
    END IF;
    PERFORM cryo._graph_poke(p_run_id, 'approval_received');
    RETURN true;
END
$$;

COMMENT ON FUNCTION cryo.reject_node(p_run_id text, p_node text, p_payload bytea, p_by text, p_auth text, p_item integer) IS 'Turns down a waiting approval node of a graph run (its item p_item alone when given, else every waiting item; rejected by p_by, signed in with token or session p_auth, with a sealed payload holding the comment): one rejection fails the node, so the run fails (its always nodes still run); returns false when that node (or item) is not waiting for an approval. Raises CR003 for an unknown run, CR006 for a finished one, CR225 when p_by answered it already, CR226 when p_by lacks the node''s role or group.';

CREATE FUNCTION cryo.release_claim(p_run_id text, p_token uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    IF (SELECT cancel_requested FROM cryo.runs WHERE id = p_run_id) THEN
        PERFORM cryo._finalize(p_run_id, 'cancelled', NULL, 'cancelled');
        RETURN;
    END IF;
    PERFORM cryo._release(ARRAY[p_run_id], 'released');
END
$$;

COMMENT ON FUNCTION cryo.release_claim(p_run_id text, p_token uuid) IS 'Gives a claimed run back to the queue now (or ends it cancelled if a cancel was asked). Returns nothing. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.release_lease(p_run_id text, p_token uuid, p_group text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue;
BEGIN
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id;
    IF FOUND THEN
        PERFORM cryo._lock_group(v_q.org, v_q.project, p_group);
    END IF;
    v_q := cryo._claimed_row(p_run_id, p_token);
    IF NOT EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = v_q.org AND l.project = v_q.project
                      AND l.grp = p_group AND l.holder_run_id = p_run_id) THEN
        RETURN false;  -- a replayed release: the lease went on the first pass
    END IF;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_released', 'lock', p_group);
    RETURN cryo._release_lease(v_q.org, v_q.project, p_group, p_run_id);
END
$$;

COMMENT ON FUNCTION cryo.release_lease(p_run_id text, p_token uuid, p_group text) IS 'Gives back the claimed run''s lease on a concurrency group and hands it to the oldest waiter; returns false when the run did not hold it. Raises CR002 for a stale claim.';

CREATE FUNCTION cryo.remove_member(p_org text, p_login text, p_by text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_old cryo.members;
    v_by_role text;
BEGIN
    SELECT * INTO v_old FROM cryo.members WHERE org = p_org AND login = p_login FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no member % in org %', p_login, p_org USING ERRCODE = 'CR005';
    END IF;
    IF p_by IS NOT NULL THEN
        SELECT role INTO v_by_role FROM cryo.members WHERE org = p_org AND login = p_by;
        IF cryo._role_rank(v_by_role) < 3 OR (v_old.role = 'owner' AND v_by_role <> 'owner') THEN
            RAISE EXCEPTION 'role % cannot remove %', coalesce(v_by_role, 'none'), p_login
                USING ERRCODE = 'CR020';
        END IF;
    END IF;
    IF v_old.role = 'owner' AND NOT EXISTS (SELECT 1 FROM cryo.members
                                             WHERE org = p_org AND role = 'owner' AND login <> p_login) THEN
        RAISE EXCEPTION '% is the last owner of org %', p_login, p_org USING ERRCODE = 'CR004';
    END IF;
    -- A removed member's tokens go with it: they could never authenticate again.
    DELETE FROM cryo.tokens WHERE member_id = v_old.id;
    DELETE FROM cryo.members WHERE id = v_old.id;
END
$$;

COMMENT ON FUNCTION cryo.remove_member(p_org text, p_login text, p_by text) IS 'Removes member p_login and deletes its tokens, acting as member p_by (NULL: operator). Returns nothing. Raises CR005 for an unknown member, CR004 for the last owner, CR020 when p_by may not.';

CREATE FUNCTION cryo.rename_org(p_slug text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a name cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.orgs SET name = p_name WHERE slug = p_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_slug USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.rename_org(p_slug text, p_name text) IS 'Changes an org''s display name (the slug never changes). Returns nothing. Raises CR004 for an empty name, CR005 for an unknown org.';

CREATE FUNCTION cryo.rename_project(p_org text, p_slug text, p_name text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a name cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.projects SET name = p_name WHERE org = p_org AND slug = p_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_slug USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.rename_project(p_org text, p_slug text, p_name text) IS 'Changes a project''s display name (the slug never changes). Returns nothing. Raises CR004 for an empty name, CR005 for an unknown project.';

CREATE FUNCTION cryo.render_config(p_config jsonb, p_scope jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT cryo._render(p_config, p_scope)
$$;

COMMENT ON FUNCTION cryo.render_config(p_config jsonb, p_scope jsonb) IS 'Returns a compiled node config with its $expr and $template values rendered over a scope. Raises nothing.';

CREATE FUNCTION cryo.renew_claim(p_run_id text, p_token uuid, p_claim_seconds double precision) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._extend_claim(p_run_id, p_claim_seconds);
    RETURN (SELECT cancel_requested FROM cryo.runs WHERE id = p_run_id);
END
$$;

COMMENT ON FUNCTION cryo.renew_claim(p_run_id text, p_token uuid, p_claim_seconds double precision) IS 'Pushes back the expiry of a live claim; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.renew_log_move(p_run_id text, p_attempt_id text, p_lease interval) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_until timestamptz;
BEGIN
    UPDATE cryo.log_moves m SET lease_expires_at = cryo.now() + p_lease
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now()
    RETURNING m.lease_expires_at INTO v_until;
    IF v_until IS NULL THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    RETURN v_until;
END
$$;

COMMENT ON FUNCTION cryo.renew_log_move(p_run_id text, p_attempt_id text, p_lease interval) IS 'Extends attempt p_attempt_id''s lease on run p_run_id''s log move to p_lease from now; returns when it lapses. Raises CR100 when that attempt does not hold a live lease.';

CREATE FUNCTION cryo.rerun_graph(p_run_id text, p_from text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_old cryo.runs;
    v_new text;
    v_up text[];
    v_down text[];
    v_seed text[];
    v_bad text;
BEGIN
    v_old := cryo._run_row(p_run_id);
    IF v_old.kind <> 'graph' THEN
        RAISE EXCEPTION 'run % is not a graph run; only graph runs rerun from a node', p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo._graph_node_defs(v_old.graph) d WHERE d.node_id = p_from) THEN
        RAISE EXCEPTION 'run % has no node %', p_run_id, p_from USING ERRCODE = 'CR005';
    END IF;
    WITH RECURSIVE up(node_id) AS (
        SELECT unnest(d.deps) FROM cryo._graph_node_defs(v_old.graph) d WHERE d.node_id = p_from
        UNION
        SELECT unnest(d.deps) FROM cryo._graph_node_defs(v_old.graph) d JOIN up ON up.node_id = d.node_id
    )
    SELECT coalesce(array_agg(node_id), '{}') INTO v_up FROM up;
    WITH RECURSIVE down(node_id) AS (
        SELECT p_from
        UNION
        SELECT d.node_id FROM cryo._graph_node_defs(v_old.graph) d JOIN down ON down.node_id = ANY (d.deps)
    )
    SELECT array_agg(node_id) INTO v_down FROM down;
    IF EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = ANY (v_up)
                  AND NOT cryo._node_status_in(n.status, 'ended well')
                  AND NOT (n.status = 'failed' AND n.tolerated)) THEN
        RAISE EXCEPTION 'nodes upstream of % did not all end well in run %', p_from, p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    SELECT n.node_id INTO v_bad FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND NOT n.node_id = ANY (v_down) AND n.status = 'failed'
       AND NOT n.tolerated
     ORDER BY n.ord LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'node % failed in run % and is not downstream of %; rerun from it', v_bad,
            p_run_id, p_from USING ERRCODE = 'CR004';
    END IF;
    -- Seeded: what ended outside p_from's descendants, but not what the old run's end
    -- skipped or cancelled before it started (that runs).
    SELECT coalesce(array_agg(n.node_id), '{}') INTO v_seed FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND NOT n.node_id = ANY (v_down)
       AND (cryo._node_status_in(n.status, 'done') OR (n.status = 'failed' AND n.tolerated)
            OR (n.status = 'skipped'
                AND n.error IS DISTINCT FROM 'the run failed'
                AND n.error IS DISTINCT FROM 'the run did not fail'));
    SELECT s.run_id INTO v_new FROM cryo.submit_script(
        v_old.org, v_old.project, v_old.filename, v_old.interpreter, v_old.source, v_old.input,
        NULL, '{graph}', v_old.workflow, v_old.input_clear, p_untrusted => v_old.untrusted,
        p_graph => v_old.graph) s;
    PERFORM cryo._nodes_seed(v_new, p_run_id, v_seed);
    RETURN v_new;
END
$$;

COMMENT ON FUNCTION cryo.rerun_graph(p_run_id text, p_from text) IS 'Starts a new run of a graph run''s pinned definition and input that runs p_from and the nodes downstream of it again: every other node that ended in the old run is seeded from what it recorded (status seeded or skipped; a failure continue_on_error tolerated stays failed, tolerated), and what never started because the old run ended runs; returns the new run id. Raises CR003 for an unknown run, CR004 when it is not a graph run, a node upstream of p_from did not end well (or fail tolerated), or a node not downstream of p_from failed, CR005 for an unknown node.';

CREATE FUNCTION cryo.rerun_run(p_run_id text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_old cryo.runs;
    v_new text;
BEGIN
    v_old := cryo._run_row(p_run_id);
    SELECT s.run_id INTO v_new FROM cryo.submit_script(
        v_old.org, v_old.project, v_old.filename, v_old.interpreter, v_old.source, v_old.input,
        NULL, v_old.required_caps, v_old.workflow, v_old.input_clear,
        p_untrusted => v_old.untrusted, p_workdir => v_old.workdir, p_graph => v_old.graph) s;
    PERFORM cryo._history(v_new, v_old.org, v_old.project, 'rerun_of', 'run', p_run_id, 0);
    -- The same input: found by the same values (cryo.index_run_input).
    UPDATE cryo.runs SET input_hashes = v_old.input_hashes
     WHERE id = v_new AND v_old.input_hashes IS NOT NULL AND NOT untrusted;
    RETURN v_new;
END
$$;

COMMENT ON FUNCTION cryo.rerun_run(p_run_id text) IS 'Starts a new run with the same source (or graph), input (and its search digests), workflow name, working directory and trust as run p_run_id, and records rerun_of in its history; returns the new run id. Raises CR003 for an unknown run, and what submit_script raises (CR030 for a full group queue).';

CREATE FUNCTION cryo.rerun_run_with_input(p_run_id text, p_input bytea) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_old cryo.runs;
    v_new text;
BEGIN
    v_old := cryo._run_row(p_run_id);
    SELECT s.run_id INTO v_new FROM cryo.submit_script(
        v_old.org, v_old.project, v_old.filename, v_old.interpreter, v_old.source, p_input,
        NULL, v_old.required_caps, v_old.workflow, NULL,
        p_untrusted => v_old.untrusted, p_workdir => v_old.workdir, p_graph => v_old.graph) s;
    PERFORM cryo._history(v_new, v_old.org, v_old.project, 'rerun_of', 'run', p_run_id, 0);
    RETURN v_new;
END
$$;

COMMENT ON FUNCTION cryo.rerun_run_with_input(p_run_id text, p_input bytea) IS 'As cryo.rerun_run, with the sealed input p_input (NULL: none) in place of the old run''s input; returns the new run id. Raises CR003 for an unknown run, and what submit_script raises (CR030 for a full group queue).';

CREATE FUNCTION cryo.return_claim(p_run_id text, p_token uuid) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._unclaim(p_run_id);
END
$$;

COMMENT ON FUNCTION cryo.return_claim(p_run_id text, p_token uuid) IS 'Gives back a claim its agent never received: the run is pending again, its attempt as before the claim. Returns nothing. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.revoke_session(p_org text, p_session_id text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.sessions SET revoked_at = cryo.now()
     WHERE org = p_org AND id = p_session_id AND revoked_at IS NULL;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.sessions WHERE org = p_org AND id = p_session_id) THEN
        RAISE EXCEPTION 'no session % in org %', p_session_id, p_org USING ERRCODE = 'CR005';
    END IF;
    RETURN false;
END
$$;

COMMENT ON FUNCTION cryo.revoke_session(p_org text, p_session_id text) IS 'Revokes a session of the org at once; returns false when it was already revoked. Raises CR005 for a session not of that org.';

CREATE FUNCTION cryo.revoke_token(p_org text, p_token_id text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.tokens SET revoked_at = cryo.now()
     WHERE org = p_org AND id = p_token_id AND revoked_at IS NULL;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.tokens WHERE org = p_org AND id = p_token_id) THEN
        RAISE EXCEPTION 'no token % in org %', p_token_id, p_org USING ERRCODE = 'CR005';
    END IF;
    RETURN false;
END
$$;

COMMENT ON FUNCTION cryo.revoke_token(p_org text, p_token_id text) IS 'Revokes a token at once; returns false when it was already revoked. Raises CR005 for a token not of that org.';

CREATE FUNCTION cryo.rewrap_org_keys(p_orgs text[], p_old bytea[], p_new bytea[]) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_orgs), 0);
    v_done integer;
BEGIN
    IF coalesce(cardinality(p_old), 0) <> v_n OR coalesce(cardinality(p_new), 0) <> v_n THEN
        RAISE EXCEPTION 'rewrap_org_keys needs arrays of one length' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.orgs o SET wrapped_key = u.new
      FROM unnest(p_orgs, p_old, p_new) AS u(org, old, new)
     WHERE o.slug = u.org AND o.wrapped_key = u.old AND u.new IS NOT NULL;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done <> v_n THEN
        RAISE EXCEPTION 'an org key changed during the rotation (% of % matched); nothing was rewrapped',
            v_done, v_n USING ERRCODE = 'CR004';
    END IF;
    RETURN v_done;
END
$$;

COMMENT ON FUNCTION cryo.rewrap_org_keys(p_orgs text[], p_old bytea[], p_new bytea[]) IS 'Replaces each org''s wrapped key p_old by p_new, all or nothing; returns how many. Raises CR004 when an array length differs or a key is no longer p_old.';

CREATE FUNCTION cryo.run_entity_cells(p_run_id text, p_limit integer DEFAULT 200) RETURNS TABLE(entity text, key text, value bytea, version bigint, created_by_run text, updated_by_run text, updated_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.entity, c.key, c.value, c.version, c.created_by_run, c.updated_by_run, c.updated_at
      FROM cryo.runs r
      JOIN cryo.state_cells c ON c.org = r.org AND c.project = r.project
     WHERE r.id = p_run_id AND c.entity IS NOT NULL
       AND (c.created_by_run = p_run_id OR c.updated_by_run = p_run_id)
     ORDER BY c.entity, c.key LIMIT greatest(p_limit, 0)
$$;

COMMENT ON FUNCTION cryo.run_entity_cells(p_run_id text, p_limit integer) IS 'Returns up to p_limit entity cells of the run''s project that the run created or wrote last, with versions (values sealed). Raises nothing.';

CREATE FUNCTION cryo.run_schedule_now(p_org text, p_project text, p_name text, p_input bytea, p_scope jsonb) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_s cryo.schedules;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN cryo._start_triggered(p_org, p_project, v_s.workflow, p_input, NULL, p_scope, false,
                                 NULL, 'schedule', p_name);
END
$$;

COMMENT ON FUNCTION cryo.run_schedule_now(p_org text, p_project text, p_name text, p_input bytea, p_scope jsonb) IS 'Starts one run of a schedule''s workflow now with the sealed p_input, marked as started by the schedule, leaving its ticks as they were; returns the run id, NULL when the workflow''s if was false. Raises CR005 for an unknown schedule or a workflow gone, CR030 when its concurrency group''s queue is full.';

CREATE FUNCTION cryo.run_state_get(p_run_id text, p_token uuid, p_entity text, p_key text, p_tainted boolean DEFAULT false) RETURNS TABLE(value bytea, version bigint, created_by_run text, updated_at timestamp with time zone, tainted boolean, published boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    RETURN QUERY SELECT c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity), p_key,
                            cryo._run_untrusted(p_run_id), p_tainted) c;
END
$$;

COMMENT ON FUNCTION cryo.run_state_get(p_run_id text, p_token uuid, p_entity text, p_key text, p_tainted boolean) IS 'Returns the cell of the claimed run''s scope (run scope when p_entity is NULL) that the run may read: a trusted run its trusted cell, or with p_tainted the tainted one; an untrusted run its tainted cell, else a published trusted one; no row when none. Raises CR002 for a stale claim token, CR004 for a malformed entity.';

CREATE FUNCTION cryo.run_state_list(p_run_id text, p_token uuid, p_entity text, p_tainted boolean DEFAULT false) RETURNS TABLE(key text, value bytea, version bigint, created_by_run text, updated_at timestamp with time zone, tainted boolean, published boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    RETURN QUERY SELECT c.key, c.value, c.version, c.created_by_run, c.updated_at, c.tainted,
                        c.published
      FROM cryo._state_read(cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity), NULL,
                            cryo._run_untrusted(p_run_id), p_tainted) c
     ORDER BY c.key;
END
$$;

COMMENT ON FUNCTION cryo.run_state_list(p_run_id text, p_token uuid, p_entity text, p_tainted boolean) IS 'Returns, in key order, every cell of the claimed run''s scope that the run may read (as run_state_get). Raises CR002 for a stale claim token, CR004 for a malformed entity.';

CREATE FUNCTION cryo.run_traceparent(p_run_id text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT r.traceparent FROM cryo.runs r WHERE r.id = p_run_id
$$;

COMMENT ON FUNCTION cryo.run_traceparent(p_run_id text) IS 'Returns the W3C traceparent stored on a run (NULL when none or no such run). Raises nothing.';

CREATE FUNCTION cryo.seal_run_input(p_run_id text, p_token uuid, p_input bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs SET input = p_input, input_clear = NULL
     WHERE id = p_run_id AND input_clear IS NOT NULL;
END
$$;

COMMENT ON FUNCTION cryo.seal_run_input(p_run_id text, p_token uuid, p_input bytea) IS 'Replaces a run''s clear input with its sealed form. Returns nothing. Raises CR002 for a stale claim token.';

CREATE FUNCTION cryo.search_runs(p_org text, p_project text, p_text text DEFAULT NULL::text, p_status text DEFAULT NULL::text, p_workflow text DEFAULT NULL::text, p_trigger text DEFAULT NULL::text, p_since timestamp with time zone DEFAULT NULL::timestamp with time zone, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_before text DEFAULT NULL::text, p_limit integer DEFAULT 50, p_order text DEFAULT NULL::text, p_top boolean DEFAULT false, p_input_hash bytea DEFAULT NULL::bytea) RETURNS TABLE(id text, org text, project text, workflow text, filename text, status text, substate text, attempt integer, exit_code integer, error text, idempotency_key text, created_at timestamp with time zone, started_at timestamp with time zone, finished_at timestamp with time zone, wake_at timestamp with time zone, agent_id text, concurrency_group text, queue_position integer, finished boolean, parent_run_id text, trig text, children bigint)
    LANGUAGE sql STABLE
    AS $$
    SELECT cryo._check_run_order(p_order);
    WITH cursor_row AS (
        SELECT c.created_at, c.id,
               cryo._run_sort_key(p_order, c.created_at, c.started_at, c.finished_at, c.status,
                                  coalesce(c.workflow, c.filename)) COLLATE "C" AS key
          FROM cryo.runs c
         WHERE c.id = p_before AND c.org = p_org AND c.project = p_project
    ), pat AS (
        SELECT '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS t,
               '%' || replace(replace(replace(p_workflow, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS w,
               left(p_order, 1) = '-' AS down
    )
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id,
           CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                WHEN r.trigger_kind IS NOT NULL THEN r.trigger_kind ELSE 'manual' END,
           (SELECT count(*) FROM cryo.runs k WHERE k.parent_run_id = r.id)
      FROM pat, cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
           CROSS JOIN LATERAL (SELECT cryo._run_sort_key(p_order, r.created_at, r.started_at,
                r.finished_at, r.status, coalesce(r.workflow, r.filename)) COLLATE "C" AS key) s
     WHERE r.org = p_org AND r.project = p_project
       AND (NOT p_top OR r.parent_run_id IS NULL)
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) ILIKE pat.w)
       AND (p_trigger IS NULL OR CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                                      ELSE coalesce(r.trigger_kind, 'manual') END = p_trigger)
       AND (p_since IS NULL OR r.created_at >= p_since)
       AND (p_until IS NULL OR r.created_at < p_until)
       AND (p_text IS NULL OR r.id ILIKE pat.t OR coalesce(r.workflow, r.filename) ILIKE pat.t
            OR r.input_clear::text ILIKE pat.t
            OR (p_input_hash IS NOT NULL AND p_input_hash = ANY (r.input_hashes))
            OR EXISTS (SELECT 1 FROM cryo.journal j WHERE j.run_id = r.id AND j.label ILIKE pat.t))
       AND (p_before IS NULL OR CASE
              WHEN p_order IS NULL THEN (r.created_at, r.id) < (SELECT c.created_at, c.id FROM cursor_row c)
              WHEN pat.down THEN (s.key, r.id) < (SELECT c.key, c.id FROM cursor_row c)
              ELSE (s.key, r.id) > (SELECT c.key, c.id FROM cursor_row c) END)
     ORDER BY CASE WHEN p_order IS NULL THEN r.created_at END DESC,
              CASE WHEN pat.down THEN s.key END DESC,
              CASE WHEN NOT pat.down THEN s.key END ASC,
              CASE WHEN NOT pat.down THEN r.id END ASC,
              r.id DESC
     LIMIT least(greatest(p_limit, 0), 200)
$$;

COMMENT ON FUNCTION cryo.search_runs(p_org text, p_project text, p_text text, p_status text, p_workflow text, p_trigger text, p_since timestamp with time zone, p_until timestamp with time zone, p_before text, p_limit integer, p_order text, p_top boolean, p_input_hash bytea) IS 'Returns one page (at most 200) of a project''s runs, children included (p_top: top-level runs only), newest first or in p_order (started, ended, duration, status or workflow; a leading - for descending) after the cursor run p_before, whose id, workflow or file name, clear input or a step label contains p_text (case-insensitive), or one of whose input''s scalar values has the keyed hash p_input_hash, filtered by status, workflow substring, trigger kind (manual, parent, schedule, webhook, event) and created_at in [p_since, p_until). Raises CR236 for an unknown p_order.';

CREATE FUNCTION cryo.send_signal(p_run_id text, p_name text, p_payload jsonb DEFAULT NULL::jsonb, p_sealed bytea DEFAULT NULL::bytea) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
DECLARE
    v_run cryo.runs;
    v_q cryo.queue;
    v_clear jsonb := CASE WHEN p_sealed IS NULL THEN coalesce(p_payload, 'null'::jsonb) END;
    v_id bigint;
BEGIN
    PERFORM cryo._app_run_check(p_run_id);
    PERFORM cryo._check_name('signal', p_name);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    v_run := cryo._run_row(p_run_id, true, p_why => 'it takes no signals');
    INSERT INTO cryo.signals (run_id, org, project, name, payload, payload_clear, sent_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_name, p_sealed, v_clear, cryo.now())
    RETURNING id INTO v_id;
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'signal_sent', 'signal', p_name);
    IF v_run.kind = 'graph' THEN  -- its driver hands the signal to a node waiting for it
        IF EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                      AND i.status = 'waiting' AND i.wait_kind = 'signal' AND i.wait_name = p_name) THEN
            PERFORM cryo._graph_poke(p_run_id, 'signal_received');
        END IF;
    ELSIF v_q.state = 'parked' AND v_q.park_reason = 'awaiting-signal' AND v_q.park_name = p_name THEN
        -- The waiter takes the oldest unconsumed signal of the name: this one.
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = v_q.park_path WHERE id = v_id;
        PERFORM cryo._wake(ARRAY[p_run_id], 'signal_received', p_sealed, v_clear, 0);
    END IF;
    RETURN v_id;
END
$$;

COMMENT ON FUNCTION cryo.send_signal(p_run_id text, p_name text, p_payload jsonb, p_sealed bytea) IS 'Sends a named signal to a live run -- p_payload as jsonb (applications; stored as sent, not sealed) or p_sealed (the server''s sealed payload) -- waking it when it waits on that name; returns the signal id. Raises CR003 for an unknown run, CR006 for a finished one, CR004 for a bad name, CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.session_info(p_secret_hash bytea) RETURNS TABLE(session_id text, org text, member text, role text, kind text, expires_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN QUERY
        SELECT s.id, s.org, m.login, m.role, s.kind, s.expires_at
          FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
         WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL AND s.expires_at > cryo.now();
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live session (signed out, expired or revoked)' USING ERRCODE = 'CR008';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.session_info(p_secret_hash bytea) IS 'Returns the live session whose secret hashes to the argument: its id, org, member login, role, kind and expiry. Raises CR008 when none is live.';

CREATE FUNCTION cryo.set_admission_queue_limit(p_org text, p_project text, p_limit integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.set_admission_queue_limit(p_org text, p_project text, p_limit integer) IS 'Sets how many runs may queue per concurrency group in a project (default 100). Returns nothing. Raises CR004 for a limit below 1, CR005 for an unknown project.';

CREATE FUNCTION cryo.set_org_key(p_org text, p_key_id text, p_wrapped bytea) RETURNS TABLE(key_id text, wrapped_key bytea)
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.orgs o SET key_id = p_key_id, wrapped_key = p_wrapped
     WHERE o.slug = p_org AND o.wrapped_key IS NULL;
    RETURN QUERY SELECT o.key_id, o.wrapped_key FROM cryo.orgs o WHERE o.slug = p_org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.set_org_key(p_org text, p_key_id text, p_wrapped bytea) IS 'Sets the org''s wrapped data key if it has none; returns the key in force. Raises CR005 for an unknown org.';

CREATE FUNCTION cryo.set_output(p_run_id text, p_token uuid, p_key text, p_value bytea) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    PERFORM cryo._check_name('output', p_key);
    INSERT INTO cryo.run_outputs (run_id, org, project, key, value, updated_at)
    VALUES (p_run_id, v_q.org, v_q.project, p_key, p_value, cryo.now())
    ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
END
$$;

COMMENT ON FUNCTION cryo.set_output(p_run_id text, p_token uuid, p_key text, p_value bytea) IS 'Sets (or replaces) a sealed output of the claimed run. Returns nothing. Raises CR002 for a stale claim, CR004 for a bad key.';

CREATE FUNCTION cryo.set_retention(p_org text, p_project text, p_runs interval DEFAULT NULL::interval, p_events interval DEFAULT NULL::interval) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.set_retention(p_org text, p_project text, p_runs interval, p_events interval) IS 'Sets how long a project keeps terminal runs after they finish (p_runs, default 90 days) and bus events (p_events, default 30 days); NULL leaves one as it is. Returns nothing. Raises CR004 when both are NULL or one is not positive, CR005 for an unknown project.';

CREATE FUNCTION cryo.set_run_traceparent(p_run_id text, p_traceparent text) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
BEGIN
    IF p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
        RAISE EXCEPTION 'not a W3C traceparent: %', left(p_traceparent, 80)
            USING ERRCODE = 'CR190';
    END IF;
    UPDATE cryo.runs SET traceparent = p_traceparent
     WHERE id = p_run_id AND traceparent IS NULL;
    RETURN FOUND;
END
$_$;

COMMENT ON FUNCTION cryo.set_run_traceparent(p_run_id text, p_traceparent text) IS 'Sets the W3C traceparent of a run that has none; returns false when the run is unknown or already has one. Raises CR190 for a malformed traceparent.';

CREATE FUNCTION cryo.set_secret(p_org text, p_project text, p_name text, p_value bytea) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_created boolean;
BEGIN
    IF NOT cryo._secret_name_ok(p_name) THEN
        RAISE EXCEPTION 'secret name % must be an environment variable name (letters, digits, _), not reserved (CRYO*, PATH, HOME, LD_*, ...)', p_name
            USING ERRCODE = 'CR004';
    END IF;
    IF p_value IS NULL THEN
        RAISE EXCEPTION 'a secret needs a value' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.secrets AS s (org, project, name, value, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_value, v_now, v_now)
    ON CONFLICT (org, project, name) DO UPDATE SET value = excluded.value, updated_at = v_now
    RETURNING (s.xmax = 0) INTO v_created;
    RETURN v_created;
END
$$;

COMMENT ON FUNCTION cryo.set_secret(p_org text, p_project text, p_name text, p_value bytea) IS 'Stores a sealed secret under a name in a project, replacing any earlier value; returns true when it was new. Raises CR004 for a bad or reserved name or a NULL value, CR005 for an unknown project.';

CREATE FUNCTION cryo.spawn_run(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[], p_path text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'spawn', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_child text;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN v_memo.ref_run_id;
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, p_filename, p_interpreter, p_source, p_input, NULL,
        p_required_caps, p_parent_run_id => p_run_id) s;
    PERFORM cryo._record(v_q, p_position, v_path, 'spawn', '', p_ordinal, NULL,
                         jsonb_build_object('run_id', v_child), 0, v_child);
    RETURN v_child;
END
$$;

COMMENT ON FUNCTION cryo.spawn_run(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[], p_path text) IS 'Submits a child run of the claimed run and records it; a repeat at the same path returns the same child id. Raises CR002 for a stale claim, CR004 for a missing source or bad identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.spend_id_token(p_token_hash bytea, p_expires_at timestamp with time zone, p_nonce_hash bytea DEFAULT NULL::bytea, p_org text DEFAULT NULL::text, p_renewing bytea DEFAULT NULL::bytea, p_issuer text DEFAULT NULL::text, p_subject text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    IF p_token_hash IS NULL OR p_expires_at IS NULL THEN
        RAISE EXCEPTION 'spending an ID token needs its hash and expiry' USING ERRCODE = 'CR004';
    END IF;
    IF p_renewing IS NOT NULL THEN
        -- A refreshed ID token carries no fresh nonce: the CLI session it renews (the
        -- same person at the same issuer, in the org, not revoked, ended at most 30
        -- days ago) stands in for it, and ends.
        DELETE FROM cryo.sessions s
         WHERE s.secret_hash = p_renewing AND s.kind = 'cli' AND s.org = p_org
           AND s.issuer = p_issuer AND s.subject = p_subject AND s.revoked_at IS NULL
           AND s.expires_at > v_now - interval '30 days';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no CLI session of this person in org % to renew (revoked, long over, or another person''s)', coalesce(p_org, '')
                USING ERRCODE = 'CR150';
        END IF;
    ELSIF p_nonce_hash IS NOT NULL THEN
        DELETE FROM cryo.oidc_cli_nonces n
         WHERE n.nonce_hash = p_nonce_hash AND n.expires_at > v_now AND n.org = p_org;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the ID token''s nonce is not one this server gave a CLI sign-in to org % (unknown, expired, used, or a browser sign-in''s)', coalesce(p_org, '')
                USING ERRCODE = 'CR150';
        END IF;
    END IF;
    DELETE FROM cryo.oidc_spent_tokens WHERE expires_at <= v_now;
    INSERT INTO cryo.oidc_spent_tokens (token_hash, expires_at)
    VALUES (p_token_hash, greatest(p_expires_at, v_now + interval '1 minute'))
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this ID token was traded for a session already' USING ERRCODE = 'CR150';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.spend_id_token(p_token_hash bytea, p_expires_at timestamp with time zone, p_nonce_hash bytea, p_org text, p_renewing bytea, p_issuer text, p_subject text) IS 'Marks the ID token hashing to p_token_hash traded (kept until p_expires_at, its exp plus leeway); with p_renewing, ends the CLI session of org p_org with that secret hash, which must be p_issuer''s p_subject''s, not revoked and ended at most 30 days ago; else with p_nonce_hash, uses up the CLI sign-in nonce of org p_org it carries; deletes expired rows. Raises CR150 for a token traded before, a nonce this server did not hand a CLI sign-in of that org (or already used, or expired), or no such session to renew; CR004 for a missing hash or expiry.';

CREATE FUNCTION cryo.state_add(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS TABLE(claimed boolean, version bigint, replayed boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_family text := 'state.add';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_tainted boolean := cryo._run_untrusted(p_run_id);
    v_now timestamptz := cryo.now();
    v_path text;
    v_memo cryo.journal;
    v_version bigint;
    v_creator text;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT v_memo.exit_code = 0, NULL::bigint, true;
        RETURN;
    END IF;
    IF p_value IS NULL THEN
        RAISE EXCEPTION 'a state value cannot be NULL' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.state_cells AS c (org, project, scope, entity, run_id, key, value, version,
                                       created_by_run, updated_by_run, created_at, updated_at,
                                       tainted)
    VALUES (v_q.org, v_q.project, v_scope, p_entity,
            CASE WHEN p_entity IS NULL THEN p_run_id END, p_key, p_value, 1,
            p_run_id, p_run_id, v_now, v_now, v_tainted)
    ON CONFLICT (scope, key, tainted) DO UPDATE
       SET value = excluded.value, version = c.version + 1, created_by_run = excluded.created_by_run,
           updated_by_run = excluded.updated_by_run, created_at = excluded.created_at,
           updated_at = excluded.updated_at
     WHERE c.value IS NULL
    RETURNING c.version INTO v_version;
    IF v_version IS NULL THEN
        -- Held already. It is still ours if this run created it.
        SELECT c.created_by_run, c.version INTO v_creator, v_version FROM cryo.state_cells c
         WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted;
    ELSE
        v_creator := p_run_id;
    END IF;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.add', p_name, p_ordinal,
                               CASE WHEN v_creator = p_run_id THEN 0 ELSE 3 END, NULL);
    RETURN QUERY SELECT v_creator = p_run_id, v_version, false;
END
$$;

COMMENT ON FUNCTION cryo.state_add(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_position integer, p_name text, p_ordinal integer, p_path text) IS 'Claims a cell for the claimed run: writes it only when no live cell holds the key, and records the answer as the run''s memo at its position in the same transaction. Returns (claimed, version, replayed); claimed is true when this run created the cell, now or earlier; replayed is true when the answer came from an existing memo (version NULL then). An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or call identity, CR009 for a path that disagrees with the identity.';

CREATE FUNCTION cryo.state_cas(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_expect bigint, p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS TABLE(swapped boolean, version bigint, replayed boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_family text := 'state.cas';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_path text;
    v_memo cryo.journal;
    v_version bigint;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT v_memo.exit_code = 0, NULL::bigint, true;
        RETURN;
    END IF;
    IF p_value IS NULL OR p_expect IS NULL OR p_expect < 1 THEN
        RAISE EXCEPTION 'cas needs a value and an expected version >= 1' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.state_cells c
       SET value = p_value, version = c.version + 1, updated_by_run = p_run_id, updated_at = cryo.now()
     WHERE c.scope = v_scope AND c.key = p_key AND c.value IS NOT NULL AND c.version = p_expect
       AND c.tainted = cryo._run_untrusted(p_run_id)
    RETURNING c.version INTO v_version;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.cas', p_name, p_ordinal,
                               CASE WHEN v_version IS NULL THEN 3 ELSE 0 END, NULL);
    RETURN QUERY SELECT v_version IS NOT NULL, v_version, false;
END
$$;

COMMENT ON FUNCTION cryo.state_cas(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_expect bigint, p_position integer, p_name text, p_ordinal integer, p_path text) IS 'Replaces a live cell''s value when its version equals p_expect, and records the answer (swapped or not) as the claimed run''s memo at its position in the same transaction. Returns (swapped, version, replayed): version is the new one after a swap; replayed is true when the answer came from an existing memo. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity, expected version or call identity, CR009 for a path that disagrees with the identity.';

CREATE FUNCTION cryo.state_delete(p_run_id text, p_token uuid, p_entity text, p_key text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN cryo._state_delete(cryo._claimed_row(p_run_id, p_token), p_entity, p_key);
END
$$;

COMMENT ON FUNCTION cryo.state_delete(p_run_id text, p_token uuid, p_entity text, p_key text) IS 'Deletes a cell of the claimed run''s scopes (its version is kept and raised, so it is never reused); returns true when a live cell was deleted. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key or entity.';

CREATE FUNCTION cryo.state_get(p_scope text, p_key text, p_tainted boolean DEFAULT false) RETURNS TABLE(value bytea, version bigint, created_by_run text, updated_at timestamp with time zone, tainted boolean, published boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(p_scope, p_key, false, p_tainted) c
$$;

COMMENT ON FUNCTION cryo.state_get(p_scope text, p_key text, p_tainted boolean) IS 'Returns the sealed value, version, creating run, last write time and trust flags of a live trusted cell (with p_tainted, the tainted cell untrusted runs wrote), or no row when the cell is unset or deleted. A run''s own scope has one namespace and ignores p_tainted. Raises nothing.';

CREATE FUNCTION cryo.state_incr(p_run_id text, p_token uuid, p_entity text, p_key text, p_expect bigint, p_value bytea, p_result bytea, p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS TABLE(outcome text, version bigint, sealed bytea)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_family text := 'state.incr';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_tainted boolean := cryo._run_untrusted(p_run_id);
    v_now timestamptz := cryo.now();
    v_path text;
    v_memo cryo.journal;
    v_cell cryo.state_cells;
    v_version bigint;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT 'recorded'::text, NULL::bigint, v_memo.result;
        RETURN;
    END IF;
    SELECT * INTO v_cell FROM cryo.state_cells c
     WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted FOR UPDATE;
    IF p_expect IS NULL OR p_value IS NULL OR p_expect <> coalesce(v_cell.version, 0) THEN
        RETURN QUERY SELECT 'moved'::text, coalesce(v_cell.version, 0), v_cell.value;
        RETURN;
    END IF;
    IF v_cell.version IS NULL THEN
        INSERT INTO cryo.state_cells (org, project, scope, entity, run_id, key, value, version,
                                      created_by_run, updated_by_run, created_at, updated_at,
                                      tainted)
        VALUES (v_q.org, v_q.project, v_scope, p_entity,
                CASE WHEN p_entity IS NULL THEN p_run_id END, p_key, p_value, 1,
                p_run_id, p_run_id, v_now, v_now, v_tainted)
        ON CONFLICT (scope, key, tainted) DO NOTHING;
        IF NOT FOUND THEN  -- another run created it between our read and now
            RETURN QUERY SELECT 'moved'::text, c.version, c.value FROM cryo.state_cells c
                          WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted;
            RETURN;
        END IF;
        v_version := 1;
    ELSE
        UPDATE cryo.state_cells c
           SET value = p_value, version = c.version + 1, updated_by_run = p_run_id, updated_at = v_now,
               created_by_run = CASE WHEN c.value IS NULL THEN p_run_id ELSE c.created_by_run END,
               created_at = CASE WHEN c.value IS NULL THEN v_now ELSE c.created_at END
         WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted
        RETURNING c.version INTO v_version;
    END IF;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.incr', p_name, p_ordinal, 0, p_result);
    RETURN QUERY SELECT 'done'::text, v_version, NULL::bytea;
END
$$;

COMMENT ON FUNCTION cryo.state_incr(p_run_id text, p_token uuid, p_entity text, p_key text, p_expect bigint, p_value bytea, p_result bytea, p_position integer, p_name text, p_ordinal integer, p_path text) IS 'One compare-and-set step of an increment by the claimed run. Returns (outcome, version, sealed): ''recorded'' with the sealed memo when the run already has an answer at its path; ''moved'' with the cell''s current version (0 when no row) and sealed value (NULL when unset) when p_expect is NULL or stale; ''done'' with the new version once the new sealed total is written and p_result recorded as the memo in the same transaction. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or call identity, CR009 for a path that disagrees with the identity.';

CREATE FUNCTION cryo.state_list(p_scope text, p_tainted boolean DEFAULT false) RETURNS TABLE(key text, value bytea, version bigint, created_by_run text, updated_at timestamp with time zone, tainted boolean, published boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT c.key, c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(p_scope, NULL, false, p_tainted) c ORDER BY c.key
$$;

COMMENT ON FUNCTION cryo.state_list(p_scope text, p_tainted boolean) IS 'Returns every live trusted cell of a scope (with p_tainted, the tainted ones) in key order, values sealed. Raises nothing.';

CREATE FUNCTION cryo.state_scope(p_org text, p_project text, p_run_id text, p_entity text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $_$
BEGIN
    IF p_entity IS NULL THEN
        IF NOT cryo._run_in_project(p_run_id, p_org, p_project) THEN
            RAISE EXCEPTION 'run % is not a run of project %/%', p_run_id, p_org, p_project
                USING ERRCODE = 'CR004';
        END IF;
        RETURN p_run_id;
    END IF;
    IF p_entity !~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$' THEN
        RAISE EXCEPTION 'entity name % must be letters, digits, _ . @ - (up to 128)', p_entity
            USING ERRCODE = 'CR004';
    END IF;
    RETURN p_org || ':' || p_project || ':entity:' || p_entity;
END
$_$;

COMMENT ON FUNCTION cryo.state_scope(p_org text, p_project text, p_run_id text, p_entity text) IS 'Returns the scope of a cell: the run id when p_entity is NULL, else {org}:{project}:entity:{name}. Raises CR004 for a run of another project or a malformed entity name.';

CREATE FUNCTION cryo.state_set(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_public boolean DEFAULT false) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN cryo._state_set(cryo._claimed_row(p_run_id, p_token), p_entity, p_key, p_value,
                           p_public);
END
$$;

COMMENT ON FUNCTION cryo.state_set(p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_public boolean) IS 'Writes a sealed value into a cell of the claimed run (run scope when p_entity is NULL); returns the cell''s new version. An untrusted run writes its tainted cell, never a trusted one; a trusted run''s p_public publishes the cell to untrusted runs until a set without it. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or a NULL value.';

CREATE FUNCTION cryo.submit_activity(p_run_id text, p_token uuid, p_position integer, p_name text, p_source bytea, p_required_caps text[], p_retries integer DEFAULT 0, p_retry_backoff double precision DEFAULT 0, p_retry_on integer[] DEFAULT NULL::integer[], p_path text DEFAULT NULL::text) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text;
    v_memo cryo.journal;
    v_child text;
BEGIN
    PERFORM cryo._check_name('activity', p_name);
    v_memo := cryo._replay(p_run_id, 'activity', p_name, 0);
    v_path := v_memo.path;
    IF v_memo.status = 'done' AND coalesce(p_path, v_path) = v_path THEN
        RETURN v_memo.ref_run_id;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name) THEN
        RAISE EXCEPTION 'activity % was already submitted in run %', p_name, p_run_id
            USING ERRCODE = 'CR007';
    END IF;
    PERFORM cryo.call_path('activity', p_name, 0, p_path);
    IF coalesce(p_retries, 0) < 0 OR coalesce(p_retry_backoff, 0) < 0 THEN
        RAISE EXCEPTION 'retries and retry backoff must be >= 0' USING ERRCODE = 'CR004';
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, 'activity.sh', NULL, p_source, NULL, NULL, p_required_caps,
        p_parent_run_id => p_run_id) s;
    UPDATE cryo.runs SET activity_name = p_name, retries_left = coalesce(p_retries, 0),
                         retry_backoff = coalesce(p_retry_backoff, 0), retry_on = p_retry_on
     WHERE id = v_child;
    PERFORM cryo._record(v_q, p_position, v_path, 'activity', p_name, 0, NULL,
                         jsonb_build_object('run_id', v_child), 0, v_child);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activity_scheduled', 'activity', p_name, 0);
    RETURN v_child;
END
$$;

COMMENT ON FUNCTION cryo.submit_activity(p_run_id text, p_token uuid, p_position integer, p_name text, p_source bytea, p_required_caps text[], p_retries integer, p_retry_backoff double precision, p_retry_on integer[], p_path text) IS 'Submits a named child job of the claimed run (a name is unique per run) with a retry policy; returns its run id, the same one for a repeat at the same path. Raises CR002 for a stale claim, CR007 for a name already used, CR004 for a bad policy or name, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.submit_graph(p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_idempotency_key text, p_untrusted boolean, p_concurrency text, p_policy text, p_workdir text, p_graph jsonb, p_calls jsonb DEFAULT NULL::jsonb, p_timeout double precision DEFAULT NULL::double precision, p_priority integer DEFAULT NULL::integer) RETURNS TABLE(run_id text, created boolean, status text, queue_position integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_id text;
    v_created boolean;
    v_token uuid;
    v_plan record;
    v_ended text;
    v_itself boolean;
BEGIN
    IF p_graph IS NULL THEN
        RAISE EXCEPTION 'a graph run needs its compiled structure' USING ERRCODE = 'CR004';
    END IF;
    v_itself := cryo._graph_runs_itself(p_graph, p_calls);
    IF v_itself THEN  -- the enqueue need not wake the drivers: this call drives the run
        PERFORM set_config('cryo.graph_self_driven', 'on', true);
    END IF;
    SELECT s.run_id, s.created INTO v_id, v_created
      FROM cryo.submit_script(p_org, p_project, p_filename, p_interpreter, p_source, p_input,
                              p_idempotency_key, '{graph}', NULL, NULL, p_concurrency,
                              p_policy, p_untrusted, NULL, p_workdir, p_graph,
                              p_timeout, p_priority) s;
    IF v_itself THEN
        PERFORM set_config('cryo.graph_self_driven', '', true);
        IF v_id IS NOT NULL AND v_created THEN
            v_token := cryo._drive_run('submit', v_id);
            IF v_token IS NULL THEN  -- queued behind its group: the drivers take it later
                PERFORM pg_notify('cryo_graph', '');
            END IF;
        END IF;
    END IF;
    IF v_token IS NOT NULL THEN
        -- The calls, then (when nothing can be skipped or fail) every node at once, and
        -- the run is over: it succeeded, and its answer is its sinks' clear outputs (it
        -- has no output expression and no parent), as graph_plan would settle it.
        p_calls := cryo._graph_checked_calls(v_id, p_calls);
        IF cryo._graph_state_batch(cryo._claimed_row(v_id, v_token), p_calls) THEN
            PERFORM cryo.graph_settle(v_id, v_token, true, NULL, jsonb_build_object(
                'answer', (cryo._graph_default_output(v_id)).answer));
            v_token := NULL;
        END IF;
    END IF;
    IF v_token IS NOT NULL THEN  -- one node at a time, as a driver's turn would
        FOR v_plan IN SELECT * FROM cryo.graph_plan(
                v_id, v_token, '{}', jsonb_build_object('nodes', '{}'::jsonb, 'run',
                                                        jsonb_build_object('id', v_id)),
                p_calls) LOOP
            IF v_plan.action IN ('settled', 'yield', 'finish', 'start', 'config') THEN
                v_ended := v_plan.action;
            END IF;
        END LOOP;
        IF v_ended IS NULL THEN  -- waits on something (a retry's backoff): parked
            PERFORM cryo.graph_settle(v_id, v_token, false);
        ELSIF v_ended <> 'settled' THEN  -- more for a driver: pending again at once
            PERFORM cryo.graph_yield(v_id, v_token);
        END IF;
    END IF;
    RETURN QUERY SELECT v_id, v_created, r.status,
                        CASE WHEN r.status = 'queued' THEN cryo._queue_position(v_id) END
                   FROM cryo.runs r WHERE r.id = v_id;
    IF v_id IS NULL THEN  -- skip: the group was held, no run
        RETURN QUERY SELECT NULL::text, false, NULL::text, NULL::integer;
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.submit_graph(p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_idempotency_key text, p_untrusted boolean, p_concurrency text, p_policy text, p_workdir text, p_graph jsonb, p_calls jsonb, p_timeout double precision, p_priority integer) IS 'Creates a graph run as submit_script does (p_graph its compiled structure, p_source its sealed document); when every node is a constant state node whose call is in p_calls ({node: {op, key, entity, expected, read, value as hex of the sealed value}}) with no if, fan-out or concurrency and the graph has no output expression or concurrency group, drives it at once in this transaction, so it has usually ended when this returns. Returns (run_id, created, status, queue_position); run_id NULL when skip found the group held. Raises what submit_script raises.';

CREATE FUNCTION cryo.submit_run(p_org text, p_project text, p_workflow text, p_input jsonb DEFAULT NULL::jsonb, p_idempotency_key text DEFAULT NULL::text, p_concurrency text DEFAULT NULL::text, p_policy text DEFAULT NULL::text, p_timeout double precision DEFAULT NULL::double precision, p_priority integer DEFAULT NULL::integer) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'cryo', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION cryo.submit_run(p_org text, p_project text, p_workflow text, p_input jsonb, p_idempotency_key text, p_concurrency text, p_policy text, p_timeout double precision, p_priority integer) IS 'Submits the stored workflow by name with a jsonb input, optionally under a concurrency group and policy, a timeout in seconds (else the graph''s own) and a claim priority, in the directory the workflow was stored from; returns the run id (the existing one for a repeated idempotency key, NULL when skip found the group held). Raises CR005 for an unknown workflow or project, CR004 for a bad policy, CR030 when the group''s queue is full, CR021 when the caller is an application role of another tenant (or of none).';

CREATE FUNCTION cryo.submit_script(p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea, p_input bytea DEFAULT NULL::bytea, p_idempotency_key text DEFAULT NULL::text, p_required_caps text[] DEFAULT '{shell}'::text[], p_workflow text DEFAULT NULL::text, p_input_clear jsonb DEFAULT NULL::jsonb, p_concurrency text DEFAULT NULL::text, p_policy text DEFAULT NULL::text, p_untrusted boolean DEFAULT false, p_parent_run_id text DEFAULT NULL::text, p_workdir text DEFAULT NULL::text, p_graph jsonb DEFAULT NULL::jsonb, p_timeout double precision DEFAULT NULL::double precision, p_priority integer DEFAULT NULL::integer) RETURNS TABLE(run_id text, created boolean)
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.submit_script(p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea, p_input bytea, p_idempotency_key text, p_required_caps text[], p_workflow text, p_input_clear jsonb, p_concurrency text, p_policy text, p_untrusted boolean, p_parent_run_id text, p_workdir text, p_graph jsonb, p_timeout double precision, p_priority integer) IS 'Creates a run from a sealed source and input (or a clear jsonb input); with p_graph (a compiled graph structure) a graph run whose sealed source is its document, driven by the server''s interpreter; pending, or queued behind its concurrency group''s holder per p_policy (queue, cancel-running, cancel-queued, skip); p_required_caps NULL means what its filename and interpreter need; p_untrusted runs get no secret values; p_parent_run_id makes it a child run; p_workdir is the absolute directory it was submitted from (a child inherits its parent''s); p_timeout (seconds, else its stored workflow''s default, else the graph''s own timeout) fails it with exit code 124 that long after submit; p_priority (-1000..1000, else its workflow''s default, else its parent''s, else 0) orders pending claims, higher first. Returns (run_id, created): created false when the idempotency key already named a run, run_id NULL when skip found the group held. Raises CR005 for an unknown project, CR004 for a missing source, empty key, bad group name, unknown policy, a policy without a group, a relative working directory, a bad timeout or priority, CR030 when the group''s queue is full.';

CREATE FUNCTION cryo.take_oidc_login(p_id_hash bytea, p_state text) RETURNS TABLE(nonce text, code_verifier text, org text)
    LANGUAGE plpgsql
    AS $$
BEGIN
    RETURN QUERY
        DELETE FROM cryo.oidc_logins l
         WHERE l.id_hash = p_id_hash AND l.state = p_state AND l.expires_at > cryo.now()
        RETURNING l.nonce, l.code_verifier, l.org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no sign-in of this browser with that state (unknown, expired, already used, or a forged state)'
            USING ERRCODE = 'CR041';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.take_oidc_login(p_id_hash bytea, p_state text) IS 'Deletes and returns the live sign-in whose id hashes to p_id_hash and whose state is p_state (nonce, PKCE verifier, org). Raises CR041 when there is none (unknown, expired, used, or the state does not match).';

CREATE FUNCTION cryo.take_status_posts(p_limit integer DEFAULT 20) RETURNS TABLE(run_id text, org text, project text, webhook text, url text, sha text, status text, exit_code integer, error text)
    LANGUAGE sql
    AS $$
    WITH picked AS (
        SELECT p.run_id FROM cryo.status_posts p JOIN cryo.runs r ON r.id = p.run_id
         WHERE (p.state = 'waiting' OR (p.state = 'sending' AND p.taken_at < cryo.now() - interval '5 minutes'))
           AND cryo.is_terminal(r.status)
         ORDER BY p.created_at
         LIMIT p_limit
           FOR UPDATE OF p SKIP LOCKED
    ), taken AS (
        UPDATE cryo.status_posts p SET state = 'sending', taken_at = cryo.now(), attempts = p.attempts + 1
          FROM picked WHERE p.run_id = picked.run_id
        RETURNING p.run_id, p.org, p.project, p.webhook, p.url, p.sha
    )
    SELECT t.run_id, t.org, t.project, t.webhook, t.url, t.sha, r.status, r.exit_code, r.error
      FROM taken t JOIN cryo.runs r ON r.id = t.run_id
$$;

COMMENT ON FUNCTION cryo.take_status_posts(p_limit integer) IS 'Takes up to p_limit commit statuses whose run has ended, for this server to send; returns each with the run''s status, exit code and error. Raises nothing.';

CREATE FUNCTION cryo.tick(p_batch integer DEFAULT 1000) RETURNS TABLE(expired integer, woken integer)
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION cryo.tick(p_batch integer) IS 'Fails live runs past their deadline (exit code 124), re-pends runs whose claim expired, ends expired runs that were asked to cancel, wakes due parked runs (sleeps, timed-out waits, retry backoffs), purges bus events and collects terminal runs past retention, and hands on concurrency groups whose holder ended unnoticed, at most p_batch of each; returns (expired, woken). Raises nothing of its own.';

CREATE FUNCTION cryo.trim_run_log(p_run_id text, p_attempt_id text, p_upto bigint, p_marker bytea) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_dropped bigint;
    v_last bigint;
BEGIN
    PERFORM 1 FROM cryo.log_moves m
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now()
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    WITH gone AS (
        DELETE FROM cryo.logs l WHERE l.run_id = p_run_id AND l.id <= p_upto
        RETURNING l.id, length(l.data) AS n
    )
    SELECT coalesce(sum(n), 0), max(id) INTO v_dropped, v_last FROM gone;
    IF v_last IS NOT NULL THEN
        INSERT INTO cryo.logs (id, run_id, org, project, attempt, data, created_at)
        SELECT v_last, r.id, r.org, r.project, r.attempt, p_marker, cryo.now()
          FROM cryo.runs r WHERE r.id = p_run_id;
    END IF;
    RETURN v_dropped;
END
$$;

COMMENT ON FUNCTION cryo.trim_run_log(p_run_id text, p_attempt_id text, p_upto bigint, p_marker bytea) IS 'Drops a run''s log chunks up to id p_upto and puts the sealed marker p_marker in the last one''s place, under attempt p_attempt_id''s live lease; returns the sealed bytes dropped (0: nothing changed). Raises CR100 when that attempt does not hold a live lease.';

CREATE FUNCTION cryo.unbind_app_role(p_role text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_found boolean;
BEGIN
    DELETE FROM cryo.app_roles WHERE role = p_role;
    v_found := FOUND;
    IF EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
               JOIN pg_roles r ON r.oid = m.member
                WHERE a.rolname = 'cryo_app' AND r.rolname = p_role) THEN
        EXECUTE format('REVOKE cryo_app FROM %I', p_role);
        v_found := true;
    END IF;
    RETURN v_found;
END
$$;

COMMENT ON FUNCTION cryo.unbind_app_role(p_role text) IS 'Removes a role''s tenant binding and its membership of cryo_app (the role itself stays). Returns false when it had neither. Raises permission denied when the caller may not revoke cryo_app.';

CREATE FUNCTION cryo.unindexed_artifact_blobs(p_org text, p_project text, p_sha256s text[]) RETURNS SETOF text
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || p_org || ':' || p_project, 0));
    -- A statement of its own, so its snapshot sees every put committed before the lock.
    RETURN QUERY SELECT DISTINCT s.sha256 FROM unnest(p_sha256s) AS s (sha256)
                  WHERE NOT EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                                     WHERE b.org = p_org AND b.project = p_project
                                       AND b.sha256 = s.sha256);
END
$$;

COMMENT ON FUNCTION cryo.unindexed_artifact_blobs(p_org text, p_project text, p_sha256s text[]) IS 'Takes the project''s artifact lock until commit and returns those of p_sha256s the project has no blob row for, whose bytes the caller may delete from the store. Raises nothing.';

CREATE FUNCTION cryo.update_handler(p_org text, p_project text, p_name text, p_event text, p_workflow text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_h cryo.event_handlers;
BEGIN
    SELECT * INTO v_h FROM cryo.event_handlers h
     WHERE h.org = p_org AND h.project = p_project AND h.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_not_owned('handler', p_name, v_h.source_workflow);
    PERFORM cryo._check_name('event', p_event);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    UPDATE cryo.event_handlers SET event = p_event, workflow = p_workflow
     WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;

COMMENT ON FUNCTION cryo.update_handler(p_org text, p_project text, p_name text, p_event text, p_workflow text) IS 'Changes the event an event handler listens for and the workflow it starts. Returns nothing. Raises CR005 for an unknown handler or workflow, CR004 for a bad event name, CR242 for a handler a workflow''s on: registered.';

CREATE FUNCTION cryo.update_schedule(p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text, p_every_seconds double precision, p_input bytea, p_keep_input boolean, p_next_fire_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_s cryo.schedules;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_not_owned('schedule', p_name, v_s.source_workflow);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    IF (p_cron IS NULL) = (p_every_seconds IS NULL) THEN
        RAISE EXCEPTION 'a schedule needs either a cron expression or an interval' USING ERRCODE = 'CR004';
    END IF;
    IF p_every_seconds IS NOT NULL AND NOT (p_every_seconds >= 1 AND p_every_seconds < 'infinity') THEN
        RAISE EXCEPTION 'a schedule''s interval must be at least 1 second' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.schedules
       SET workflow = p_workflow, cron = p_cron, timezone = coalesce(p_timezone, 'UTC'),
           every_seconds = p_every_seconds,
           input = CASE WHEN p_keep_input THEN input ELSE p_input END,
           next_fire_at = CASE WHEN paused THEN NULL ELSE p_next_fire_at END,
           updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;

COMMENT ON FUNCTION cryo.update_schedule(p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text, p_every_seconds double precision, p_input bytea, p_keep_input boolean, p_next_fire_at timestamp with time zone) IS 'Changes a schedule''s workflow, cron expression (in p_timezone) or interval and, unless p_keep_input, its sealed input; it fires next at p_next_fire_at (the server computes it; a paused schedule is planned when resumed). Returns nothing. Raises CR005 for an unknown schedule or workflow, CR004 for both or neither of cron and interval or an interval under 1 s, CR242 for a schedule a workflow''s on: registered.';

CREATE FUNCTION cryo.update_webhook(p_org text, p_project text, p_name text, p_workflow text, p_status_url text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_workflow IS NOT NULL THEN
        PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    END IF;
    IF p_status_url IS NOT NULL AND p_workflow IS NULL THEN
        RAISE EXCEPTION 'a commit status URL needs a workflow whose run it reports' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.webhooks SET workflow = p_workflow, status_url = p_status_url
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;

COMMENT ON FUNCTION cryo.update_webhook(p_org text, p_project text, p_name text, p_workflow text, p_status_url text) IS 'Points a webhook at another workflow (NULL: deliveries go to the bus) and sets its status URL; the signing secret is kept. Returns nothing. Raises CR005 for an unknown webhook or workflow, CR004 for a status URL without a workflow.';

CREATE FUNCTION cryo.wait_all_activities(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_path text DEFAULT NULL::text) RETURNS TABLE(parked boolean, failed integer)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'activity.wait-all', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_failed integer;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, (v_memo.answer_clear ->> 'failed')::integer;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo._uncollected(p_run_id) c WHERE NOT cryo.is_terminal(c.status)) THEN
        PERFORM cryo._park_on(v_q, p_position, v_path, 'activity.wait-all', '', p_ordinal,
                              'awaiting-children', NULL, NULL);
        RETURN QUERY SELECT true, NULL::integer;
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE c.status <> 'succeeded') INTO v_failed FROM cryo._uncollected(p_run_id) c;
    PERFORM cryo._record(v_q, p_position, v_path, 'activity.wait-all', '', p_ordinal, NULL,
                         jsonb_build_object('failed', v_failed), 0);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activities_completed',
                          'activity.wait-all', '', p_ordinal);
    RETURN QUERY SELECT false, v_failed;
END
$$;

COMMENT ON FUNCTION cryo.wait_all_activities(p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_path text) IS 'Returns (parked false, failed count) when every uncollected activity of the claimed run has finished, else parks the run until they have. Raises CR002 for a stale claim, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.wait_event(p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer, p_timeout double precision DEFAULT NULL::double precision, p_path text DEFAULT NULL::text, p_tainted boolean DEFAULT false) RETURNS TABLE(parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_family text := CASE WHEN p_tainted THEN 'event.tainted' ELSE 'event' END;
    v_memo cryo.journal;
    v_path text;
BEGIN
    PERFORM cryo._check_name('event', p_name);
    v_memo := cryo._replay(p_run_id, v_family, p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    IF p_timeout IS DISTINCT FROM 0 THEN
        -- Serialises with _publish_event on this name (see there).
        PERFORM pg_advisory_xact_lock(hashtextextended(v_q.org || '/' || v_q.project || '/' || p_name, 7));
    END IF;
    RETURN QUERY SELECT * FROM cryo._wait_or_time_out(v_q, p_position, v_path, v_family, p_name,
                                                     p_ordinal, p_timeout, 'awaiting-event');
END
$$;

COMMENT ON FUNCTION cryo.wait_event(p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer, p_timeout double precision, p_path text, p_tainted boolean) IS 'Parks the claimed run until an event of the name that it may hear is published (or p_timeout seconds pass; a timeout records exit code 124): a trusted run hears trusted events, with p_tainted tainted ones as well (journalled under family event.tainted); an untrusted run hears tainted events and published trusted ones. Returns (parked, payload, payload_clear, timed_out), answering from the memo when already recorded. Raises CR002 for a stale claim, CR004 for a bad name, timeout or identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.wait_signal(p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer, p_timeout double precision DEFAULT NULL::double precision, p_path text DEFAULT NULL::text) RETURNS TABLE(parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal;
    v_path text;
    v_sig cryo.signals;
BEGIN
    PERFORM cryo._check_name('signal', p_name);
    v_memo := cryo._replay(p_run_id, 'signal', p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    SELECT * INTO v_sig FROM cryo.signals s
     WHERE s.run_id = p_run_id AND s.name = p_name AND s.consumed_at IS NULL
     ORDER BY s.id LIMIT 1 FOR UPDATE;
    IF FOUND THEN
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = v_path WHERE id = v_sig.id;
        PERFORM cryo._record(v_q, p_position, v_path, 'signal', p_name, p_ordinal, v_sig.payload,
                             v_sig.payload_clear, 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'signal_received', 'signal', p_name, p_ordinal);
        RETURN QUERY SELECT false, v_sig.payload, v_sig.payload_clear, false;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM cryo._wait_or_time_out(v_q, p_position, v_path, 'signal', p_name,
                                                     p_ordinal, p_timeout, 'awaiting-signal');
END
$$;

COMMENT ON FUNCTION cryo.wait_signal(p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer, p_timeout double precision, p_path text) IS 'Takes the oldest queued signal of the name for the claimed run, or parks it until one arrives (or p_timeout seconds pass; a timeout records exit code 124); returns (parked, payload, payload_clear, timed_out). Raises CR002 for a stale claim, CR004 for a bad name, timeout or identity, CR009 for a disagreeing path.';

CREATE FUNCTION cryo.wake_due_graphs(p_batch integer DEFAULT 1000) RETURNS double precision
    LANGUAGE plpgsql
    AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_sleeps text[];
    v_waits text[];
    v_retries text[];
BEGIN
    SELECT array_agg(d.run_id) FILTER (WHERE d.kind = 'timer_fired'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'retry_due'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'wait_timed_out')
      INTO v_sleeps, v_retries, v_waits
      FROM (SELECT q.run_id,
                   CASE WHEN q.park_reason = 'driver-backoff' THEN 'retry_due'
                        ELSE cryo._graph_due_kind(q.run_id) END AS kind
              FROM cryo.queue q
             WHERE q.state = 'parked' AND q.wake_at <= v_now AND q.required_caps = '{graph}'
             ORDER BY q.wake_at
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) d;
    PERFORM cryo._wake(v_sleeps, 'timer_fired', NULL, NULL, 0);
    PERFORM cryo._wake(v_retries, 'retry_due');
    PERFORM cryo._wake(v_waits, 'wait_timed_out', NULL, NULL, 124);
    RETURN (SELECT extract(epoch FROM q.wake_at - v_now)::double precision FROM cryo.queue q
             WHERE q.state = 'parked' AND q.wake_at > v_now AND q.required_caps = '{graph}'
             ORDER BY q.wake_at LIMIT 1);
END
$$;

COMMENT ON FUNCTION cryo.wake_due_graphs(p_batch integer) IS 'Wakes up to p_batch parked graph runs whose timer, retry or backoff is due on the database clock; returns the seconds until the next such deadline, NULL when none. Raises nothing of its own.';

CREATE FUNCTION cryo.watch_run(p_run_id text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE cryo.runs SET watched = true WHERE id = p_run_id AND NOT watched;
END
$$;

COMMENT ON FUNCTION cryo.watch_run(p_run_id text) IS 'Marks a run as followed, so its status and log changes NOTIFY cryo_run from now on. Returns nothing; raises nothing.';

CREATE TABLE cryo.agents (
    id text NOT NULL,
    org text NOT NULL,
    capabilities text[] NOT NULL,
    registered_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    build text,
    instance text,
    drain_requested_at timestamp with time zone,
    last_claim_at timestamp with time zone,
    gone_at timestamp with time zone,
    replica text
);

CREATE TABLE cryo.app_roles (
    role text NOT NULL,
    org text NOT NULL,
    project text,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

COMMENT ON TABLE cryo.app_roles IS 'Database roles in cryo_app and the tenant each may act on: one org, and one project of it or (project NULL) all of them. A cryo_app member without a row here is refused everything.';

CREATE TABLE cryo.artifact_blobs (
    org text NOT NULL,
    project text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    touched_at timestamp with time zone NOT NULL,
    untrusted_known boolean DEFAULT false NOT NULL,
    CONSTRAINT artifact_blobs_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT artifact_blobs_size_check CHECK ((size >= 0))
);

COMMENT ON TABLE cryo.artifact_blobs IS 'One row per distinct artifact content of a project (its SHA-256 and size); the project''s artifact bytes are the sum of these sizes, each counted once however many names point at it.';

COMMENT ON COLUMN cryo.artifact_blobs.touched_at IS 'The last time a put pointed a name at this blob; the collector removes only blobs no name points at and nobody touched within its grace period.';

COMMENT ON COLUMN cryo.artifact_blobs.untrusted_known IS 'Untrusted runs may learn the project holds this blob and name it: an untrusted run uploaded its bytes through the server, which checked them against the digest, or a published trusted artifact named it. Otherwise an untrusted run''s prepare answers "not present" and its put must upload the bytes first.';

CREATE TABLE cryo.connections (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    base_url text NOT NULL,
    auth text NOT NULL,
    secret text,
    username text,
    header text,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT connections_auth_check CHECK ((auth = ANY (ARRAY['none'::text, 'bearer'::text, 'basic'::text, 'header'::text]))),
    CONSTRAINT connections_check CHECK (((auth = 'none'::text) = (secret IS NULL))),
    CONSTRAINT connections_check1 CHECK (((auth = 'basic'::text) = (username IS NOT NULL))),
    CONSTRAINT connections_check2 CHECK (((auth = 'header'::text) = (header IS NOT NULL))),
    CONSTRAINT connections_name_check CHECK ((name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'::text)),
    CONSTRAINT connections_secret_check CHECK ((secret ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'::text))
);

COMMENT ON TABLE cryo.connections IS 'A project''s named connections for connector nodes: base URL, auth scheme (none, bearer, basic, header), the project secret holding the credential (by name; the value stays sealed in cryo.secrets), a basic user name or the header name, and default headers, all in the clear.';

CREATE TABLE cryo.event_handlers (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    event text NOT NULL,
    workflow text NOT NULL,
    source_workflow text,
    created_at timestamp with time zone NOT NULL,
    paused boolean DEFAULT false NOT NULL
);

COMMENT ON TABLE cryo.event_handlers IS 'Event handlers: each event of that name published on the project bus starts one run of the workflow, in the publishing transaction.';

CREATE TABLE cryo.events (
    id bigint NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    payload bytea,
    payload_clear jsonb,
    emitted_by_run text,
    created_at timestamp with time zone NOT NULL,
    depth integer DEFAULT 0 NOT NULL,
    untrusted boolean DEFAULT false NOT NULL,
    refused text,
    published boolean DEFAULT false NOT NULL
);

COMMENT ON COLUMN cryo.events.published IS 'A trusted event its emitter published (--public): untrusted runs waiting on the name hear it too.';

CREATE SEQUENCE cryo.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.events_id_seq OWNED BY cryo.events.id;

CREATE TABLE cryo.graph_cache (
    org text NOT NULL,
    project text NOT NULL,
    untrusted boolean NOT NULL,
    key_hash bytea NOT NULL,
    value bytea,
    value_clear jsonb,
    stored_at timestamp with time zone NOT NULL,
    run_id text NOT NULL,
    node_id text NOT NULL
);

COMMENT ON TABLE cryo.graph_cache IS 'Cached node outputs (a node''s cache: {key, ttl}): per project and trust (untrusted), keyed by a keyed digest of the rendered key, the output sealed (value) or in the clear (value_clear, no user data); stored_at is when, run_id / node_id who stored it.';

CREATE VIEW cryo.graph_nodes WITH (security_barrier='true') AS
 SELECT n.run_id,
    n.org,
    n.project,
    n.node_id,
    n.type,
    n.status,
    n.items,
    ( SELECT max(i.attempt) AS max
           FROM cryo.node_instances i
          WHERE ((i.run_id = n.run_id) AND (i.node_id = n.node_id))) AS attempt,
    n.started_at,
    n.finished_at,
    n.error
   FROM (cryo.node_states n
     JOIN cryo.runs r ON ((r.id = n.run_id)))
  WHERE ((NOT cryo.is_terminal(r.status)) AND ((((n.org || ':'::text) || n.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant)));

COMMENT ON VIEW cryo.graph_nodes IS 'One row per node of every live graph run: type, status, fan-out size, attempt, times.';

CREATE TABLE cryo.history (
    id bigint NOT NULL,
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    kind text NOT NULL,
    key_scope text,
    key_family text,
    key_name text,
    key_ordinal integer,
    attempt integer,
    payload bytea,
    created_at timestamp with time zone NOT NULL,
    replica text DEFAULT
CASE
    WHEN pg_has_role((
    CASE
        WHEN (current_setting('role'::text) = 'none'::text) THEN (SESSION_USER)::text
        ELSE current_setting('role'::text)
    END)::name, CURRENT_USER, 'MEMBER'::text) THEN NULLIF(current_setting('cryo.replica_id'::text, true), ''::text)
    ELSE NULL::text
END,
    detail jsonb,
    woke boolean
);

COMMENT ON COLUMN cryo.history.detail IS 'Clear facts about the event that hold no user data: node_retry_scheduled has {"delay": seconds}.';

COMMENT ON COLUMN cryo.history.woke IS 'true when this row woke a parked run (written by cryo._wake); NULL otherwise.';

CREATE SEQUENCE cryo.history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.history_id_seq OWNED BY cryo.history.id;

CREATE TABLE cryo.lease_waiters (
    id bigint NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    run_id text NOT NULL,
    kind text NOT NULL,
    scoped boolean DEFAULT false NOT NULL,
    path text,
    enqueued_at timestamp with time zone NOT NULL,
    CONSTRAINT lease_waiters_kind_check CHECK ((kind = ANY (ARRAY['admission'::text, 'script'::text, 'graph'::text])))
);

CREATE TABLE cryo.leases (
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    holder_run_id text NOT NULL,
    kind text NOT NULL,
    scoped boolean DEFAULT false NOT NULL,
    path text,
    acquired_at timestamp with time zone NOT NULL,
    CONSTRAINT leases_kind_check CHECK ((kind = ANY (ARRAY['admission'::text, 'script'::text, 'graph'::text])))
);

CREATE VIEW cryo.lease_holders WITH (security_barrier='true') AS
 SELECT l.org,
    l.project,
    l.grp AS concurrency_group,
    l.holder_run_id,
    l.kind,
    l.scoped,
    l.acquired_at,
    (cryo.now() - l.acquired_at) AS held_for,
    r.status AS holder_status,
    ( SELECT count(*) AS count
           FROM cryo.lease_waiters w
          WHERE ((w.org = l.org) AND (w.project = l.project) AND (w.grp = l.grp))) AS waiting
   FROM (cryo.leases l
     JOIN cryo.runs r ON ((r.id = l.holder_run_id)))
  WHERE ((((l.org || ':'::text) || l.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant));

COMMENT ON VIEW cryo.lease_holders IS 'One row per held concurrency group lease (a submit''s group or a script''s lock): the holding run, since when, and how many wait.';

CREATE TABLE cryo.lease_limits (
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    max_holders integer NOT NULL,
    window_seconds double precision,
    CONSTRAINT lease_limits_max_holders_check CHECK ((max_holders >= 1)),
    CONSTRAINT lease_limits_window_seconds_check CHECK ((window_seconds > (0)::double precision))
);

COMMENT ON TABLE cryo.lease_limits IS 'A concurrency group''s limit as its latest taker declared it: max_holders at once, or with window_seconds at most max_holders grants per window.';

CREATE VIEW cryo.lease_queues WITH (security_barrier='true') AS
 SELECT w.org,
    w.project,
    w.grp AS concurrency_group,
    w.run_id,
    w.kind,
    row_number() OVER (PARTITION BY w.org, w.project, w.grp ORDER BY w.id) AS "position",
    w.enqueued_at,
    (cryo.now() - w.enqueued_at) AS waiting_for
   FROM cryo.lease_waiters w
  WHERE ((((w.org || ':'::text) || w.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant));

COMMENT ON VIEW cryo.lease_queues IS 'Runs waiting for a concurrency group''s lease, with their FIFO position (1 is next).';

CREATE TABLE cryo.lease_starts (
    id bigint NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    grp text NOT NULL,
    started_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.lease_starts IS 'The grants of a concurrency group with a window, one row each, kept while inside the window.';

CREATE SEQUENCE cryo.lease_starts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.lease_starts_id_seq OWNED BY cryo.lease_starts.id;

CREATE SEQUENCE cryo.lease_waiters_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.lease_waiters_id_seq OWNED BY cryo.lease_waiters.id;

CREATE VIEW cryo.live_claims WITH (security_barrier='true') AS
 SELECT q.run_id,
    q.org,
    q.project,
    q.agent_id,
    q.claimed_at,
    q.claim_expires_at,
    (q.claim_expires_at - cryo.now()) AS expires_in,
    r.attempt
   FROM (cryo.queue q
     JOIN cryo.runs r ON ((r.id = q.run_id)))
  WHERE ((q.state = 'claimed'::text) AND ((((q.org || ':'::text) || q.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant)));

COMMENT ON VIEW cryo.live_claims IS 'Claims held right now: which agent, since when, and when the claim expires unless renewed.';

CREATE TABLE cryo.log_archives (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    object_key text NOT NULL,
    last_chunk_id bigint NOT NULL,
    bytes bigint NOT NULL,
    archived_at timestamp with time zone NOT NULL,
    attempt_id text,
    object_bytes bigint,
    sha256 bytea,
    attempts integer
);

COMMENT ON TABLE cryo.log_archives IS 'Runs whose log moved to the object store: the object key (sealed, compressed chunks), the last chunk id it holds and its size in bytes.';

CREATE TABLE cryo.log_moves (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    attempt_id text NOT NULL,
    holder text NOT NULL,
    object_key text,
    last_chunk_id bigint NOT NULL,
    attempts integer NOT NULL,
    claimed_at timestamp with time zone NOT NULL,
    lease_expires_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.log_moves IS 'Leases on finished runs'' logs being moved to the object store: the attempt holding it, its replica, the key only it writes (NULL once given back and queued for deletion), the last chunk it covers, how many attempts the run has had, and when the lease lapses.';

CREATE TABLE cryo.log_objects_to_delete (
    id bigint NOT NULL,
    object_key text NOT NULL,
    queued_at timestamp with time zone NOT NULL,
    not_before timestamp with time zone
);

COMMENT ON TABLE cryo.log_objects_to_delete IS 'Keys of moved-log objects whose runs are gone, waiting for a mover to delete them from the store.';

CREATE SEQUENCE cryo.log_objects_to_delete_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.log_objects_to_delete_id_seq OWNED BY cryo.log_objects_to_delete.id;

CREATE TABLE cryo.logs (
    id bigint NOT NULL,
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    attempt integer NOT NULL,
    data bytea NOT NULL,
    created_at timestamp with time zone NOT NULL
);

CREATE SEQUENCE cryo.logs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.logs_id_seq OWNED BY cryo.logs.id;

CREATE TABLE cryo.members (
    id text NOT NULL,
    org text NOT NULL,
    login text NOT NULL,
    role text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT members_login_check CHECK ((login ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$'::text)),
    CONSTRAINT members_role_check CHECK ((role = ANY (ARRAY['owner'::text, 'admin'::text, 'member'::text, 'viewer'::text])))
);

COMMENT ON TABLE cryo.members IS 'People of an org and their role (owner, admin, member, viewer); a user token acts for one member.';

CREATE TABLE cryo.metric_counts (
    metric text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    label text DEFAULT ''::text NOT NULL,
    label2 text DEFAULT ''::text NOT NULL,
    n bigint NOT NULL,
    total double precision DEFAULT 0 NOT NULL
);

COMMENT ON TABLE cryo.metric_counts IS 'Engine counters and gauges by series (metric, org, project, label, label2): n counts, total sums what a histogram observed. Written only by cryo.fold_metrics.';

CREATE TABLE cryo.metric_deltas (
    metric text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    label text DEFAULT ''::text NOT NULL,
    label2 text DEFAULT ''::text NOT NULL,
    n bigint NOT NULL,
    total double precision DEFAULT 0 NOT NULL
);

COMMENT ON TABLE cryo.metric_deltas IS 'Changes to artifact bytes not yet folded into cryo.metric_counts, appended by the artifact_blobs trigger.';

CREATE TABLE cryo.metric_fold (
    one boolean DEFAULT true NOT NULL,
    folded_through bigint NOT NULL,
    seen_through bigint,
    seen_xmax xid8,
    next_through bigint,
    folded_at timestamp with time zone,
    queue_counted_at timestamp with time zone,
    CONSTRAINT metric_fold_one_check CHECK (one)
);

COMMENT ON TABLE cryo.metric_fold IS 'Where cryo.fold_metrics is in cryo.history (one row, locked by the replica folding): ids up to folded_through are counted in cryo.metric_counts.';

COMMENT ON COLUMN cryo.metric_fold.queue_counted_at IS 'When cryo.fold_metrics last recounted the queue''s depth by state (NULL: never).';

CREATE TABLE cryo.node_approvals (
    run_id text NOT NULL,
    node_id text NOT NULL,
    item integer NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    approver text NOT NULL,
    answer text NOT NULL,
    answered_at timestamp with time zone NOT NULL,
    CONSTRAINT node_approvals_answer_check CHECK ((answer = ANY (ARRAY['approved'::text, 'rejected'::text])))
);

COMMENT ON TABLE cryo.node_approvals IS 'Each answer given to an approval node instance: the member, approved or rejected, and when. One per member and instance.';

CREATE TABLE cryo.oidc_cli_nonces (
    nonce_hash bytea NOT NULL,
    org text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.oidc_cli_nonces IS 'Nonces handed to a CLI sign-in (cryopg login) and not used yet, by SHA-256: the ID token a CLI trades must carry one, and the trade uses it up. Gone after a few minutes.';

CREATE TABLE cryo.oidc_logins (
    id_hash bytea NOT NULL,
    state text NOT NULL,
    nonce text NOT NULL,
    code_verifier text NOT NULL,
    org text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.oidc_logins IS 'Browser sign-ins sent to the issuer and not back yet: keyed by the hash of the id in the browser''s cookie, holding the state, nonce and PKCE verifier the callback must match. Single use; gone after a few minutes.';

CREATE TABLE cryo.oidc_role_maps (
    org text NOT NULL,
    claim text NOT NULL,
    value text NOT NULL,
    role text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT oidc_role_maps_claim_check CHECK ((claim ~ '^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$'::text)),
    CONSTRAINT oidc_role_maps_role_check CHECK ((role = ANY (ARRAY['owner'::text, 'admin'::text, 'member'::text, 'viewer'::text]))),
    CONSTRAINT oidc_role_maps_value_check CHECK (((length(value) >= 1) AND (length(value) <= 256)))
);

COMMENT ON TABLE cryo.oidc_role_maps IS 'An org''s map from an ID token claim value (e.g. claim groups, value ops) to a member role: a person whose token carries it signs in with that role (the highest, when several match), made a member when new.';

CREATE TABLE cryo.oidc_spent_tokens (
    token_hash bytea NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.oidc_spent_tokens IS 'ID tokens already traded for a session, by SHA-256, kept until the token itself expires: a second trade of one is refused.';

CREATE TABLE cryo.orgs (
    slug text NOT NULL,
    name text NOT NULL,
    key_id text,
    wrapped_key bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT orgs_slug_check CHECK ((slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'::text))
);

CREATE VIEW cryo.parked_runs WITH (security_barrier='true') AS
 SELECT q.run_id,
    q.org,
    q.project,
    q.park_reason AS reason,
    q.park_path AS waiting_on,
    q.park_name AS waiting_for_name,
    q.parked_at,
    q.wake_at,
    (q.wake_at - cryo.now()) AS wakes_in,
    (cryo.now() - q.parked_at) AS parked_for
   FROM cryo.queue q
  WHERE ((q.state = 'parked'::text) AND ((((q.org || ':'::text) || q.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant)));

COMMENT ON VIEW cryo.parked_runs IS 'Runs suspended in the queue: why (reason, the call they wait on) and until when.';

CREATE VIEW cryo.pending_runs WITH (security_barrier='true') AS
 SELECT q.run_id,
    q.org,
    q.project,
    q.required_caps,
    q.enqueued_at,
    (cryo.now() - q.enqueued_at) AS waiting_for
   FROM cryo.queue q
  WHERE ((q.state = 'pending'::text) AND ((((q.org || ':'::text) || q.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant)));

COMMENT ON VIEW cryo.pending_runs IS 'Runs waiting for an agent, oldest first by enqueued_at.';

CREATE TABLE cryo.projects (
    org text NOT NULL,
    slug text NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    event_retention interval DEFAULT '30 days'::interval NOT NULL,
    admission_queue_limit integer DEFAULT 100 NOT NULL,
    run_retention interval DEFAULT '90 days'::interval NOT NULL,
    CONSTRAINT projects_admission_queue_limit_check CHECK ((admission_queue_limit > 0)),
    CONSTRAINT projects_run_retention_check CHECK ((run_retention > '00:00:00'::interval)),
    CONSTRAINT projects_slug_check CHECK ((slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'::text))
);

COMMENT ON COLUMN cryo.projects.run_retention IS 'How long a terminal run (and all it owns) is kept after it finished; tick() collects it then.';

CREATE TABLE cryo.run_outputs (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    key text NOT NULL,
    value bytea,
    updated_at timestamp with time zone NOT NULL,
    value_clear jsonb
);

COMMENT ON COLUMN cryo.run_outputs.value_clear IS 'An output holding no user data, as {"answer": v}, in the clear; value is NULL then.';

CREATE VIEW cryo.run_overview WITH (security_barrier='true') AS
 SELECT r.id,
    r.org,
    r.project,
    r.workflow,
    r.filename,
    r.status,
    r.substate,
    r.attempt,
    r.exit_code,
    r.error,
    r.created_at,
    r.started_at,
    r.finished_at,
    (cryo.now() - r.created_at) AS age,
    (COALESCE(r.finished_at, cryo.now()) - r.started_at) AS run_time,
    q.wake_at,
    q.agent_id
   FROM (cryo.runs r
     LEFT JOIN cryo.queue q ON ((q.run_id = r.id)))
  WHERE ((((r.org || ':'::text) || r.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant));

COMMENT ON VIEW cryo.run_overview IS 'One row per run: status, substate, attempt, ages, and its live queue facts.';

CREATE TABLE cryo.schedules (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    workflow text NOT NULL,
    cron text,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    every_seconds double precision,
    input bytea,
    paused boolean DEFAULT false NOT NULL,
    source_workflow text,
    next_fire_at timestamp with time zone,
    last_fire_at timestamp with time zone,
    last_run_id text,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    last_refusal text,
    CONSTRAINT schedules_check CHECK (((cron IS NULL) <> (every_seconds IS NULL))),
    CONSTRAINT schedules_every_seconds_check CHECK (((every_seconds IS NULL) OR (every_seconds >= (1)::double precision)))
);

COMMENT ON TABLE cryo.schedules IS 'Schedules: a stored workflow started on a cron expression (in a time zone) or every N seconds. next_fire_at is the tick not yet fired (NULL: the scheduler plans it on its next round); input is sealed.';

COMMENT ON COLUMN cryo.schedules.source_workflow IS 'The workflow whose on.schedule registered this schedule (replaced when it is put again); NULL for one made with schedule create.';

COMMENT ON COLUMN cryo.schedules.last_refusal IS 'Why the latest due tick did not start a run (its input failed the workflow''s input_schema); NULL after a tick that fired.';

CREATE TABLE cryo.secrets (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    value bytea NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT secrets_name_check CHECK ((name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'::text))
);

COMMENT ON TABLE cryo.secrets IS 'Project secrets, sealed under the org data key; opened only into a claim grant of a trusted run.';

CREATE TABLE cryo.sessions (
    id text NOT NULL,
    org text NOT NULL,
    member_id text NOT NULL,
    secret_hash bytea NOT NULL,
    kind text NOT NULL,
    issuer text NOT NULL,
    subject text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone,
    groups text[],
    CONSTRAINT sessions_kind_check CHECK ((kind = ANY (ARRAY['web'::text, 'cli'::text])))
);

COMMENT ON TABLE cryo.sessions IS 'A person signed in through the OIDC issuer, acting as one member of one org: the web UI''s cookie (kind web) or the CLI''s stored credential (kind cli). Stored as the hash of its secret; it ends at expires_at or when revoked (sign-out, an admin, or the member''s removal).';

COMMENT ON COLUMN cryo.sessions.groups IS 'The groups claim of the ID token the session was opened with (NULL: none); an approval restricted to a group reads it.';

CREATE TABLE cryo.signals (
    id bigint NOT NULL,
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL,
    payload bytea,
    payload_clear jsonb,
    sent_at timestamp with time zone NOT NULL,
    consumed_at timestamp with time zone,
    consumed_path text
);

CREATE SEQUENCE cryo.signals_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE cryo.signals_id_seq OWNED BY cryo.signals.id;

CREATE VIEW cryo.state_overview WITH (security_barrier='true') AS
 SELECT c.org,
    c.project,
        CASE
            WHEN (c.entity IS NULL) THEN 'run'::text
            ELSE 'entity'::text
        END AS scope_kind,
    COALESCE(c.entity, c.run_id) AS scope_name,
    c.key,
    c.version,
    (c.value IS NULL) AS deleted,
    length(c.value) AS sealed_bytes,
    c.created_by_run,
    c.updated_by_run,
    c.created_at,
    c.updated_at,
    c.tainted,
    c.published
   FROM cryo.state_cells c
  WHERE ((((c.org || ':'::text) || c.project) || ':'::text) ~~ ( SELECT cryo._app_tenant() AS _app_tenant));

COMMENT ON VIEW cryo.state_overview IS 'One row per state cell: scope, key, version, who created and last wrote it, the sealed size, whether an untrusted run wrote it (tainted) and whether a trusted writer published it. Values stay sealed and are not shown.';

CREATE TABLE cryo.status_posts (
    run_id text NOT NULL,
    org text NOT NULL,
    project text NOT NULL,
    webhook text NOT NULL,
    url text NOT NULL,
    sha text,
    state text DEFAULT 'waiting'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    taken_at timestamp with time zone,
    last_error text,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT status_posts_state_check CHECK ((state = ANY (ARRAY['waiting'::text, 'sending'::text, 'sent'::text, 'failed'::text])))
);

COMMENT ON TABLE cryo.status_posts IS 'Outbound commit statuses: a webhook run''s outcome to POST to its webhook''s status_url when the run ends. The server sends them outside any engine transaction.';

CREATE TABLE cryo.test_database (
    only_row boolean DEFAULT true NOT NULL,
    marked_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT test_database_only_row_check CHECK (only_row)
);

COMMENT ON TABLE cryo.test_database IS 'Present (one row) only in a database made for tests: there cryo.now() honours the session setting cryo.fake_now. Never mark a production database.';

CREATE TABLE cryo.tokens (
    id text NOT NULL,
    kind text NOT NULL,
    org text NOT NULL,
    name text NOT NULL,
    secret_hash bytea NOT NULL,
    capabilities text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone,
    member_id text,
    CONSTRAINT tokens_kind_check CHECK ((kind = ANY (ARRAY['user'::text, 'agent'::text]))),
    CONSTRAINT tokens_user_has_member CHECK (((kind <> 'user'::text) OR (member_id IS NOT NULL)))
);

CREATE TABLE cryo.webhook_deliveries (
    org text NOT NULL,
    project text NOT NULL,
    webhook text NOT NULL,
    body_hash bytea NOT NULL,
    event text NOT NULL,
    outcome text,
    run_id text,
    event_id bigint,
    created_at timestamp with time zone NOT NULL,
    id bigint NOT NULL,
    input bytea,
    untrusted boolean DEFAULT false NOT NULL,
    redelivery_of bigint,
    redelivered_by text
);

COMMENT ON TABLE cryo.webhook_deliveries IS 'One row per signed body a webhook accepted (SHA-256 of the raw body), so a redelivery creates nothing: outcome started | skipped (if was false) | ignored (event not in on.webhook) | published.';

COMMENT ON COLUMN cryo.webhook_deliveries.input IS 'The sealed run input ({trigger}) of the delivery, which a redelivery starts again; NULL for a delivery stored before redeliveries.';

ALTER TABLE cryo.webhook_deliveries ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME cryo.webhook_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE cryo.workflow_versions (
    org text NOT NULL,
    project text NOT NULL,
    workflow text NOT NULL,
    version integer NOT NULL,
    filename text NOT NULL,
    interpreter text,
    source bytea NOT NULL,
    kind text NOT NULL,
    graph jsonb,
    workdir text,
    digest bytea,
    created_by text,
    created_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE cryo.workflow_versions IS 'Each definition a stored workflow has had, numbered from 1: the sealed source, its compiled graph, who stored it (a member login; NULL from SQL or before versions were kept) and when. digest is a keyed hash of the clear source the server computes, so an unchanged save adds no version.';

ALTER TABLE ONLY cryo.events ALTER COLUMN id SET DEFAULT nextval('cryo.events_id_seq'::regclass);

ALTER TABLE ONLY cryo.history ALTER COLUMN id SET DEFAULT nextval('cryo.history_id_seq'::regclass);

ALTER TABLE ONLY cryo.lease_starts ALTER COLUMN id SET DEFAULT nextval('cryo.lease_starts_id_seq'::regclass);

ALTER TABLE ONLY cryo.lease_waiters ALTER COLUMN id SET DEFAULT nextval('cryo.lease_waiters_id_seq'::regclass);

ALTER TABLE ONLY cryo.log_objects_to_delete ALTER COLUMN id SET DEFAULT nextval('cryo.log_objects_to_delete_id_seq'::regclass);

ALTER TABLE ONLY cryo.logs ALTER COLUMN id SET DEFAULT nextval('cryo.logs_id_seq'::regclass);

ALTER TABLE ONLY cryo.signals ALTER COLUMN id SET DEFAULT nextval('cryo.signals_id_seq'::regclass);

ALTER TABLE cryo.agents
    ADD CONSTRAINT agents_id_shape CHECK ((id ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$'::text)) NOT VALID;

ALTER TABLE ONLY cryo.agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (org, id);

ALTER TABLE ONLY cryo.app_roles
    ADD CONSTRAINT app_roles_pkey PRIMARY KEY (role);

ALTER TABLE ONLY cryo.artifact_blobs
    ADD CONSTRAINT artifact_blobs_pkey PRIMARY KEY (org, project, sha256);

ALTER TABLE ONLY cryo.artifacts
    ADD CONSTRAINT artifacts_pkey PRIMARY KEY (scope, name, tainted);

ALTER TABLE ONLY cryo.connections
    ADD CONSTRAINT connections_pkey PRIMARY KEY (org, project, name);

ALTER TABLE ONLY cryo.event_handlers
    ADD CONSTRAINT event_handlers_pkey PRIMARY KEY (org, project, name);

ALTER TABLE ONLY cryo.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.graph_cache
    ADD CONSTRAINT graph_cache_pkey PRIMARY KEY (org, project, untrusted, key_hash);

ALTER TABLE ONLY cryo.history
    ADD CONSTRAINT history_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.journal
    ADD CONSTRAINT journal_pkey PRIMARY KEY (run_id, path);

ALTER TABLE ONLY cryo.journal
    ADD CONSTRAINT journal_run_id_seq_key UNIQUE (run_id, seq);

ALTER TABLE ONLY cryo.lease_limits
    ADD CONSTRAINT lease_limits_pkey PRIMARY KEY (org, project, grp);

ALTER TABLE ONLY cryo.lease_starts
    ADD CONSTRAINT lease_starts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.lease_waiters
    ADD CONSTRAINT lease_waiters_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.log_archives
    ADD CONSTRAINT log_archives_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY cryo.log_moves
    ADD CONSTRAINT log_moves_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY cryo.log_objects_to_delete
    ADD CONSTRAINT log_objects_to_delete_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.logs
    ADD CONSTRAINT logs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.members
    ADD CONSTRAINT members_org_login_key UNIQUE (org, login);

ALTER TABLE ONLY cryo.members
    ADD CONSTRAINT members_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.metric_counts
    ADD CONSTRAINT metric_counts_pkey PRIMARY KEY (metric, org, project, label, label2);

ALTER TABLE ONLY cryo.metric_fold
    ADD CONSTRAINT metric_fold_pkey PRIMARY KEY (one);

ALTER TABLE ONLY cryo.node_approvals
    ADD CONSTRAINT node_approvals_pkey PRIMARY KEY (run_id, node_id, item, approver);

ALTER TABLE ONLY cryo.node_instances
    ADD CONSTRAINT node_instances_pkey PRIMARY KEY (run_id, node_id, item);

ALTER TABLE ONLY cryo.node_states
    ADD CONSTRAINT node_states_pkey PRIMARY KEY (run_id, node_id);

ALTER TABLE ONLY cryo.oidc_cli_nonces
    ADD CONSTRAINT oidc_cli_nonces_pkey PRIMARY KEY (nonce_hash);

ALTER TABLE ONLY cryo.oidc_logins
    ADD CONSTRAINT oidc_logins_pkey PRIMARY KEY (id_hash);

ALTER TABLE ONLY cryo.oidc_role_maps
    ADD CONSTRAINT oidc_role_maps_pkey PRIMARY KEY (org, claim, value);

ALTER TABLE ONLY cryo.oidc_spent_tokens
    ADD CONSTRAINT oidc_spent_tokens_pkey PRIMARY KEY (token_hash);

ALTER TABLE ONLY cryo.orgs
    ADD CONSTRAINT orgs_pkey PRIMARY KEY (slug);

ALTER TABLE ONLY cryo.projects
    ADD CONSTRAINT projects_pkey PRIMARY KEY (org, slug);

ALTER TABLE ONLY cryo.queue
    ADD CONSTRAINT queue_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY cryo.run_outputs
    ADD CONSTRAINT run_outputs_pkey PRIMARY KEY (run_id, key);

ALTER TABLE ONLY cryo.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (org, project, name);

ALTER TABLE ONLY cryo.secrets
    ADD CONSTRAINT secrets_pkey PRIMARY KEY (org, project, name);

ALTER TABLE ONLY cryo.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.sessions
    ADD CONSTRAINT sessions_secret_hash_key UNIQUE (secret_hash);

ALTER TABLE ONLY cryo.signals
    ADD CONSTRAINT signals_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.state_cells
    ADD CONSTRAINT state_cells_pkey PRIMARY KEY (scope, key, tainted);

ALTER TABLE ONLY cryo.status_posts
    ADD CONSTRAINT status_posts_pkey PRIMARY KEY (run_id);

ALTER TABLE ONLY cryo.test_database
    ADD CONSTRAINT test_database_pkey PRIMARY KEY (only_row);

ALTER TABLE ONLY cryo.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY cryo.tokens
    ADD CONSTRAINT tokens_secret_hash_key UNIQUE (secret_hash);

ALTER TABLE ONLY cryo.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (org, project, id);

ALTER TABLE ONLY cryo.webhooks
    ADD CONSTRAINT webhooks_pkey PRIMARY KEY (org, project, name);

ALTER TABLE ONLY cryo.workflow_versions
    ADD CONSTRAINT workflow_versions_pkey PRIMARY KEY (org, project, workflow, version);

ALTER TABLE ONLY cryo.workflows
    ADD CONSTRAINT workflows_pkey PRIMARY KEY (org, project, name);

CREATE INDEX agents_draining ON cryo.agents USING btree (org, id) WHERE (drain_requested_at IS NOT NULL);

CREATE INDEX artifact_blobs_touched ON cryo.artifact_blobs USING btree (touched_at);

CREATE INDEX artifacts_blob ON cryo.artifacts USING btree (org, project, sha256);

CREATE INDEX artifacts_cached ON cryo.artifacts USING btree (created_at) WHERE (cache_key IS NOT NULL);

CREATE INDEX artifacts_run ON cryo.artifacts USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX event_handlers_event ON cryo.event_handlers USING btree (org, project, event);

CREATE INDEX events_created ON cryo.events USING btree (created_at);

CREATE INDEX events_project_name ON cryo.events USING btree (org, project, name, id);

CREATE INDEX history_run ON cryo.history USING btree (run_id, id);

CREATE INDEX journal_event_waiters ON cryo.journal USING btree (org, project, key_name) WHERE ((status = 'pending'::text) AND (key_family = ANY (ARRAY['event'::text, 'event.tainted'::text])));

CREATE INDEX lease_starts_group ON cryo.lease_starts USING btree (org, project, grp, started_at);

CREATE INDEX lease_waiters_group ON cryo.lease_waiters USING btree (org, project, grp, id);

CREATE INDEX lease_waiters_run ON cryo.lease_waiters USING btree (run_id);

CREATE UNIQUE INDEX leases_hold ON cryo.leases USING btree (org, project, grp, holder_run_id, COALESCE(path, ''::text));

CREATE INDEX leases_holder ON cryo.leases USING btree (holder_run_id);

CREATE INDEX logs_run ON cryo.logs USING btree (run_id, id);

CREATE INDEX node_instances_event_waiters ON cryo.node_instances USING btree (org, project, wait_name) WHERE ((status = 'waiting'::text) AND (wait_kind = 'event'::text));

CREATE INDEX node_instances_job ON cryo.node_instances USING btree (job_run_id) WHERE (job_run_id IS NOT NULL);

CREATE INDEX node_instances_live ON cryo.node_instances USING btree (run_id, node_id, item) WHERE (status = ANY (ARRAY['ready'::text, 'running'::text, 'waiting'::text, 'retrying'::text]));

CREATE INDEX node_states_by_status ON cryo.node_states USING btree (status, run_id, open_deps, ord);

CREATE INDEX node_states_failing ON cryo.node_states USING btree (run_id) WHERE ((status = 'failed'::text) AND (NOT tolerated));

CREATE INDEX node_states_live ON cryo.node_states USING btree (run_id, ord) WHERE (status = ANY (ARRAY['running'::text, 'waiting'::text]));

CREATE INDEX node_states_loops ON cryo.node_states USING btree (run_id) WHERE ((def ? 'loop'::text) AND (status = ANY (ARRAY['running'::text, 'waiting'::text])));

CREATE INDEX node_states_ready ON cryo.node_states USING btree (run_id, ord) WHERE ((status = 'pending'::text) AND (open_deps = 0));

CREATE INDEX node_states_stop_if ON cryo.node_states USING btree (run_id) WHERE ((def ? 'stop_if'::text) AND (status = 'succeeded'::text) AND (NOT stop_checked));

CREATE INDEX oidc_cli_nonces_expiry ON cryo.oidc_cli_nonces USING btree (expires_at);

CREATE INDEX oidc_logins_expiry ON cryo.oidc_logins USING btree (expires_at);

CREATE INDEX oidc_spent_tokens_expiry ON cryo.oidc_spent_tokens USING btree (expires_at);

CREATE INDEX queue_claimed_expiry ON cryo.queue USING btree (claim_expires_at) WHERE (state = 'claimed'::text);

CREATE INDEX queue_deadline ON cryo.queue USING btree (deadline_at) WHERE (deadline_at IS NOT NULL);

CREATE INDEX queue_graph_pending ON cryo.queue USING btree (enqueued_at) WHERE ((state = 'pending'::text) AND (required_caps = '{graph}'::text[]));

CREATE INDEX queue_parked_wake ON cryo.queue USING btree (wake_at) WHERE (state = 'parked'::text);

CREATE INDEX queue_pending ON cryo.queue USING btree (org, enqueued_at) WHERE (state = 'pending'::text);

CREATE INDEX queue_pending_priority ON cryo.queue USING btree (org, priority DESC, enqueued_at) WHERE (state = 'pending'::text);

CREATE UNIQUE INDEX runs_activity_name ON cryo.runs USING btree (parent_run_id, activity_name) WHERE (activity_name IS NOT NULL);

CREATE INDEX runs_cancel_on ON cryo.runs USING btree (org, project, ((graph #>> '{cancel_on,event}'::text[]))) WHERE (graph ? 'cancel_on'::text);

CREATE INDEX runs_id_prefix ON cryo.runs USING btree (id text_pattern_ops);

CREATE UNIQUE INDEX runs_idempotency_key ON cryo.runs USING btree (org, project, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX runs_parent ON cryo.runs USING btree (parent_run_id) WHERE (parent_run_id IS NOT NULL);

CREATE INDEX runs_project_created ON cryo.runs USING btree (org, project, created_at DESC);

CREATE INDEX schedules_due ON cryo.schedules USING btree (next_fire_at NULLS FIRST) WHERE (NOT paused);

CREATE INDEX sessions_member ON cryo.sessions USING btree (member_id);

CREATE INDEX sessions_org ON cryo.sessions USING btree (org, created_at);

CREATE INDEX signals_run ON cryo.signals USING btree (run_id);

CREATE INDEX signals_unconsumed ON cryo.signals USING btree (run_id, name, id) WHERE (consumed_at IS NULL);

CREATE INDEX state_cells_project ON cryo.state_cells USING btree (org, project);

CREATE INDEX state_cells_run ON cryo.state_cells USING btree (run_id) WHERE (run_id IS NOT NULL);

CREATE INDEX status_posts_open ON cryo.status_posts USING btree (created_at) WHERE (state = ANY (ARRAY['waiting'::text, 'sending'::text]));

CREATE UNIQUE INDEX webhook_deliveries_body ON cryo.webhook_deliveries USING btree (org, project, webhook, body_hash) WHERE (redelivery_of IS NULL);

CREATE INDEX webhook_deliveries_recent ON cryo.webhook_deliveries USING btree (org, project, created_at DESC);

CREATE TRIGGER artifact_blobs_count AFTER INSERT OR DELETE ON cryo.artifact_blobs FOR EACH ROW EXECUTE FUNCTION cryo._count_blobs();

CREATE TRIGGER runs_inherit_traceparent BEFORE INSERT ON cryo.runs FOR EACH ROW WHEN (((new.parent_run_id IS NOT NULL) AND (new.traceparent IS NULL))) EXECUTE FUNCTION cryo._inherit_traceparent();

CREATE TRIGGER runs_inherit_untrusted BEFORE INSERT OR UPDATE OF parent_run_id ON cryo.runs FOR EACH ROW EXECUTE FUNCTION cryo._inherit_untrusted();

ALTER TABLE ONLY cryo.agents
    ADD CONSTRAINT agents_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.app_roles
    ADD CONSTRAINT app_roles_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.app_roles
    ADD CONSTRAINT app_roles_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.artifact_blobs
    ADD CONSTRAINT artifact_blobs_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.artifacts
    ADD CONSTRAINT artifacts_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.artifacts
    ADD CONSTRAINT artifacts_org_project_sha256_fkey FOREIGN KEY (org, project, sha256) REFERENCES cryo.artifact_blobs(org, project, sha256);

ALTER TABLE ONLY cryo.artifacts
    ADD CONSTRAINT artifacts_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.connections
    ADD CONSTRAINT connections_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.event_handlers
    ADD CONSTRAINT event_handlers_org_project_workflow_fkey FOREIGN KEY (org, project, workflow) REFERENCES cryo.workflows(org, project, name) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.history
    ADD CONSTRAINT history_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.journal
    ADD CONSTRAINT journal_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.lease_limits
    ADD CONSTRAINT lease_limits_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.lease_starts
    ADD CONSTRAINT lease_starts_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.lease_waiters
    ADD CONSTRAINT lease_waiters_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.leases
    ADD CONSTRAINT leases_holder_run_id_fkey FOREIGN KEY (holder_run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.logs
    ADD CONSTRAINT logs_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.members
    ADD CONSTRAINT members_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.node_approvals
    ADD CONSTRAINT node_approvals_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.node_instances
    ADD CONSTRAINT node_instances_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.node_states
    ADD CONSTRAINT node_states_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.oidc_role_maps
    ADD CONSTRAINT oidc_role_maps_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.projects
    ADD CONSTRAINT projects_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.queue
    ADD CONSTRAINT queue_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.run_outputs
    ADD CONSTRAINT run_outputs_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.runs
    ADD CONSTRAINT runs_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug);

ALTER TABLE ONLY cryo.runs
    ADD CONSTRAINT runs_parent_run_id_fkey FOREIGN KEY (parent_run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.schedules
    ADD CONSTRAINT schedules_org_project_workflow_fkey FOREIGN KEY (org, project, workflow) REFERENCES cryo.workflows(org, project, name) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.secrets
    ADD CONSTRAINT secrets_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug);

ALTER TABLE ONLY cryo.sessions
    ADD CONSTRAINT sessions_member_id_fkey FOREIGN KEY (member_id) REFERENCES cryo.members(id) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.sessions
    ADD CONSTRAINT sessions_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.signals
    ADD CONSTRAINT signals_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id);

ALTER TABLE ONLY cryo.state_cells
    ADD CONSTRAINT state_cells_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.state_cells
    ADD CONSTRAINT state_cells_run_id_fkey FOREIGN KEY (run_id) REFERENCES cryo.runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.status_posts
    ADD CONSTRAINT status_posts_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.tokens
    ADD CONSTRAINT tokens_member_id_fkey FOREIGN KEY (member_id) REFERENCES cryo.members(id);

ALTER TABLE ONLY cryo.tokens
    ADD CONSTRAINT tokens_org_fkey FOREIGN KEY (org) REFERENCES cryo.orgs(slug);

ALTER TABLE ONLY cryo.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_org_project_webhook_fkey FOREIGN KEY (org, project, webhook) REFERENCES cryo.webhooks(org, project, name) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.webhooks
    ADD CONSTRAINT webhooks_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.workflow_versions
    ADD CONSTRAINT workflow_versions_org_project_workflow_fkey FOREIGN KEY (org, project, workflow) REFERENCES cryo.workflows(org, project, name) ON DELETE CASCADE;

ALTER TABLE ONLY cryo.workflows
    ADD CONSTRAINT workflows_org_project_fkey FOREIGN KEY (org, project) REFERENCES cryo.projects(org, slug);
