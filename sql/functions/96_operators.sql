-- What an operator does to runs from the web UI (or the API) beyond submit, signal and
-- cancel: run one again with the same input. (Answering an approval, either way, and
-- rerunning a graph from a node are 76_graph_operators.sql.)

-- A new run of any finished or live run with the same pinned source and input: a script
-- runs its source again, a graph its compiled document (no node is seeded; use
-- cryo.rerun_graph to start from a node). Children are not re-run by themselves.
CREATE OR REPLACE FUNCTION cryo.rerun_run(p_run_id text)
RETURNS text
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.rerun_run(text) IS
    'Starts a new run with the same source (or graph), input (and its search digests), workflow name, working directory and trust as run p_run_id, and records rerun_of in its history; returns the new run id. Raises CR003 for an unknown run, and what submit_script raises (CR030 for a full group queue).';

-- The same, with an input the operator edited (sealed by the server; the clear copy an
-- application passed is not carried over, since it is the old input).
CREATE OR REPLACE FUNCTION cryo.rerun_run_with_input(p_run_id text, p_input bytea)
RETURNS text
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.rerun_run_with_input(text, bytea) IS
    'As cryo.rerun_run, with the sealed input p_input (NULL: none) in place of the old run''s input; returns the new run id. Raises CR003 for an unknown run, and what submit_script raises (CR030 for a full group queue).';

-- The keyed digests of a sealed input's values (cryopg/input_search.py: HMAC-SHA256 under
-- a key derived from the project's; never the values), stored once, when the server
-- submitted the run, so the runs search finds it by a value of its input. An untrusted
-- run's input is never indexed: nobody learns through the search whether a value they
-- chose equals one a trusted run was given.
CREATE OR REPLACE FUNCTION cryo.index_run_input(p_run_id text, p_hashes bytea[])
RETURNS boolean
LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION cryo.index_run_input(text, bytea[]) IS
    'Stores the keyed digests of a run''s input values, for the runs search (cryo.search_runs p_input_hash), once: returns false for an untrusted run (never indexed), an unknown run, or one already indexed. Raises CR237 for more than 256 digests or one that is not 32 bytes.';
