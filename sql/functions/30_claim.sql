-- Claims: an agent takes a pending run, holds it with a single-use token whose expiry
-- it keeps pushing back (every log flush does), and hands it back when it stops.
-- A claim that is not pushed back expires, and tick() re-pends its run.

CREATE OR REPLACE FUNCTION cryo.claim_job(
    p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision)
RETURNS TABLE (run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb, workdir text)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT c.run_id, c.claim_token, c.attempt, c.filename, c.interpreter, c.source,
                        c.input, c.input_clear, c.workdir
                   FROM cryo._claim(p_org, p_agent_id, p_capabilities, p_claim_seconds, 1) c;
END
$$;
COMMENT ON FUNCTION cryo.claim_job(text, text, text[], double precision) IS
    'Claims the oldest pending run of the org whose required capabilities the agent has; returns the run, a new claim token, the pinned source and the directory it was submitted from, or no row when nothing is pending. Raises nothing of its own.';

-- The batched claim, for claimers that keep several jobs in hand: each commit costs a
-- WAL flush, and one that notifies also holds the cluster-wide notify lock until it is
-- flushed, so k claims per transaction divide both costs by k. Every claimed row still
-- gets its own token.
CREATE OR REPLACE FUNCTION cryo.claim_jobs(
    p_org text, p_agent_id text, p_capabilities text[], p_claim_seconds double precision,
    p_limit integer)
RETURNS TABLE (run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb, workdir text)
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.claim_jobs(text, text, text[], double precision, integer) IS
    'Claims up to p_limit of the org''s oldest pending runs whose required capabilities the agent has; returns one row per claimed run with its own new claim token and pinned source (no rows when nothing is pending). Raises CR004 for a limit outside 1..1000.';

-- What the server calls for agents waiting on long-polls: claims one run for each
-- listed agent (fewer when fewer are pending), and returns with each claim everything
-- its grant needs (cryo._grant_extras, below beside the secrets it reads). One
-- call, one commit, however many agents were waiting.
-- p_agent_tokens, parallel to p_agent_ids, names the agent token each agent called
-- with; each claim is bound to its agent's token (see cryo._bind_claim).
CREATE OR REPLACE FUNCTION cryo.claim_grants(
    p_org text, p_agent_ids text[], p_capabilities text[], p_claim_seconds double precision,
    p_agent_tokens text[] DEFAULT NULL)
RETURNS TABLE (agent_id text, agent_token text, run_id text, claim_token uuid, attempt integer,
               filename text, interpreter text, source bytea, input bytea, input_clear jsonb,
               workdir text, journal jsonb, secrets jsonb, untrusted boolean)
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.claim_grants(text, text[], text[], double precision, text[]) IS
    'Claims one pending run of the org (whose required capabilities are among p_capabilities) for each listed agent, oldest first, each claim bound to the agent token listed beside its agent (p_agent_tokens; unbound when NULL); returns per claim the agent and agent token it went to, the run, its new token as handed out, pinned source and input, and as jsonb arrays its memos (seq, path, family, name, ordinal, status, result base64, exit_code, answer_clear, ref_run_id) and the secrets it may see (name, value base64 or null, withheld), and whether the run is untrusted (its agent must confine it). Fewer rows than agents when fewer runs are pending. Raises CR004 for an empty, NULL-holding or over-1000 agent list, or agent tokens not one per agent.';

-- An agent's finish usually asks for its next run in the same request. This ends a
-- batch of runs (cryo.finish_runs) and claims the next run for the agent of each one
-- that ended and asked (p_ask_agent_ids, parallel to p_run_ids, NULL where it did not
-- ask), all agents of one org and capability set (cryo.claim_grants), in one statement:
-- one round trip and one commit for the server's finish batch instead of four.
-- Rows with finished_run_id set answer the finishes; the others are the grants.
CREATE OR REPLACE FUNCTION cryo.finish_and_claim_grants(
    p_run_ids text[], p_tokens uuid[], p_outcomes text[], p_exit_codes integer[],
    p_errors text[], p_logs bytea[], p_org text, p_ask_agent_ids text[],
    p_capabilities text[], p_claim_seconds double precision,
    p_ask_agent_tokens text[] DEFAULT NULL, p_log_offsets bigint[] DEFAULT NULL,
    p_log_lengths bigint[] DEFAULT NULL)
RETURNS TABLE (finished_run_id text, finished boolean, agent_id text, agent_token text,
               run_id text, claim_token uuid, attempt integer, filename text,
               interpreter text, source bytea, input bytea, input_clear jsonb, workdir text,
               journal jsonb, secrets jsonb, untrusted boolean)
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.finish_and_claim_grants(text[], uuid[], text[], integer[], text[], bytea[], text, text[], text[], double precision, text[], bigint[], bigint[]) IS
    'Ends each listed run as cryo.finish_runs does (with its log offsets and lengths), then claims one run for the asking agent (p_ask_agent_ids, NULL for none) of each run that ended, as cryo.claim_grants does for org p_org and capabilities p_capabilities, in one transaction. Returns one row per finish (finished_run_id, finished; the grant columns NULL), then one row per claim (finished_run_id NULL; the grant columns as claim_grants returns them). Raises CR004 for asks not one per run, and what finish_runs and claim_grants raise.';

-- A read on behalf of a claimed run (its state cells, a workflow it calls) first asks
-- this, in the read's transaction: the same check as every write (_claimed_row).
CREATE OR REPLACE FUNCTION cryo.check_claim(p_run_id text, p_token uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
END
$$;
COMMENT ON FUNCTION cryo.check_claim(text, uuid) IS
    'Returns nothing when the token is the run''s live claim (and locks its queue row for the transaction). Raises CR002 for a stale claim token.';

-- Pushes back the claim's expiry; the answer tells the agent to stop the script.
CREATE OR REPLACE FUNCTION cryo.renew_claim(p_run_id text, p_token uuid, p_claim_seconds double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._extend_claim(p_run_id, p_claim_seconds);
    RETURN (SELECT cancel_requested FROM cryo.runs WHERE id = p_run_id);
END
$$;
COMMENT ON FUNCTION cryo.renew_claim(text, uuid, double precision) IS
    'Pushes back the expiry of a live claim; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

-- Appends a log chunk; as a sign of life it also renews the claim, so a chatty script
-- never expires.
CREATE OR REPLACE FUNCTION cryo.append_log(
    p_run_id text, p_token uuid, p_data bytea, p_claim_seconds double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.append_log(text, uuid, bytea, double precision) IS
    'Appends a sealed log chunk (none when empty) and renews the claim; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

-- Where a numbered log chunk goes (issue 36): an agent whose answer was lost (its
-- replica died after the commit) posts the same bytes again, perhaps with more after
-- them, to another replica. A chunk is stored only when its offset (of its first plain
-- byte within the pass's log) is exactly the stored end; bytes already stored are
-- acknowledged, and a chunk past the end is refused, so a log is never doubled or holed.
-- Returns the stored end before the chunk; the chunk is the caller's to store (and
-- runs.log_end already counts it) when that equals p_offset. The caller holds the
-- claim's queue row lock (_claimed_row), so two posts of one run take turns.
CREATE OR REPLACE FUNCTION cryo._log_take(
    p_run_id text, p_token uuid, p_offset bigint, p_length bigint)
RETURNS bigint
LANGUAGE plpgsql AS $$
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

-- append_log with the chunk numbered (see _log_take): the agents that send offsets call
-- this. A partial repeat stores nothing and answers the stored end, short of the
-- chunk's end: the server seals the new tail alone and posts it at that end (the bytes
-- are sealed here, so only the server can cut them).
CREATE OR REPLACE FUNCTION cryo.append_log_at(
    p_run_id text, p_token uuid, p_offset bigint, p_length bigint, p_data bytea,
    p_claim_seconds double precision)
RETURNS TABLE (cancel boolean, log_end bigint)
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.append_log_at(text, uuid, bigint, bigint, bytea, double precision) IS
    'Appends a sealed log chunk of p_length plain bytes whose first byte is at p_offset of the pass''s log, only when p_offset is the stored end (bytes already stored are acknowledged and not stored again), and renews the claim; returns the cancel flag and the stored end after the call (short of p_offset + p_length: the chunk overlapped the stored end and its new tail was not stored). Raises CR002 for a stale claim token, CR004 for a missing or negative offset or length, CR160 for an offset past the stored end (the message names it).';

-- The log masker's context for the run's next pass (cryopg/redaction.py): set by the
-- pass that parks with a tail that may begin a secret, read by the next grant.
CREATE OR REPLACE FUNCTION cryo.keep_log_context(p_run_id text, p_token uuid, p_context bytea)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs SET log_context = nullif(p_context, ''::bytea) WHERE id = p_run_id;
END
$$;
COMMENT ON FUNCTION cryo.keep_log_context(text, uuid, bytea) IS
    'Stores the sealed log context (the log''s last bytes, which may begin a secret) for the run''s next pass; NULL or empty clears it. Raises CR002 for a stale claim token.';

CREATE OR REPLACE FUNCTION cryo.log_context(p_run_id text)
RETURNS bytea
LANGUAGE sql STABLE AS $$
    SELECT log_context FROM cryo.runs WHERE id = p_run_id
$$;
COMMENT ON FUNCTION cryo.log_context(text) IS
    'The run''s sealed log context (see keep_log_context), NULL when it has none or there is no such run.';

-- Hands a claimed run back at once (its agent is shutting down): the run goes back to
-- pending as after an expired claim, without waiting out the expiry. A run asked to
-- cancel ends instead.
CREATE OR REPLACE FUNCTION cryo.release_claim(p_run_id text, p_token uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    IF (SELECT cancel_requested FROM cryo.runs WHERE id = p_run_id) THEN
        PERFORM cryo._finalize(p_run_id, 'cancelled', NULL, 'cancelled');
        RETURN;
    END IF;
    PERFORM cryo._release(ARRAY[p_run_id], 'released');
END
$$;
COMMENT ON FUNCTION cryo.release_claim(text, uuid) IS
    'Gives a claimed run back to the queue now (or ends it cancelled if a cancel was asked). Returns nothing. Raises CR002 for a stale claim token.';

-- Hands back a grant that never reached its agent: the server found the agent's
-- long-poll closed before it could answer (the agent was killed, drained or went away
-- behind a balancer). The run is pending again at the attempt it had, as if never
-- claimed, and any agent may take it at once.
CREATE OR REPLACE FUNCTION cryo.return_claim(p_run_id text, p_token uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._unclaim(p_run_id);
END
$$;
COMMENT ON FUNCTION cryo.return_claim(text, uuid) IS
    'Gives back a claim its agent never received: the run is pending again, its attempt as before the claim. Returns nothing. Raises CR002 for a stale claim token.';

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

-- What a claim of a run may see: every secret of the run's project, sealed, or for an
-- untrusted run the names alone (value NULL, withheld true). The one definition, for
-- claim_secrets and claim_grants.
CREATE OR REPLACE FUNCTION cryo._grant_secrets(p_org text, p_project text, p_untrusted boolean)
RETURNS TABLE (name text, value bytea, withheld boolean)
LANGUAGE sql STABLE AS $$
    SELECT s.name, CASE WHEN p_untrusted THEN NULL ELSE s.value END, p_untrusted
      FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;

-- -- connector credentials -------------------------------------------------------------
-- What a claim of a run may see (claim_grants and claim_secrets call this): the job of
-- an http node sees only the project secrets its node names (its clear `secrets` list;
-- a connector node: its connection's secret, cryo.connections),
-- so a credential reaches the connector agent doing that request and nothing else; any
-- other run sees its project's secrets as before (cryo._grant_secrets). An untrusted
-- run gets the names alone, either way. No secret is ever in a document or an input.
CREATE OR REPLACE FUNCTION cryo._grant_run_secrets(p_run_id text, p_org text, p_project text,
                                                   p_untrusted boolean)
RETURNS TABLE (name text, value bytea, withheld boolean)
LANGUAGE sql STABLE AS $$
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

-- What a grant carries beside the run itself, read for claim_grants: the run's
-- recorded memos (the step cache the agent replays from; results sealed and
-- base64-encoded, as read_journal lists them), the secrets the claim may see
-- (cryo._grant_secrets, which claim_secrets serves too: sealed values, or names only for
-- an untrusted run) and whether the run is untrusted. A set-returning SQL function, so
-- the planner inlines it into its callers' statement.
CREATE OR REPLACE FUNCTION cryo._grant_extras(p_run_id text)
RETURNS TABLE (journal jsonb, secrets jsonb, untrusted boolean)
LANGUAGE sql STABLE AS $$
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

-- What a live claim may see (see _grant_secrets).
CREATE OR REPLACE FUNCTION cryo.claim_secrets(p_run_id text, p_token uuid)
RETURNS TABLE (name text, value bytea, withheld boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_untrusted boolean := (SELECT r.untrusted FROM cryo.runs r WHERE r.id = p_run_id);
BEGIN
    RETURN QUERY SELECT * FROM cryo._grant_run_secrets(p_run_id, v_q.org, v_q.project, v_untrusted);
END
$$;
COMMENT ON FUNCTION cryo.claim_secrets(text, uuid) IS
    'Returns the secrets the claimed run may see: sealed values of its project, or names only (withheld) for an untrusted run. Raises CR002 for a stale claim token.';
