-- Graph gates (issue 39, item 7): who may answer an approval node and how many answers
-- it takes. An approval node's clear definition (runs.graph, node_states.def) carries
-- its policy as `approval`: {approvers: N, role, group, timeout, on_timeout}; the
-- answers are rows of cryo.node_approvals (who, which way, when). approve_node and
-- reject_node (76_graph_operators.sql) call these; the instance's rows change only
-- through the node transitions (12_node_transitions.sql). Concurrency limits and
-- windows are the lease transitions' (10_transitions.sql: _declare_group_limit,
-- _group_full), shared with scripts and submits.

-- Whether member p_by may answer under the policy: a role asks for that role or one
-- ranked above it (owner > admin > member > viewer, as cryo._role_rank ranks), a group
-- for that OIDC group among the groups of the session p_auth was signed in with (a
-- token has none). Raises CR226 otherwise.
CREATE OR REPLACE FUNCTION cryo._approver_check(p_org text, p_by text, p_auth text,
                                                p_policy jsonb)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_role text;
    v_groups text[];
    v_ranks constant text[] := '{viewer,member,admin,owner}';
BEGIN
    IF p_policy ? 'role' THEN
        SELECT m.role INTO v_role FROM cryo.members m WHERE m.org = p_org AND m.login = p_by;
        IF coalesce(array_position(v_ranks, v_role), 0)
           < coalesce(array_position(v_ranks, p_policy ->> 'role'), 99) THEN
            RAISE EXCEPTION '% may not answer this approval: it needs role % (% has %)', p_by,
                p_policy ->> 'role', p_by, coalesce(v_role, 'none') USING ERRCODE = 'CR226';
        END IF;
    END IF;
    IF p_policy ? 'group' THEN
        SELECT s.groups INTO v_groups FROM cryo.sessions s WHERE s.id = p_auth AND s.org = p_org;
        IF NOT coalesce(v_groups @> ARRAY[p_policy ->> 'group'], false) THEN
            RAISE EXCEPTION '% may not answer this approval: it needs group % (signed in through the issuer)',
                p_by, p_policy ->> 'group' USING ERRCODE = 'CR226';
        END IF;
    END IF;
END
$$;

-- Records p_by's answer (approved or rejected) to each waiting approval instance of the
-- node -- or, for a fanned-out node, to item p_item's only -- once per person: a second
-- answer raises CR225. Returns, for the least answered of those instances, how many
-- approvals it has and how many it needs; NULL when none of them waits for an approval.
CREATE OR REPLACE FUNCTION cryo._approval_record(
    p_run cryo.runs, p_node text, p_by text, p_auth text, p_answer text,
    p_item integer DEFAULT NULL)
RETURNS TABLE (approvals integer, needed integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_policy jsonb;
    v_items integer[];
BEGIN
    SELECT array_agg(i.item ORDER BY i.item) INTO v_items FROM cryo.node_instances i
     WHERE i.run_id = p_run.id AND i.node_id = p_node AND i.status = 'waiting'
       AND i.wait_kind = 'approval' AND i.output IS NULL
       AND (p_item IS NULL OR i.item = p_item);
    IF v_items IS NULL THEN
        RETURN;
    END IF;
    SELECT coalesce(n.def -> 'approval', '{}') INTO v_policy FROM cryo.node_states n
     WHERE n.run_id = p_run.id AND n.node_id = p_node;
    PERFORM cryo._approver_check(p_run.org, p_by, p_auth, v_policy);
    IF EXISTS (SELECT 1 FROM cryo.node_approvals a WHERE a.run_id = p_run.id
                  AND a.node_id = p_node AND a.item = ANY (v_items) AND a.approver = p_by) THEN
        RAISE EXCEPTION '% already answered approval % of run %; it takes % different approvers',
            p_by, p_node, p_run.id, coalesce(v_policy ->> 'approvers', '1') USING ERRCODE = 'CR225';
    END IF;
    INSERT INTO cryo.node_approvals (run_id, node_id, item, org, project, approver, answer, answered_at)
    SELECT p_run.id, p_node, x, p_run.org, p_run.project, p_by, p_answer, cryo.now()
      FROM unnest(v_items) x;
    needed := coalesce((v_policy ->> 'approvers')::integer, 1);
    SELECT min(c) INTO approvals FROM (
        SELECT count(a.approver) FILTER (WHERE a.answer = 'approved')::integer AS c
          FROM unnest(v_items) x
          LEFT JOIN cryo.node_approvals a ON a.run_id = p_run.id AND a.node_id = p_node AND a.item = x
         GROUP BY x) per;
    RETURN NEXT;
END
$$;

-- The answers an approval node got so far, oldest first: who, which way, when.
CREATE OR REPLACE FUNCTION cryo.read_approvals(p_run_id text, p_node text)
RETURNS TABLE (approver text, answer text, answered_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT a.approver, a.answer, min(a.answered_at) FROM cryo.node_approvals a
     WHERE a.run_id = p_run_id AND a.node_id = p_node
     GROUP BY a.approver, a.answer ORDER BY 3, 1
$$;
COMMENT ON FUNCTION cryo.read_approvals(text, text) IS
    'Returns the answers approval node p_node of graph run p_run_id got (approver, approved or rejected, when), oldest first. Raises nothing.';

-- A graph run whose input fails its workflow's input_schema, found by the driver at its
-- first turn: a run whose input could not be checked before it existed (an event
-- handler's run starts inside the publishing transaction, an application's
-- cryo.submit_run in its own). It fails, as a run of a bad input would in Windmill or
-- Temporal, with the schema's message and the code CR227: the publish or submit stands,
-- and the failed run shows what came in. No node has started: they are all skipped.
CREATE OR REPLACE FUNCTION cryo.graph_refuse_input(p_run_id text, p_token uuid, p_reason text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    IF EXISTS (SELECT 1 FROM cryo.lease_waiters w WHERE w.run_id = p_run_id) THEN
        PERFORM cryo._leave_lease_queues(p_run_id);
    END IF;
    PERFORM cryo._graph_cancel_nodes(p_run_id, true);
    PERFORM cryo._nodes_skip_unstarted(v_q, 'the run''s input was refused');
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'input_refused', 'input', '', 0);
    PERFORM cryo._finalize(p_run_id, 'failed', 1, 'CR227 ' || left(coalesce(p_reason, 'input: refused'), 2000));
    RETURN 'failed';
END
$$;
COMMENT ON FUNCTION cryo.graph_refuse_input(text, uuid, text) IS
    'Fails graph run p_run_id (claimed by the driver with p_token) because its input fails its input_schema: its error reads ''CR227 '' and p_reason (the schema''s message), its nodes are skipped, a history entry input_refused is written. Returns ''failed''. Raises CR002 for a stale token.';
