-- The transitions layer. These functions, and no others, change a run's status, write
-- a queue row's state or claim columns, or add and complete journal rows. Every public
-- function (submit, claim, the durable calls, finish, cancel, tick, publish, ...) goes
-- through them, so each change of state is written out once.
--
--   _create_run    (nothing)          -> pending, without a queue row yet
--   _enqueue       pending | queued   -> pending, with a pending queue row
--   _hold_queued   pending            -> queued (behind its concurrency group)
--   _claim         pending            -> running, queue row claimed, fresh token
--   _drive         pending (graph)    -> running, claimed by a server driver for one transaction
--   _extend_claim  running            -> running, claim expiry pushed back
--   _release       running            -> pending (handed back, or its claim expired)
--   _park          running            -> parked, claim ended
--   _park_on       running            -> parked on a pending marker (every durable wait)
--   _wake          parked             -> pending, the marker it waited on completed
--   _graph_poke    parked (graph)     -> pending: something a node waits for happened
--   _finalize      any live status    -> terminal, queue row gone
--   _record        a done memo at a position       (journal)
--   _mark          a pending marker at a position  (journal): a park's, or a running step's
--   _forget        every journal row of a run      (journal; an activity retry)
-- and, for concurrency groups (each serialised by _lock_group; _group_holder reads who
-- holds one, _group_full whether it has room), the only writers of cryo.leases,
-- cryo.lease_waiters, cryo.lease_limits and cryo.lease_starts:
--   _declare_group_limit a taker sets the group's limit (N holders, or N per window)
--   _drop_lease          displace: a holder cancel-running replaces loses its hold
--   _take_lease          grant: the run holds the group
--   _queue_for_lease     queue: the run waits in the group's FIFO
--   _leave_lease_queues  a run (or one graph node instance) gives up its places
--   _hand_on_lease       hand on: a free group goes to its oldest live waiter
--   _release_lease       release: the holder gives the group back, and it is handed on
--   _release_leases      everything a run (or one node instance) holds or waits for
-- Callers hold the locks: the queue row (FOR UPDATE, or SKIP LOCKED in sweeps) before
-- the runs row, as the lock order in 00_core.sql says.

-- Locks and returns the queue row held by this claim token, or refuses the call.
-- Every agent-side transition starts here, so a stale agent can never write. A claim
-- whose expiry has passed is refused too, before tick() gets round to re-pending it:
-- another agent may take the run at any moment, so this one must stop now.
CREATE OR REPLACE FUNCTION cryo._claimed_row(p_run_id text, p_token uuid)
RETURNS cryo.queue
LANGUAGE plpgsql AS $$
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

-- The claim token stored for a claim an agent token took: the token the agent was
-- handed, bound to that agent token's id (the first 16 bytes of a SHA-256 of both), so
-- it is the live claim only when presented with that same agent token. The server
-- computes the same binding for every claim token an agent presents (its
-- cryopg.server.auth.bind_claim), and every check stays the one in _claimed_row. A claim
-- no agent token took (a SQL caller's, a graph driver's) is stored as handed out.
-- (PL/pgSQL: as a SQL function that is not inlined it was planned on every claim.)
CREATE OR REPLACE FUNCTION cryo._bind_claim(p_token uuid, p_agent_token text)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN CASE WHEN p_agent_token IS NULL THEN p_token
                ELSE encode(substring(sha256(convert_to(p_agent_token || '/' || p_token::text,
                                                        'UTF8')) FROM 1 FOR 16), 'hex')::uuid
           END;
END
$$;

-- Inserts a run as pending, or returns NULL when its idempotency key already names a
-- run of the project. The caller then enqueues it or holds it for admission.
CREATE OR REPLACE FUNCTION cryo._create_run(
    p_org text, p_project text, p_workflow text, p_filename text, p_interpreter text,
    p_source bytea, p_input bytea, p_input_clear jsonb, p_idempotency_key text,
    p_required_caps text[], p_untrusted boolean, p_parent_run_id text,
    p_workdir text DEFAULT NULL, p_graph jsonb DEFAULT NULL,
    p_timeout double precision DEFAULT NULL, p_priority integer DEFAULT 0)
RETURNS text
LANGUAGE plpgsql AS $$
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

-- Makes a run claimable: a fresh run, or a queued one its group has just admitted. An
-- untrusted run (other than a graph, which the server drives) also needs an agent that
-- confines its jobs: only agents advertising `isolated` claim it.
CREATE OR REPLACE FUNCTION cryo._enqueue(
    p_run_id text, p_org text, p_project text, p_required_caps text[])
RETURNS void
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION cryo._hold_queued(p_run_id text)
RETURNS void
LANGUAGE sql AS $$
    UPDATE cryo.runs SET status = 'queued', updated_at = cryo.now() WHERE id = p_run_id
$$;

-- Hands up to p_limit of the org's oldest pending runs this agent can serve to it, each
-- with its own single-use token and a claim that expires after p_seconds. One
-- statement with SKIP LOCKED, so concurrent claimers never wait on each other and never
-- win the same row. With p_agent_ids (a server claiming for several waiting agents at
-- once) the k-th run taken goes to the k-th agent, and p_limit is their number; with
-- p_agent_tokens the k-th claim is bound to the k-th agent token (_bind_claim). The
-- token returned is the one handed out; the queue row keeps it bound.
CREATE OR REPLACE FUNCTION cryo._claim(
    p_org text, p_agent_id text, p_capabilities text[], p_seconds double precision,
    p_limit integer, p_agent_ids text[] DEFAULT NULL, p_agent_tokens text[] DEFAULT NULL)
RETURNS TABLE (run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb, workdir text,
               agent_id text, agent_token text)
LANGUAGE plpgsql AS $$
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

-- A server driver takes graph runs that need a step forward, across orgs. Its claim
-- lives only as long as its transaction: it settles each run (parks or ends it) before
-- committing, and a driver that dies rolls back, leaving the run pending. A graph run's
-- attempt does not count turns.
CREATE OR REPLACE FUNCTION cryo._drive(p_driver text, p_limit integer)
RETURNS TABLE (run_id text, claim_token uuid)
LANGUAGE plpgsql AS $$
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

-- The same claim as _drive, on one named run a server is about to drive itself: a graph
-- whose every node the database runs is driven inside its own submit (cryo.submit_graph).
-- Returns the claim token, NULL when the run is not pending.
CREATE OR REPLACE FUNCTION cryo._drive_run(p_driver text, p_run_id text)
RETURNS uuid
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION cryo._extend_claim(p_run_id text, p_seconds double precision)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.queue SET claim_expires_at = cryo.now() + make_interval(secs => p_seconds)
     WHERE run_id = p_run_id;
END
$$;

-- The tail of every transition that makes runs claimable again in bulk (_release,
-- _wake): agents hear there is work (graph drivers, on their own channel, when p_graphs
-- of the p_n runs are graph runs), and watchers of those runs hear they moved.
CREATE OR REPLACE FUNCTION cryo._notify_requeued(p_n integer, p_watched text[],
                                                 p_graphs integer DEFAULT 0)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Puts claimed runs back to pending, keeping their journal, leases and attempt count, so
-- the next claim replays. p_kind names why in history: released, claim_expired.
CREATE OR REPLACE FUNCTION cryo._release(p_run_ids text[], p_kind text)
RETURNS integer
LANGUAGE plpgsql AS $$
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

-- Takes back a claim its agent never received (the server saw the agent's long-poll
-- closed before or while it answered): the run is pending again, and since it never ran
-- under that claim, the attempt the claim counted is uncounted.
CREATE OR REPLACE FUNCTION cryo._unclaim(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Suspends a claimed run and ends its claim. p_path is the journal marker it waits on
-- (NULL for a retry backoff); p_wake the time tick() wakes it, if any.
CREATE OR REPLACE FUNCTION cryo._park(
    p_run_id text, p_reason text, p_path text, p_name text, p_wake timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- The one way a durable wait parks: a pending marker at the call's position and the run
-- parked on it. A marker an earlier pass left at the path stands, and so does its due
-- time (a sleep's deadline does not move on a replay); tick() wakes the run then, if
-- the marker has one. Returns that due time.
CREATE OR REPLACE FUNCTION cryo._park_on(
    p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text,
    p_ordinal integer, p_reason text, p_park_name text, p_due timestamptz,
    p_ref_run_id text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
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

-- Wakes parked runs: completes the marker each waits on with the answer given (the
-- same for all), makes them claimable again and says so in history as p_kind. Rows no
-- longer parked (woken meanwhile by another path) are left alone. Returns how many woke.
CREATE OR REPLACE FUNCTION cryo._wake(
    p_run_ids text[], p_kind text, p_result bytea DEFAULT NULL,
    p_answer_clear jsonb DEFAULT NULL, p_exit_code integer DEFAULT 0)
RETURNS integer
LANGUAGE plpgsql AS $$
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

-- Wakes a graph run parked on its nodes (a child ended, a signal, event, approval or
-- lease arrived). The queue row is locked whatever its state: a run being driven right
-- now is waited for (then woken if it parked), and a pending one cannot be taken by a
-- driver until this transaction commits, so no driver decides without what happened here.
CREATE OR REPLACE FUNCTION cryo._graph_poke(p_run_id text, p_kind text)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Ends a run: terminal status, queue row gone, and what an ending sets off (its
-- leases go to their next waiters, its parent may be waiting to collect it; both in
-- 60_finish.sql). Every way a run ends comes through here, so that happens once.
CREATE OR REPLACE FUNCTION cryo._finalize(
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

-- The position a new journal entry takes: the one the agent's pass reached, so a call
-- that recorded nothing (a step that raised and was caught) leaves a gap rather than
-- shifting every later call, and a strict replay still lines up. Without one, or when
-- that position is taken (a lenient replay), the next free number.
CREATE OR REPLACE FUNCTION cryo._next_seq(p_run_id text, p_position integer)
RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_position IS NOT NULL AND p_position >= 0 AND NOT EXISTS (
            SELECT 1 FROM cryo.journal j WHERE j.run_id = p_run_id AND j.seq = p_position) THEN
        RETURN p_position;
    END IF;
    RETURN (SELECT coalesce(max(j.seq) + 1, 0) FROM cryo.journal j WHERE j.run_id = p_run_id);
END
$$;

-- Records a durable call's answer (a memo) for the claimed run. Returns its position,
-- or NULL when the path already holds an entry (the caller decides what that means).
-- With p_complete_marker, a pending marker at the path (a step pinned by cryo.mark_step,
-- by this pass or by one that died mid-step) is completed in place and keeps its
-- position and start time. p_started_at, when earlier, is when the call began (never
-- before the run was created): a step too quick to be marked, or marked late, would
-- otherwise read as starting when it was recorded (or marked).
CREATE OR REPLACE FUNCTION cryo._record(
    p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text,
    p_ordinal integer, p_result bytea DEFAULT NULL, p_answer_clear jsonb DEFAULT NULL,
    p_exit_code integer DEFAULT 0, p_ref_run_id text DEFAULT NULL, p_label text DEFAULT NULL,
    p_complete_marker boolean DEFAULT false, p_started_at timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
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

-- A pending marker: the call the run is about to park on, or a step about to run (the
-- spec's "a marker whose call has recorded nothing is a step running right now"). A
-- marker an earlier pass left at the same path stands (with its due time).
CREATE OR REPLACE FUNCTION cryo._mark(
    p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text,
    p_ordinal integer, p_due timestamptz, p_ref_run_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Forgets what a run's earlier attempts recorded: every journal row goes. An activity
-- that failed and is retried runs again as a new unit of work, memos and all: its steps
-- run again, an incr counts again, a cas tries again. A state add still finds its cell
-- held by this run (the cell records the run that created it), so it is still won.
CREATE OR REPLACE FUNCTION cryo._forget(p_run_id text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.journal WHERE run_id = p_run_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- -- leases on concurrency groups -----------------------------------------------------------
-- A group (one per name per project) has at most its limit of holders (one, unless a
-- taker declared more: cryo.lease_limits; with a window, at most that many grants per
-- window instead), runs, and a FIFO of waiters: queued submits ('admission'), scripts
-- parked on `lock` ('script') and graph node instances ('graph'). Callers hold the
-- group's lock (cryo._lock_group) first.

-- Serialises every acquire, enqueue and hand-over of one group.
CREATE OR REPLACE FUNCTION cryo._lock_group(p_org text, p_project text, p_group text)
RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtextextended('lease/' || p_org || '/' || p_project || '/' || p_group, 0))
$$;

-- The oldest live holder of a group, or NULL. A holder that already ended counts as none.
CREATE OR REPLACE FUNCTION cryo._group_holder(p_org text, p_project text, p_group text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT l.holder_run_id FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
     WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
       AND NOT cryo.is_terminal(r.status)
     ORDER BY l.acquired_at LIMIT 1
$$;

-- Whether a group takes no new holder now: its limit of live holders hold it, or, for a
-- group with a window, its limit of grants were made within the window.
CREATE OR REPLACE FUNCTION cryo._group_full(p_org text, p_project text, p_group text)
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
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

-- A taker declares the group's limit (p_limit NULL: declares nothing, the group keeps
-- what it has; 1 with no window: the default, no row). The latest declaration holds.
CREATE OR REPLACE FUNCTION cryo._declare_group_limit(
    p_org text, p_project text, p_group text, p_limit integer, p_window double precision)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Grant: the run holds the group from now (holds left by ended runs go). A group with
-- a window counts the grant, and forgets grants older than the window.
CREATE OR REPLACE FUNCTION cryo._take_lease(
    p_org text, p_project text, p_group text, p_run_id text, p_kind text, p_path text,
    p_scoped boolean)
RETURNS void
LANGUAGE plpgsql AS $$
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

-- Queue: the run takes the last place in the group's FIFO.
CREATE OR REPLACE FUNCTION cryo._queue_for_lease(
    p_org text, p_project text, p_group text, p_run_id text, p_kind text, p_path text,
    p_scoped boolean)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.lease_waiters (org, project, grp, run_id, kind, scoped, path, enqueued_at)
    VALUES (p_org, p_project, p_group, p_run_id, p_kind, coalesce(p_scoped, false), p_path,
            cryo.now())
$$;

-- The run gives up its places in every group's FIFO; with p_path, only the place one
-- graph node instance (its lease path) waited in.
CREATE OR REPLACE FUNCTION cryo._leave_lease_queues(p_run_id text, p_path text DEFAULT NULL)
RETURNS void
-- PL/pgSQL, so its plan is kept for the session: every run's ending calls it.
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cryo.lease_waiters WHERE run_id = p_run_id AND (p_path IS NULL OR path = p_path);
END
$$;

-- Hand on: while a group has room (cryo._group_full), its oldest waiter gets it -- a
-- queued submit is enqueued, a script parked on `lock` wakes holding the lease, a
-- graph's driver is poked to start the node instance. Waiters that ended meanwhile are
-- skipped; holds of ended runs in a group nobody waits for are dropped. Returns the last
-- run that got it, if any.
CREATE OR REPLACE FUNCTION cryo._hand_on_lease(p_org text, p_project text, p_group text)
RETURNS text
LANGUAGE plpgsql AS $$
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

-- Displace: the run loses its hold on the group without handing it on (a newcomer
-- under cancel-running took its place already).
CREATE OR REPLACE FUNCTION cryo._drop_lease(p_org text, p_project text, p_group text,
                                            p_run_id text)
RETURNS void
LANGUAGE sql AS $$
    DELETE FROM cryo.leases
     WHERE org = p_org AND project = p_project AND grp = p_group AND holder_run_id = p_run_id
$$;

-- Release: the run gives back its hold on one group (the caller holds the group lock),
-- which goes on to the next waiter. Returns false when the run did not hold it. With
-- p_path, only the hold one graph node instance took: the run's own admission hold on
-- the same group (a node whose group is its run's) stays.
CREATE OR REPLACE FUNCTION cryo._release_lease(
    p_org text, p_project text, p_group text, p_run_id text, p_path text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
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

-- Set off by every ending: the run gives up every group it holds and its places in
-- every group's queue. With p_path, only what one graph node instance held or waited for
-- (its lease path), when that instance ends.
CREATE OR REPLACE FUNCTION cryo._release_leases(p_run_id text, p_path text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
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
