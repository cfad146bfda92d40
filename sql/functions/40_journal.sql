-- The journal: one memo per durable call, keyed by its path and ordered by position.
-- A claim starts by reading it back; each call a pass reaches either answers from it
-- (replay) or runs and records its answer here, in the transaction that makes it true.

CREATE OR REPLACE FUNCTION cryo.read_journal(p_run_id text, p_token uuid)
RETURNS TABLE (seq integer, path text, family text, name text, ordinal integer,
               status text, result bytea, exit_code integer, answer_clear jsonb,
               ref_run_id text)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY
        SELECT j.seq, j.path, j.key_family, j.key_name, j.key_ordinal, j.status, j.result,
               j.exit_code, j.answer_clear, j.ref_run_id
          FROM cryo.journal j WHERE j.run_id = p_run_id ORDER BY j.seq;
END
$$;
COMMENT ON FUNCTION cryo.read_journal(text, uuid) IS
    'Returns the claimed run''s memos in position order (results sealed; answer_clear holds engine answers such as child ids and counts, or a payload an application sent in the clear). Raises CR002 for a stale claim token.';

-- The recorded answer at a path, for a call asked again within one claim.
CREATE OR REPLACE FUNCTION cryo._done_memo(p_run_id text, p_path text)
RETURNS cryo.journal
LANGUAGE sql STABLE AS $$
    SELECT * FROM cryo.journal WHERE run_id = p_run_id AND path = p_path AND status = 'done'
$$;

-- Where every durable call that answers from its memo starts: the call's path (derived
-- from its identity, and checked against p_path: cryo.call_path) and its recorded memo.
-- Returns the memo (status 'done'), or a row holding only the path when there is none.
CREATE OR REPLACE FUNCTION cryo._replay(p_run_id text, p_family text, p_name text,
                                        p_ordinal integer, p_path text DEFAULT NULL)
RETURNS cryo.journal
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_path text := cryo.call_path(p_family, p_name, p_ordinal, p_path);
    v_memo cryo.journal := cryo._done_memo(p_run_id, v_path);
BEGIN
    v_memo.path := v_path;
    RETURN v_memo;
END
$$;

-- Pins a pending marker at a step's position before its command runs, so readers (the
-- run page) see which step is running now and where it sits among the checkpoints.
-- cryo.record_step completes it in place. Idempotent: a marker or memo already at the
-- path stands, so a marker that lands after its step's memo changes nothing.
CREATE OR REPLACE FUNCTION cryo.mark_step(
    p_run_id text, p_token uuid, p_position integer, p_family text, p_name text,
    p_ordinal integer, p_path text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.mark_step(text, uuid, integer, text, text, integer, text) IS
    'Pins a pending journal marker for a step that is about to run, at the agent''s position p_position. Returns nothing. Raises CR002 for a stale claim token, CR004 for a malformed identity, CR009 for a disagreeing path.';

-- Records a completed step's sealed result and exit code with its history event. The
-- same claim asking twice (a retried request whose answer was lost) gets the first
-- position back; a path recorded by an earlier attempt is refused, because that pass
-- should have replayed it.
CREATE OR REPLACE FUNCTION cryo.record_step(
    p_run_id text, p_token uuid, p_position integer, p_family text, p_name text,
    p_ordinal integer, p_label text, p_result bytea, p_exit_code integer,
    p_path text DEFAULT NULL, p_started_at timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.record_step(text, uuid, integer, text, text, integer, text, bytea, integer, text, timestamptz) IS
    'Records a durable call''s sealed result at the agent''s position p_position for the claimed run; the path is derived from (family, name, ordinal) and p_path, when given, must agree; p_started_at, when earlier, is the entry''s start time (never before the run was created). Returns its position (seq), the same one again when this attempt already recorded it. Raises CR002 for a stale claim token, CR004 for a malformed identity, CR009 for a disagreeing path, CR007 when an earlier attempt recorded the path.';

-- The batched record_step, for steps several agents report at once (the server's group
-- commit): each item is one cryo.record_step in its own subtransaction, so one that is
-- refused (a stale claim, a disagreeing path) fails alone, with its SQLSTATE and
-- message, and the others commit together. Items are taken in run id order, the order
-- finish_runs locks in, so overlapping batches cannot deadlock; rows come back in the
-- input's order (n is the 1-based index).
CREATE OR REPLACE FUNCTION cryo.record_steps(
    p_run_ids text[], p_tokens uuid[], p_positions integer[], p_families text[],
    p_names text[], p_ordinals integer[], p_labels text[], p_results bytea[],
    p_exit_codes integer[], p_paths text[], p_started_ats timestamptz[] DEFAULT NULL)
RETURNS TABLE (n integer, seq integer, error_code text, error_message text)
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.record_steps(text[], uuid[], integer[], text[], text[], integer[], text[], bytea[], integer[], text[], timestamptz[]) IS
    'Records each listed step as cryo.record_step does, in one transaction; returns per item (n, its 1-based index) the seq, or NULL with the SQLSTATE and message that refused that item alone. Raises CR004 for arrays of different lengths.';

-- annotate is a side channel, not a durable call: it lands in history only.
CREATE OR REPLACE FUNCTION cryo.annotate_run(p_run_id text, p_token uuid, p_text bytea)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'annotation', p_payload => p_text);
END
$$;
COMMENT ON FUNCTION cryo.annotate_run(text, uuid, bytea) IS
    'Appends a sealed annotation to the claimed run''s history. Returns nothing. Raises CR002 for a stale claim token.';
