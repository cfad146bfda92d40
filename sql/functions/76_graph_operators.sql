-- What operators do to graph runs, beyond what every run takes (submit, signal, cancel,
-- 96_operators.sql): answer a waiting approval, one way or the other, and run a finished
-- graph again from one of its nodes. The node rows change through the node transitions
-- (12_node_transitions.sql).

-- The run an approver answers: live (CR003, CR006 otherwise), its queue row locked, so a
-- driver's turn on it finishes first or waits for the answer.
CREATE OR REPLACE FUNCTION cryo._approvable(p_run_id text)
RETURNS cryo.runs
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs := cryo._run_row(p_run_id, true);
BEGIN
    PERFORM 1 FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    RETURN v_run;
END
$$;

-- An approver's answer for a waiting approval node (validated against its fields by
-- the server first). The node's policy (cryo._approval_record, 73_graph_gates.sql) says
-- who may answer (a role, a group: CR226 otherwise) and how many different approvers it
-- takes; each answer is recorded, nobody counts twice (CR225), and the last one needed
-- gives the node its answer. A fanned-out node waits once per item: p_item answers that
-- item alone, NULL every waiting one. Returns {approvals, needed, approved}; NULL when
-- the node (or that item) is not waiting for an approval.
CREATE OR REPLACE FUNCTION cryo.approve_node(
    p_run_id text, p_node text, p_answer bytea, p_by text, p_auth text DEFAULT NULL,
    p_item integer DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs := cryo._approvable(p_run_id);
    v_got record;
BEGIN
    SELECT * INTO v_got FROM cryo._approval_record(v_run, p_node, p_by, p_auth, 'approved', p_item);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_got.approvals < v_got.needed THEN
        PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'node_approval_given', 'node',
                              p_node, 0, p_payload => p_answer);
        RETURN jsonb_build_object('approvals', v_got.approvals, 'needed', v_got.needed,
                                  'approved', false);
    END IF;
    PERFORM cryo._instance_answer(p_run_id, p_node, p_answer, p_by, p_item);
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'node_approved', 'node', p_node, 0,
                          p_payload => p_answer);
    -- The wake says why in history under its own kind: node_approved is written once.
    PERFORM cryo._graph_poke(p_run_id, 'approval_received');
    RETURN jsonb_build_object('approvals', v_got.approvals, 'needed', v_got.needed,
                              'approved', true);
END
$$;
COMMENT ON FUNCTION cryo.approve_node(text, text, bytea, text, text, integer) IS
    'Records p_by''s approval (a sealed answer) of a waiting approval node of a graph run (of its item p_item alone when given, else of every waiting item), as signed in with token or session p_auth; once the node''s approvers (default 1) different members approved, gives the node the last answer and wakes the run. Returns {approvals, needed, approved}, or NULL when that node (or item) is not waiting for an approval. Raises CR003 for an unknown run, CR006 for a finished one, CR225 when p_by answered it already, CR226 when p_by lacks the node''s role or group.';

-- An approver turns a waiting approval node down: one rejection rejects, whatever the
-- approvals so far. The node fails with the reason, as any failed node does (the run
-- fails unless the node has continue_on_error; what depends on it is skipped and an
-- always node after it still runs) on the driver's next turn. The sealed payload (who
-- and the comment) goes to history as node_rejected. p_item: that item of a fanned-out
-- node alone; NULL: every waiting one.
CREATE OR REPLACE FUNCTION cryo.reject_node(
    p_run_id text, p_node text, p_payload bytea, p_by text, p_auth text DEFAULT NULL,
    p_item integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs := cryo._approvable(p_run_id);
BEGIN
    PERFORM 1 FROM cryo._approval_record(v_run, p_node, p_by, p_auth, 'rejected', p_item);
    IF NOT FOUND OR NOT cryo._instance_reject(p_run_id, v_run.org, v_run.project, p_node, p_by,
                                              p_payload, p_item) THEN
        RETURN false;
    END IF;
    PERFORM cryo._graph_poke(p_run_id, 'approval_received');
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.reject_node(text, text, bytea, text, text, integer) IS
    'Turns down a waiting approval node of a graph run (its item p_item alone when given, else every waiting item; rejected by p_by, signed in with token or session p_auth, with a sealed payload holding the comment): one rejection fails the node, so the run fails (its always nodes still run); returns false when that node (or item) is not waiting for an approval. Raises CR003 for an unknown run, CR006 for a finished one, CR225 when p_by answered it already, CR226 when p_by lacks the node''s role or group.';

-- A new run of a finished graph run's pinned definition and input that runs p_from and
-- what depends on it (transitively) again, and nothing else: every other node that ended
-- in the old run is seeded with what it recorded (a failure continue_on_error tolerated
-- stays failed, tolerated). What never started because the old run ended runs.
CREATE OR REPLACE FUNCTION cryo.rerun_graph(p_run_id text, p_from text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_old cryo.runs;
    v_new text;
    v_up text[];
    v_down text[];
    v_seed text[];
    v_bad text;
BEGIN
    v_old := cryo._run_row(p_run_id);
    IF v_old.kind <> 'graph' THEN
        RAISE EXCEPTION 'run % is not a graph run; only graph runs rerun from a node', p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo._graph_node_defs(v_old.graph) d WHERE d.node_id = p_from) THEN
        RAISE EXCEPTION 'run % has no node %', p_run_id, p_from USING ERRCODE = 'CR005';
    END IF;
    WITH RECURSIVE up(node_id) AS (
        SELECT unnest(d.deps) FROM cryo._graph_node_defs(v_old.graph) d WHERE d.node_id = p_from
        UNION
        SELECT unnest(d.deps) FROM cryo._graph_node_defs(v_old.graph) d JOIN up ON up.node_id = d.node_id
    )
    SELECT coalesce(array_agg(node_id), '{}') INTO v_up FROM up;
    WITH RECURSIVE down(node_id) AS (
        SELECT p_from
        UNION
        SELECT d.node_id FROM cryo._graph_node_defs(v_old.graph) d JOIN down ON down.node_id = ANY (d.deps)
    )
    SELECT array_agg(node_id) INTO v_down FROM down;
    IF EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = ANY (v_up)
                  AND NOT cryo._node_status_in(n.status, 'ended well')
                  AND NOT (n.status = 'failed' AND n.tolerated)) THEN
        RAISE EXCEPTION 'nodes upstream of % did not all end well in run %', p_from, p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    SELECT n.node_id INTO v_bad FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND NOT n.node_id = ANY (v_down) AND n.status = 'failed'
       AND NOT n.tolerated
     ORDER BY n.ord LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'node % failed in run % and is not downstream of %; rerun from it', v_bad,
            p_run_id, p_from USING ERRCODE = 'CR004';
    END IF;
    -- Seeded: what ended outside p_from's descendants, but not what the old run's end
    -- skipped or cancelled before it started (that runs).
    SELECT coalesce(array_agg(n.node_id), '{}') INTO v_seed FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND NOT n.node_id = ANY (v_down)
       AND (cryo._node_status_in(n.status, 'done') OR (n.status = 'failed' AND n.tolerated)
            OR (n.status = 'skipped'
                AND n.error IS DISTINCT FROM 'the run failed'
                AND n.error IS DISTINCT FROM 'the run did not fail'));
    SELECT s.run_id INTO v_new FROM cryo.submit_script(
        v_old.org, v_old.project, v_old.filename, v_old.interpreter, v_old.source, v_old.input,
        NULL, '{graph}', v_old.workflow, v_old.input_clear, p_untrusted => v_old.untrusted,
        p_graph => v_old.graph) s;
    PERFORM cryo._nodes_seed(v_new, p_run_id, v_seed);
    RETURN v_new;
END
$$;
COMMENT ON FUNCTION cryo.rerun_graph(text, text) IS
    'Starts a new run of a graph run''s pinned definition and input that runs p_from and the nodes downstream of it again: every other node that ended in the old run is seeded from what it recorded (status seeded or skipped; a failure continue_on_error tolerated stays failed, tolerated), and what never started because the old run ended runs; returns the new run id. Raises CR003 for an unknown run, CR004 when it is not a graph run, a node upstream of p_from did not end well (or fail tolerated), or a node not downstream of p_from failed, CR005 for an unknown node.';
