-- The dispatch queue: claims, leases, parking and the tick that backs every push.
-- A queue row exists only while its run is live, so every index here stays small.

-- Hands the oldest pending run this agent can serve to the agent, with a fresh
-- single-use claim token and a lease. One UPDATE with SKIP LOCKED, so concurrent
-- claimers never wait on each other and never win the same row.
CREATE OR REPLACE FUNCTION cryo.claim_job(
    p_org text, p_agent_id text, p_capabilities text[], p_lease_seconds double precision)
RETURNS TABLE (run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_token uuid := gen_random_uuid();
    v_run text;
BEGIN
    UPDATE cryo.queue q
       SET state = 'claimed', claim_token = v_token, agent_id = p_agent_id,
           claimed_at = v_now, lease_expires_at = v_now + make_interval(secs => p_lease_seconds)
     WHERE q.run_id = (SELECT c.run_id FROM cryo.queue c
                        WHERE c.org = p_org AND c.state = 'pending'
                          AND c.required_caps <@ p_capabilities
                        ORDER BY c.enqueued_at
                        LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING q.run_id INTO v_run;
    IF v_run IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        UPDATE cryo.runs r
           SET status = 'running', substate = NULL, attempt = r.attempt + 1,
               started_at = coalesce(r.started_at, v_now), updated_at = v_now
         WHERE r.id = v_run
        RETURNING r.id, v_token, r.attempt, r.filename, r.interpreter, r.source, r.input,
                  r.input_clear;
END
$$;
COMMENT ON FUNCTION cryo.claim_job(text, text, text[], double precision) IS
    'Claims the oldest pending run of the org whose required capabilities the agent has; returns the run, a new claim token and the pinned source, or no row when nothing is pending. Raises nothing of its own.';

-- Extends the lease of a live claim; the answer tells the agent to stop the script.
CREATE OR REPLACE FUNCTION cryo.renew_lease(p_run_id text, p_token uuid, p_lease_seconds double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.queue SET lease_expires_at = cryo.now() + make_interval(secs => p_lease_seconds)
     WHERE run_id = p_run_id;
    RETURN (SELECT cancel_requested FROM cryo.runs WHERE id = p_run_id);
END
$$;
COMMENT ON FUNCTION cryo.renew_lease(text, uuid, double precision) IS
    'Extends the claim''s lease; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

-- Hands a claimed run back at once (its agent is shutting down): the run goes back to
-- pending as after a lapsed lease, without waiting out the lease. Leases, journal and
-- attempt count stay, so the next pass replays.
CREATE OR REPLACE FUNCTION cryo.release_claim(p_run_id text, p_token uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_run cryo.runs;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF v_run.cancel_requested THEN
        PERFORM cryo._finalize_run(p_run_id, 'cancelled', NULL, 'cancelled');
        RETURN;
    END IF;
    UPDATE cryo.queue
       SET state = 'pending', claim_token = NULL, agent_id = NULL, claimed_at = NULL,
           lease_expires_at = NULL
     WHERE run_id = p_run_id;
    UPDATE cryo.runs SET status = 'pending', updated_at = cryo.now() WHERE id = p_run_id;
    INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
    VALUES (p_run_id, v_q.org, v_q.project, 'released', v_run.attempt, cryo.now());
    PERFORM cryo._notify_run(p_run_id);
    PERFORM pg_notify('cryo_work', '');
END
$$;
COMMENT ON FUNCTION cryo.release_claim(text, uuid) IS
    'Gives a claimed run back to the queue now (or ends it cancelled if a cancel was asked). Returns nothing. Raises CR002 for a stale claim token.';

-- Suspends a run on `sleep`: pins the deadline in a pending journal marker, parks
-- the queue row and ends the claim. The wake in tick() completes the marker.
CREATE OR REPLACE FUNCTION cryo.park_sleep(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer, p_seconds double precision)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_now timestamptz := cryo.now();
    v_wake timestamptz;
BEGIN
    IF p_seconds IS NULL OR p_seconds < 0 OR p_seconds = 'infinity'::float8 OR p_seconds = 'NaN'::float8 THEN
        RAISE EXCEPTION 'sleep needs a finite duration of zero or more seconds, not %', p_seconds
            USING ERRCODE = 'CR004';
    END IF;
    v_wake := v_now + make_interval(secs => p_seconds);
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, attempt, status, due_at, created_at)
    VALUES (p_run_id, v_q.org, v_q.project,
            cryo._next_seq(p_run_id),
            p_path, 'run', 'sleep', '', p_ordinal,
            (SELECT r.attempt FROM cryo.runs r WHERE r.id = p_run_id), 'pending', v_wake, v_now)
    ON CONFLICT (run_id, path) DO NOTHING;
    -- A deadline pinned by an earlier pass stands.
    SELECT j.due_at INTO v_wake FROM cryo.journal j WHERE j.run_id = p_run_id AND j.path = p_path;
    UPDATE cryo.queue
       SET state = 'parked', wake_at = v_wake, park_reason = 'sleeping', park_path = p_path,
           parked_at = v_now, claim_token = NULL, agent_id = NULL, claimed_at = NULL,
           lease_expires_at = NULL
     WHERE run_id = p_run_id;
    UPDATE cryo.runs SET status = 'parked', substate = 'sleeping', updated_at = v_now
     WHERE id = p_run_id;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'timer_scheduled', 'sleep', '', p_ordinal);
    PERFORM cryo._notify_run(p_run_id);
    RETURN v_wake;
END
$$;
COMMENT ON FUNCTION cryo.park_sleep(text, uuid, text, integer, double precision) IS
    'Parks the claimed run until now + p_seconds (or the deadline an earlier pass pinned) and ends the claim; returns the wake time. Raises CR002 for a stale claim token, CR004 for a bad duration.';

-- The agent's report that the script ended.
CREATE OR REPLACE FUNCTION cryo.finish_run(
    p_run_id text, p_token uuid, p_outcome text, p_exit_code integer DEFAULT NULL,
    p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    IF p_outcome NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable') THEN
        RAISE EXCEPTION 'outcome must be succeeded, failed, cancelled or unreadable, not %', p_outcome
            USING ERRCODE = 'CR004';
    END IF;
    IF p_outcome = 'failed' AND cryo._retry_if_allowed(p_run_id, p_exit_code) THEN
        RETURN;  -- an activity with retries left waits out its backoff instead
    END IF;
    PERFORM cryo._finalize_run(p_run_id, p_outcome, p_exit_code, p_error);
END
$$;
COMMENT ON FUNCTION cryo.finish_run(text, uuid, text, integer, text) IS
    'Ends the claimed run with the given terminal outcome, or parks a failed activity that has retries left until its backoff passes. Returns nothing. Raises CR002 for a stale claim token, CR004 for an unknown outcome.';

-- The poll backstop behind every push: re-pends claims whose lease lapsed (or ends
-- them, when a cancel was asked for) and wakes parked runs that are due. Set-based
-- over partial indexes, and safe to run from every server replica at once.
CREATE OR REPLACE FUNCTION cryo.tick(p_batch integer DEFAULT 1000)
RETURNS TABLE (expired integer, woken integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_expired integer;
    v_woken integer;
    v_cancel record;
BEGIN
    -- Lapsed leases whose run was asked to cancel simply end.
    FOR v_cancel IN
        SELECT q.run_id FROM cryo.queue q JOIN cryo.runs r ON r.id = q.run_id
         WHERE q.state = 'claimed' AND q.lease_expires_at < v_now AND r.cancel_requested
         LIMIT p_batch
           FOR UPDATE OF q SKIP LOCKED
    LOOP
        PERFORM cryo._finalize_run(v_cancel.run_id, 'cancelled', NULL, 'cancelled');
    END LOOP;

    WITH lapsed AS (
        SELECT q.run_id FROM cryo.queue q
         WHERE q.state = 'claimed' AND q.lease_expires_at < v_now
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE cryo.queue q
           SET state = 'pending', claim_token = NULL, agent_id = NULL, claimed_at = NULL,
               lease_expires_at = NULL
          FROM lapsed WHERE q.run_id = lapsed.run_id
        RETURNING q.run_id, q.org, q.project
    ), runs_back AS (
        UPDATE cryo.runs r SET status = 'pending', updated_at = v_now
          FROM requeued WHERE r.id = requeued.run_id
        RETURNING r.id, r.org, r.project, r.attempt
    )
    INSERT INTO cryo.history (run_id, org, project, kind, attempt, created_at)
    SELECT id, org, project, 'lease_expired', attempt, v_now FROM runs_back;
    GET DIAGNOSTICS v_expired = ROW_COUNT;

    -- Due parked rows: a sleep is over, a bounded wait timed out (its memo records exit
    -- code 124, so replay takes the same branch), or a retry's backoff has passed.
    WITH due AS (
        SELECT q.run_id, q.park_path FROM cryo.queue q
         WHERE q.state = 'parked' AND q.wake_at <= v_now
         ORDER BY q.wake_at
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), memo AS (
        UPDATE cryo.journal j
           SET status = 'done', completed_at = v_now,
               exit_code = CASE WHEN j.key_family = 'sleep' THEN 0 ELSE 124 END
          FROM due WHERE j.run_id = due.run_id AND j.path = due.park_path
        RETURNING j.run_id, j.key_family, j.key_name, j.key_ordinal
    ), requeued AS (
        UPDATE cryo.queue q
           SET state = 'pending', wake_at = NULL, park_reason = NULL, park_path = NULL,
               park_name = NULL, parked_at = NULL, enqueued_at = v_now
          FROM due WHERE q.run_id = due.run_id
        RETURNING q.run_id
    ), runs_back AS (
        UPDATE cryo.runs r SET status = 'pending', substate = NULL, updated_at = v_now
          FROM requeued WHERE r.id = requeued.run_id
        RETURNING r.id, r.org, r.project
    )
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT runs_back.id, runs_back.org, runs_back.project,
           CASE WHEN memo.run_id IS NULL THEN 'retry_due'
                WHEN memo.key_family = 'sleep' THEN 'timer_fired' ELSE 'wait_timed_out' END,
           CASE WHEN memo.run_id IS NULL THEN NULL ELSE 'run' END, memo.key_family,
           memo.key_name, memo.key_ordinal, v_now
      FROM runs_back LEFT JOIN memo ON memo.run_id = runs_back.id;
    GET DIAGNOSTICS v_woken = ROW_COUNT;

    PERFORM cryo._purge_events(p_batch);
    PERFORM cryo._collect_runs(p_batch);
    PERFORM cryo._reconcile_admission(p_batch);

    IF v_expired + v_woken > 0 THEN
        PERFORM pg_notify('cryo_work', '');
    END IF;
    RETURN QUERY SELECT v_expired, v_woken;
END
$$;
COMMENT ON FUNCTION cryo.tick(integer) IS
    'Re-pends runs whose lease lapsed, ends lapsed runs that were asked to cancel, wakes due parked runs (sleeps, timed-out waits, retry backoffs), purges bus events and collects terminal runs past retention, and hands on concurrency groups whose holder ended unnoticed, at most p_batch of each; returns (expired, woken). Raises nothing of its own.';
