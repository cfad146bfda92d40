-- cryopg's engine, in the order a run lives. Read the files by name:
--
--   00 core              the clock, the error catalogue, what "terminal" means, call identity
--   10 transitions       the only writers of a run's status, its queue row, its journal
--                        and concurrency-group leases
--   12 node transitions  the only writers of a graph run's node rows, and its node statuses
--   15 expressions       graph expressions and templates, evaluated over a scope
--   20 submit            creating runs, and admission to a concurrency group
--   30 claim             agents taking runs, keeping and handing back their claims, logs
--   40 journal           durable calls: recording memos, reading them back, history
--   50 waits             parking and waking: sleep, signals, events, leases, children
--   60 finish            a run's end: outcome, retry, cancel, and what an end sets off
--   70 state             cells of run and entity scope, add / cas / incr
--   72 graph drive       a driver takes a graph run and reads it; constant state nodes
--   75 graphs            the graph interpreter: planning, starting nodes, settling a run
--   76 graph operators   approving and rejecting approvals, rerunning from a node
--   77 graph reads       a graph run's nodes, document, jobs and their logs
--   78 artifacts         files runs put and get: the index over content-addressed blobs
--   80 sweeps            tick (the poll behind every push), retention, project removal
--   82 log store         moving finished runs' logs to the object store, and back
--   85 triggers          schedules, webhooks, event handlers and cancel_on: runs nobody submitted
--   90 tenancy           orgs, keys, tokens, members, secrets
--   91 connections       a project's stored connections (naming its secrets), for connector nodes
--   92 sessions          browser sign-in, OIDC and CLI sessions
--   95 reads             what the server and DBAs read: runs, logs, events, views
--   96 operators         rerunning a run
--   97 metrics           counting what operators scrape (GET /metrics), runs' trace context
--   99 roles             grants for applications and DBAs
--
-- A function calls functions of its own file or earlier ones. The few calls the other
-- way are what an ending or an event sets off (10's _finalize ends a cancelled graph
-- run's nodes and wakes a parent, 20's _admit cancels the holder it displaces, 50's
-- _publish_event starts handlers, ...); tests/sql/test_file_order.py lists them all.
--
-- A run is one row of cryo.runs. Its status moves
--
--   queued --> pending --> running --> succeeded | failed | cancelled | unreadable
--                ^            |
--                +-- parked <-+   (sleep, a wait, a lease, a retry backoff)
--                ^            |
--                +------------+   (claim released, or its expiry passed)
--
-- queued: waiting behind the holder of its concurrency group (no queue row yet).
-- pending / running / parked: the run has one cryo.queue row, whose state is pending,
-- claimed or parked. The row goes when the run ends, so every queue index is small.
-- A claim is an agent's hold on a running run: a single-use token and an expiry the
-- agent keeps pushing back. A lease is something else: a run's hold on a concurrency
-- group (cryo.leases), granted in FIFO order (cryo.lease_waiters).
--
-- The journal holds one row per durable call of a run, at a position (seq) the agent
-- reports: 'done' rows are memos that a replay answers from; a 'pending' row is a
-- marker for the call the run is parked on. history is the append-only account of
-- what happened, for people.
--
-- Lock order, everywhere: a concurrency group's advisory lock, then the queue row of a
-- run (FOR UPDATE), then its runs row. Set-based sweeps take rows with SKIP LOCKED.

-- Whether this database was made for tests (cryo.test_database has its row). Only the
-- schema owner can write that table, so an application cannot mark its own database,
-- however it sets its session. A definer function: the views' readers call now() too.
CREATE OR REPLACE FUNCTION cryo._test_clock() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, cryo, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM cryo.test_database)
$$;

-- The engine's clock. Tests move time by setting cryo.fake_now in their session, so
-- every due-time comparison goes through here rather than now(). Any session can set
-- that setting, so it counts only in a test database; while it is unset (always, in
-- production) the test-database lookup is never made and this stays an inlined now().
CREATE OR REPLACE FUNCTION cryo.now() RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN coalesce(pg_catalog.current_setting('cryo.fake_now', true), '') = ''
                THEN pg_catalog.now()
                WHEN cryo._test_clock()
                THEN pg_catalog.current_setting('cryo.fake_now')::timestamptz
                ELSE pg_catalog.now() END
$$;
COMMENT ON FUNCTION cryo.now() IS
    'Returns the engine time: the session setting cryo.fake_now when set in a test database (one marked by cryo.mark_test_database), else now(). Raises nothing.';

-- Marks this database as made for tests, so cryo.fake_now moves its clock. Owner only
-- (nothing in the schema is executable by PUBLIC, and this is granted to no role); the
-- test fixture calls it once on the template every test database is cloned from.
CREATE OR REPLACE FUNCTION cryo.mark_test_database()
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.test_database DEFAULT VALUES ON CONFLICT DO NOTHING
$$;
COMMENT ON FUNCTION cryo.mark_test_database() IS
    'Marks this database as a test database: cryo.now() honours cryo.fake_now from then on. Never call it on a production database. Returns nothing; raises nothing.';

-- Who is asking. The engine's public functions run as their owner (SECURITY DEFINER),
-- so current_user inside them is the owner; the caller is the session's role: the one
-- SET ROLE chose (PostgreSQL checks membership), else the login.
CREATE OR REPLACE FUNCTION cryo._caller() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN session_user::text
                ELSE pg_catalog.current_setting('role') END
$$;

-- The tenant the caller may act on, as a LIKE pattern over 'org:project:' (slugs hold
-- no LIKE wildcard): '%' for anyone not scoped (the engine's roles: the owner, whom the
-- server connects as, and whoever can become it, superusers included; and roles outside
-- cryo_app, e.g. DBAs, whose grants decide what they read), 'org:%' or 'org:project:'
-- for a member of cryo_app bound by cryo.bind_app_role, and '' (matches nothing) for a
-- member of cryo_app with no binding. A pattern rather than a pair so that a view can
-- compare each row with one initplan value and one LIKE. Definer: it reads app_roles
-- for the views' readers, and current_user here is always the owner.
CREATE OR REPLACE FUNCTION cryo._app_tenant() RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, cryo, pg_temp AS $$
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

-- The one tenant check of the application surface: every function cryo_app may call
-- starts here with the org and project it is about to act on. The server (the owner)
-- leaves at the first comparison, without a lookup.
CREATE OR REPLACE FUNCTION cryo._app_tenant_check(p_org text, p_project text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
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

-- The one reading of a run id: {org}:{project}:run-{...}. cryo._create_run makes every
-- id so and slugs hold no colon, so a run's tenant is known without a lookup. (Python's
-- twin is cryopg/run_ids.py; a test keeps the two equal.)
CREATE OR REPLACE FUNCTION cryo._run_org(p_run_id text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT split_part(p_run_id, ':', 1)
$$;

CREATE OR REPLACE FUNCTION cryo._run_project(p_run_id text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT split_part(p_run_id, ':', 2)
$$;

CREATE OR REPLACE FUNCTION cryo._run_in_project(p_run_id text, p_org text, p_project text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_run_id IS NOT NULL AND split_part(p_run_id, ':', 1) = p_org
       AND split_part(p_run_id, ':', 2) = p_project AND split_part(p_run_id, ':', 3) LIKE 'run-%'
$$;

-- Whether a run is untrusted: what it writes to a shared scope is tainted, and it reads
-- only tainted data and what trusted writers published (docs/security/trust.md). The one
-- place a function learns a run's trust: from runs.untrusted, never from its caller.
-- No run (an application's or a person's call) is a trusted writer.
CREATE OR REPLACE FUNCTION cryo._run_untrusted(p_run_id text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT r.untrusted FROM cryo.runs r WHERE r.id = p_run_id), false)
$$;

-- The same check for a run id; no lookup, so an unknown run of another tenant is
-- refused the same as a known one.
CREATE OR REPLACE FUNCTION cryo._app_run_check(p_run_id text)
RETURNS void
LANGUAGE sql STABLE AS $$
    SELECT cryo._app_tenant_check(cryo._run_org(p_run_id), cryo._run_project(p_run_id))
$$;

-- The one list of the engine's SQLSTATEs. Python maps each code to an exception class
-- and a test checks the two lists agree.
CREATE OR REPLACE FUNCTION cryo.error_codes()
RETURNS TABLE (code text, name text, meaning text)
LANGUAGE sql IMMUTABLE AS $$
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
COMMENT ON FUNCTION cryo.error_codes() IS
    'Returns every SQLSTATE the engine raises (class CR) with its name and meaning. Raises nothing.';

-- The one definition of a finished run. Inlined by the planner (SQL, immutable).
CREATE OR REPLACE FUNCTION cryo.is_terminal(p_status text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_status IN ('succeeded', 'failed', 'cancelled', 'unreadable')
$$;
COMMENT ON FUNCTION cryo.is_terminal(text) IS
    'Returns true for the statuses a run never leaves (succeeded, failed, cancelled, unreadable). Raises nothing.';

-- The one refusal of an unknown run (CR003).
CREATE OR REPLACE FUNCTION cryo._no_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
END
$$;

-- A run's row, or the refusal: CR003 for an unknown run and, with p_live, CR006 for one
-- that has finished (p_why says what it no longer takes). With p_lock the row is locked
-- (FOR UPDATE).
CREATE OR REPLACE FUNCTION cryo._run_row(p_run_id text, p_live boolean DEFAULT false,
                                         p_lock boolean DEFAULT false, p_why text DEFAULT NULL)
RETURNS cryo.runs
LANGUAGE plpgsql AS $$
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

-- The one rule for the exit code a finished run reports: to a parent collecting it,
-- and (as get_run's outcome_code) to `cryopg run`, `submit --follow` and `logs
-- --follow`, which exit with it. A failure keeps its own code when a process could
-- exit with it (1-255), else 1; a cancelled run is 130, as a shell reports Ctrl-C.
CREATE OR REPLACE FUNCTION cryo._outcome_code(p_status text, p_exit_code integer)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_status WHEN 'succeeded' THEN 0
                         WHEN 'cancelled' THEN 130
                         WHEN 'failed' THEN CASE WHEN p_exit_code BETWEEN 1 AND 255
                                                 THEN p_exit_code ELSE 1 END
                         ELSE 1 END
$$;

CREATE OR REPLACE FUNCTION cryo._check_name(p_what text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 200 OR p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% name must be 1 to 200 printable characters', p_what USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo._check_timeout(p_timeout double precision)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_timeout IS NOT NULL AND (p_timeout < 0 OR p_timeout = 'infinity'::float8
                                  OR p_timeout = 'NaN'::float8) THEN
        RAISE EXCEPTION 'a timeout must be a finite number of seconds >= 0' USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo._require_project(p_org text, p_project text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, coalesce(p_project, '') USING ERRCODE = 'CR005';
    END IF;
END
$$;

-- A durable call's identity is (scope, family, name, ordinal); its path is that
-- identity written as one key, family/name/ordinal with '%' and '/' of the name escaped.
-- The path is derived here; one sent by a caller must agree with it.
CREATE OR REPLACE FUNCTION cryo.call_path(
    p_family text, p_name text, p_ordinal integer, p_path text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
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
COMMENT ON FUNCTION cryo.call_path(text, text, integer, text) IS
    'Returns the journal path of a durable call (family/name/ordinal, name escaped), checking p_path against it when given. Raises CR004 for a missing family or name or a negative ordinal, CR009 when p_path disagrees.';

-- Appends one history event. Identity columns stay in the clear; payload is sealed.
-- PL/pgSQL, not SQL: its INSERT is planned once a session, where a SQL function's is
-- planned again on every call (a graph turn writes two events a node).
CREATE OR REPLACE FUNCTION cryo._history(
    p_run_id text, p_org text, p_project text, p_kind text,
    p_family text DEFAULT NULL, p_name text DEFAULT NULL, p_ordinal integer DEFAULT NULL,
    p_attempt integer DEFAULT NULL, p_payload bytea DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, attempt, payload, created_at)
    VALUES (p_run_id, p_org, p_project, p_kind,
            CASE WHEN p_family IS NULL THEN NULL ELSE 'run' END,
            p_family, p_name, p_ordinal, p_attempt, p_payload, cryo.now());
END
$$;

-- Tells followers of a run (log tails, `--follow`) that it changed. A NOTIFY holds a
-- cluster-wide lock from pre-commit until the commit is flushed, which would line up
-- every finishing transaction behind one another; so only a run somebody follows
-- (cryo.watch_run) notifies, and followers also poll as a backstop.
CREATE OR REPLACE FUNCTION cryo._notify_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = p_run_id AND r.watched) THEN
        PERFORM pg_notify('cryo_run', p_run_id);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo.watch_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.runs SET watched = true WHERE id = p_run_id AND NOT watched;
END
$$;
COMMENT ON FUNCTION cryo.watch_run(text) IS
    'Marks a run as followed, so its status and log changes NOTIFY cryo_run from now on. Returns nothing; raises nothing.';
