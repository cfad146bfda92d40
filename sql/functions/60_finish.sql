-- A run's end: the agent's report of an outcome, a retry instead of a failure, a
-- cancel, and the two things an ending sets off (cryo._finalize calls both): the leases
-- the run held go to their next waiters, and a parent collecting it wakes.

-- A failed activity with retries left is parked until its backoff passes instead of
-- ending; returns whether it was. The retry is a fresh run of the unit: the journal of
-- the failed attempt is forgotten, so no memo of it answers the next attempt.
CREATE OR REPLACE FUNCTION cryo._retry_if_allowed(p_run_id text, p_exit_code integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION cryo._check_outcome(p_outcome text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_outcome IS NULL OR NOT cryo.is_terminal(p_outcome) THEN
        RAISE EXCEPTION 'outcome must be succeeded, failed, cancelled or unreadable, not %', p_outcome
            USING ERRCODE = 'CR004';
    END IF;
END
$$;

-- The agent's report that the script ended.
CREATE OR REPLACE FUNCTION cryo.finish_run(
    p_run_id text, p_token uuid, p_outcome text, p_exit_code integer DEFAULT NULL,
    p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.finish_run(text, uuid, text, integer, text) IS
    'Ends the claimed run with the given terminal outcome, or parks a failed activity that has retries left until its backoff passes. Returns nothing. Raises CR002 for a stale claim token, CR004 for an unknown outcome.';

-- The batched finish_run: ends every listed run whose token is still its live claim,
-- in one transaction. Claimers that keep several jobs in hand call it (see claim_jobs),
-- and so does the server for finishes that arrive together from several agents (group
-- commit). A stale token is not an error here (a claim can expire while its
-- batch-mates finish); its row comes back with finished = false. p_logs carries each
-- run's last sealed log bytes (NULL or empty for none), stored before the run ends, so
-- an agent ends a run in one request; a failed activity with retries left is parked
-- for its retry, as finish_run does.
CREATE OR REPLACE FUNCTION cryo.finish_runs(
    p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[],
    p_errors text[], p_logs bytea[] DEFAULT NULL, p_log_offsets bigint[] DEFAULT NULL,
    p_log_lengths bigint[] DEFAULT NULL)
RETURNS TABLE (run_id text, finished boolean)
LANGUAGE plpgsql
-- Keyed queries: one generic plan. With custom plans the loop's query over the arrays
-- was planned again on every call (about 0.3 ms of every finish).
SET plan_cache_mode = force_generic_plan AS $$
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
COMMENT ON FUNCTION cryo.finish_runs(text[], uuid[], text[], integer[], text[], bytea[], bigint[], bigint[]) IS
    'Ends each listed run whose claim token is its live claim with the matching outcome, after storing its last sealed log bytes (exit codes, errors, logs, log offsets and lengths may be NULL arrays); bytes given with an offset (and their plain length) are stored only at the pass''s stored end and not again when already stored (see append_log_at). A failed activity with retries left is parked for its retry instead. Returns (run_id, finished) per input, finished false for a stale token. Raises CR004 for arrays of different lengths, an unknown outcome or a negative offset or length, CR160 for log bytes past or overlapping the stored end (the message names it).';

-- Cancels a run: a queued, pending or parked run ends at once; a running one is
-- flagged and its agent stops the script on its next log flush (or it ends when its
-- claim expires).
CREATE OR REPLACE FUNCTION cryo.cancel_run(p_run_id text)
RETURNS text
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.cancel_run(text) IS
    'Cancels a run and its unfinished children; returns ''cancelled'' when it ended at once or ''cancelling'' when its agent must stop it. Raises CR003 for an unknown run, CR006 for a finished one, CR021 when the caller is an application role of another tenant (or of none).';

-- The memo a finished child graph run leaves its caller: its sealed output (the run
-- output 'output', sealed as {"answer": v}; none when it failed), its run id, status and
-- error in the clear, and the exit code a caller would see.
CREATE OR REPLACE FUNCTION cryo._graph_call_memo(p_child_id text)
RETURNS TABLE (result bytea, answer jsonb, exit_code integer)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN c.status = 'succeeded' THEN
                (SELECT o.value FROM cryo.run_outputs o WHERE o.run_id = c.id AND o.key = 'output') END,
           jsonb_build_object('run_id', c.id, 'status', c.status, 'error', c.error),
           cryo._outcome_code(c.status, c.exit_code)
      FROM cryo.runs c WHERE c.id = p_child_id
$$;

-- Set off by a child's ending: its parent may be parked collecting it, waiting for
-- all its activities, or waiting for the output of a graph it called.
CREATE OR REPLACE FUNCTION cryo._wake_parent(p_child_id text)
RETURNS void
LANGUAGE plpgsql AS $$
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
