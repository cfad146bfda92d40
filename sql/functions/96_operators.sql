-- What an operator does to runs from the web UI (or the API) beyond submit, signal and
-- cancel: run one again with the same input, and turn down a waiting approval.

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
    SELECT * INTO v_old FROM cryo.runs WHERE id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
    SELECT s.run_id INTO v_new FROM cryo.submit_script(
        v_old.org, v_old.project, v_old.filename, v_old.interpreter, v_old.source, v_old.input,
        NULL, v_old.required_caps, v_old.workflow, v_old.input_clear,
        p_untrusted => v_old.untrusted, p_workdir => v_old.workdir, p_graph => v_old.graph) s;
    PERFORM cryo._history(v_new, v_old.org, v_old.project, 'rerun_of', 'run', p_run_id, 0);
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION cryo.rerun_run(text) IS
    'Starts a new run with the same source (or graph), input, workflow name, working directory and trust as run p_run_id, and records rerun_of in its history; returns the new run id. Raises CR003 for an unknown run, and what submit_script raises (CR030 for a full group queue).';

-- An approver turns a waiting approval node down: the node fails with the reason (its
-- dependants never run) and the run finishes failed on the driver's next turn. The sealed
-- payload (who and the comment) goes to history as node_rejected.
CREATE OR REPLACE FUNCTION cryo.reject_node(
    p_run_id text, p_node text, p_payload bytea, p_by text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
    IF cryo.is_terminal(v_run.status) THEN
        RAISE EXCEPTION 'run % already finished (%)', p_run_id, v_run.status USING ERRCODE = 'CR006';
    END IF;
    PERFORM 1 FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    UPDATE cryo.node_instances i SET status = 'failed', finished_at = cryo.now(), wait_name = p_by
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.status = 'waiting'
       AND i.wait_kind = 'approval' AND i.output IS NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE cryo.node_states n SET status = 'failed', finished_at = cryo.now(),
           error = left('rejected by ' || p_by, 200)
     WHERE n.run_id = p_run_id AND n.node_id = p_node;
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'node_rejected', 'node', p_node, 0,
                          p_payload => p_payload);
    PERFORM cryo._graph_poke(p_run_id, 'approval_received');
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.reject_node(text, text, bytea, text) IS
    'Turns down a waiting approval node of a graph run (rejected by p_by, with a sealed payload holding the comment): the node fails, so the run fails; returns false when that node is not waiting for an approval. Raises CR003 for an unknown run, CR006 for a finished one.';
