-- Batched claims and completions, for claimers that keep several jobs in hand.
-- Each commit costs a WAL flush, and a transaction that calls pg_notify also
-- takes the cluster-wide notify lock until its commit is flushed, so commits that
-- notify are serialised. Doing k claims or k completions per transaction divides
-- both costs by k. The promises stay those of claim_job and finish_run: every
-- claimed row gets its own single-use token, and a completion is durable once the
-- call returns, for exactly the rows whose token is still the live claim.

-- The set-based twin of claim_job: up to p_limit of the oldest pending runs the
-- agent can serve, each with a fresh token, in one statement with SKIP LOCKED.
CREATE OR REPLACE FUNCTION cryo.claim_jobs(
    p_org text, p_agent_id text, p_capabilities text[], p_lease_seconds double precision,
    p_limit integer)
RETURNS TABLE (run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 THEN
        RAISE EXCEPTION 'a batch claim takes between 1 and 1000 jobs, not %', p_limit
            USING ERRCODE = 'CR004';
    END IF;
    RETURN QUERY
        WITH picked AS (
            SELECT c.run_id FROM cryo.queue c
             WHERE c.org = p_org AND c.state = 'pending'
               AND c.required_caps <@ p_capabilities
             ORDER BY c.enqueued_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        ), claimed AS (
            UPDATE cryo.queue q
               SET state = 'claimed', claim_token = gen_random_uuid(), agent_id = p_agent_id,
                   claimed_at = v_now,
                   lease_expires_at = v_now + make_interval(secs => p_lease_seconds)
              FROM picked WHERE q.run_id = picked.run_id
            RETURNING q.run_id, q.claim_token
        ), started AS (
            UPDATE cryo.runs r
               SET status = 'running', substate = NULL, attempt = r.attempt + 1,
                   started_at = coalesce(r.started_at, v_now), updated_at = v_now
              FROM claimed WHERE r.id = claimed.run_id
            RETURNING r.id, claimed.claim_token, r.attempt, r.filename, r.interpreter,
                      r.source, r.input, r.input_clear
        )
        SELECT * FROM started;
END
$$;
COMMENT ON FUNCTION cryo.claim_jobs(text, text, text[], double precision, integer) IS
    'Claims up to p_limit of the org''s oldest pending runs whose required capabilities the agent has; returns one row per claimed run with its own new claim token and pinned source (no rows when nothing is pending). Raises CR004 for a limit outside 1..1000.';

-- The batched finish_run: ends every listed run whose token is still its live
-- claim, in one transaction. A stale token is not an error here (a lease can lapse
-- while its batch-mates finish); its row comes back with finished = false.
CREATE OR REPLACE FUNCTION cryo.finish_runs(
    p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[],
    p_errors text[])
RETURNS TABLE (run_id text, finished boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_run_ids), 0);
    v_row record;
BEGIN
    IF coalesce(cardinality(p_tokens), 0) <> v_n OR coalesce(cardinality(p_outcomes), 0) <> v_n
       OR (p_exit_codes IS NOT NULL AND cardinality(p_exit_codes) <> v_n)
       OR (p_errors IS NOT NULL AND cardinality(p_errors) <> v_n) THEN
        RAISE EXCEPTION 'finish_runs needs arrays of one length (% run ids)', v_n
            USING ERRCODE = 'CR004';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_outcomes) o
                WHERE o IS NULL OR o NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable')) THEN
        RAISE EXCEPTION 'every outcome must be succeeded, failed, cancelled or unreadable'
            USING ERRCODE = 'CR004';
    END IF;
    -- Lock the live claims in run id order, so two overlapping batches cannot deadlock;
    -- a run listed twice is finished once.
    FOR v_row IN
        SELECT i.run_id, i.outcome, i.exit_code, i.error, (q.run_id IS NOT NULL) AS live
          FROM (SELECT DISTINCT ON (u.run_id) u.*
                  FROM unnest(p_run_ids, p_tokens, p_outcomes,
                              coalesce(p_exit_codes, array_fill(NULL::integer, ARRAY[v_n])),
                              coalesce(p_errors, array_fill(NULL::text, ARRAY[v_n])))
                       AS u(run_id, token, outcome, exit_code, error)
                 ORDER BY u.run_id) i
          LEFT JOIN LATERAL (
               SELECT c.run_id FROM cryo.queue c
                WHERE c.run_id = i.run_id AND c.state = 'claimed' AND c.claim_token = i.token
                  FOR UPDATE) q ON true
         ORDER BY i.run_id
    LOOP
        IF v_row.live THEN
            PERFORM cryo._finalize_run(v_row.run_id, v_row.outcome, v_row.exit_code, v_row.error);
        END IF;
        run_id := v_row.run_id;
        finished := v_row.live;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION cryo.finish_runs(text[], uuid[], text[], integer[], text[]) IS
    'Ends each listed run whose claim token is its live claim with the matching outcome (exit codes and errors may be NULL arrays); returns (run_id, finished) per input, finished false for a stale token. Raises CR004 for arrays of different lengths or an unknown outcome.';
