-- The journal: one memo per durable call, keyed by its path and ordered by position.

-- Records a completed step's sealed result and exit code in the same transaction as
-- its history event. The same claim asking twice (a retried request whose answer was
-- lost) gets the first position back; a path recorded by an earlier attempt is
-- refused, because that pass should have replayed it.
CREATE OR REPLACE FUNCTION cryo.record_step(
    p_run_id text, p_token uuid, p_path text, p_family text, p_name text,
    p_ordinal integer, p_label text, p_result bytea, p_exit_code integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_attempt integer := (SELECT r.attempt FROM cryo.runs r WHERE r.id = p_run_id);
    v_seq integer;
    v_prior cryo.journal;
BEGIN
    IF coalesce(p_path, '') = '' OR coalesce(p_family, '') = '' OR p_ordinal IS NULL OR p_ordinal < 0 THEN
        RAISE EXCEPTION 'a durable call needs a path, a family and an ordinal >= 0' USING ERRCODE = 'CR004';
    END IF;
    v_seq := cryo._next_seq(p_run_id);
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, label, attempt, status, result, exit_code, created_at,
                              completed_at)
    VALUES (p_run_id, v_q.org, v_q.project, v_seq, p_path, 'run', p_family, coalesce(p_name, ''),
            p_ordinal, p_label, v_attempt, 'done', p_result, p_exit_code, cryo.now(), cryo.now())
    ON CONFLICT (run_id, path) DO NOTHING;
    IF NOT FOUND THEN
        SELECT * INTO v_prior FROM cryo.journal j WHERE j.run_id = p_run_id AND j.path = p_path;
        IF v_prior.attempt = v_attempt AND v_prior.status = 'done' THEN
            RETURN v_prior.seq;
        END IF;
        RAISE EXCEPTION 'run % already recorded %', p_run_id, p_path USING ERRCODE = 'CR007';
    END IF;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'step_completed', p_family,
                          coalesce(p_name, ''), p_ordinal);
    RETURN v_seq;
END
$$;
COMMENT ON FUNCTION cryo.record_step(text, uuid, text, text, text, integer, text, bytea, integer) IS
    'Records a durable call''s sealed result for the claimed run; returns its position (seq), the same one again when this attempt already recorded it. Raises CR002 for a stale claim token, CR004 for a malformed identity, CR007 when an earlier attempt recorded the path.';

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

-- The run's history for the run view: kinds and identities in the clear, payloads sealed.
CREATE OR REPLACE FUNCTION cryo.read_history(p_run_id text)
RETURNS TABLE (id bigint, kind text, family text, name text, ordinal integer, attempt integer,
               payload bytea, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT h.id, h.kind, h.key_family, h.key_name, h.key_ordinal, h.attempt, h.payload, h.created_at
      FROM cryo.history h WHERE h.run_id = p_run_id ORDER BY h.id
$$;
COMMENT ON FUNCTION cryo.read_history(text) IS
    'Returns a run''s history events in order (payloads sealed). Raises nothing.';
