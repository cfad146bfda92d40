-- The graph interpreter's planning: which nodes are ready, skipped or started
-- (graph_plan, _graph_schedule), the records of what started and ended, settling a run
-- (parked or finished), submitting and calling a graph, and waking due ones. The intake
-- (drive_graphs, graph_state) and the constant state nodes run in place are in
-- 72_graph_drive.sql, whose header describes the tier as a whole.

-- The interpreter's step: with the scope the driver built (input, nodes.<id>.output and
-- .status, run.id) and the node configs it unsealed, decides every node that can be
-- decided now -- skipped, started, or (a constant state node) run here and then -- and
-- returns what to start, with its config rendered. Runs what it can in a loop: a chain of
-- constant state nodes ends in one call. When every node has ended it settles the run
-- itself if its output holds no user data, else returns one row with action 'finish'.
CREATE OR REPLACE FUNCTION cryo.graph_plan(
    p_run_id text, p_token uuid, p_configs jsonb, p_scope jsonb, p_calls jsonb DEFAULT NULL)
RETURNS TABLE (action text, node_id text, type text, item integer, attempt integer,
               config jsonb, item_value jsonb, idempotency_key text, output jsonb)
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_node cryo.node_states;
    v_start record;
    v_failing boolean;
    v_done boolean;
    v_again boolean;
    v_ran integer := 0;
    -- The database nodes one call runs before the turn yields and commits.
    v_share constant integer := 500;
    v_out jsonb;
    v_err text;
    v_run cryo.runs;
    v_answer jsonb;
    v_output jsonb;
    v_default jsonb;
    v_sealed boolean;
    -- The instances one call starts (a fan-out's are created a slice at a time): past
    -- it the turn yields, so no turn holds a driver for a whole large fan-out.
    v_slice constant integer := cryo._graph_slice();
    v_started integer := 0;
BEGIN
    IF p_calls IS NOT NULL THEN
        PERFORM cryo._graph_set_calls(p_run_id, cryo._graph_checked_calls(p_run_id, p_calls));
    END IF;
    LOOP
        v_again := false;
        -- Loops and early stop decide first, over this round's scope (74_graph_flow.sql).
        IF cryo._graph_flow_due(p_run_id) THEN
            p_scope := coalesce(cryo._graph_flow(v_q, p_scope), p_scope);
        END IF;
        -- A failed node (after its retries, without continue_on_error) fails the run: from
        -- then on only always nodes and the failure branch start.
        v_failing := cryo._graph_failing(p_run_id);
        -- What was skipped is said too, so the driver's scope follows without a re-read;
        -- and the constant state nodes the schedule ran at once ('done').
        FOR v_start IN SELECT * FROM cryo._graph_schedule(v_q, p_scope, v_failing, v_share - v_ran) LOOP
            action := v_start.action;
            node_id := v_start.node_id;
            type := NULL; item := NULL; attempt := NULL; config := NULL; item_value := NULL;
            idempotency_key := NULL; output := v_start.output;
            IF v_start.action = 'done' THEN
                type := 'state'; item := 0; attempt := 1;
                -- The schedule decides what its own runs readied before it returns: only
                -- a share used up (or a node run below) calls for another pass.
                v_ran := v_ran + 1;
                v_again := v_ran >= v_share;
                IF v_start.is_read THEN
                    p_scope := jsonb_set(p_scope, ARRAY['nodes', v_start.node_id],
                        jsonb_build_object('status', 'succeeded', 'output', v_start.output));
                END IF;
            END IF;
            RETURN NEXT;
        END LOOP;
        -- Start what can start: new instances of running nodes (up to max_parallel), and
        -- instances whose retry backoff has passed or whose concurrency group came free.
        FOR v_node IN SELECT * FROM cryo.node_states n
                       WHERE n.run_id = p_run_id AND cryo._node_status_in(n.status, 'under way')
                       ORDER BY n.ord LOOP
            v_failing := cryo._graph_failing(p_run_id);
            CONTINUE WHEN v_failing AND NOT cryo._graph_runs_on_failure(v_node.def);
            IF v_node.state_call IS NOT NULL AND v_node.def ? 'concurrency'
               AND NOT cryo._graph_scope_covers(p_scope, v_node.node_id) THEN
                action := 'config'; node_id := v_node.node_id; type := v_node.type;
                item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                CONTINUE;  -- its group reads the scope: in the round that covers it
            END IF;
            IF v_node.state_call IS NOT NULL THEN
                -- A constant state node: run here, recorded at once (a failure the
                -- database raises fails the node with its one-line reason, as on the
                -- driver's path; its retry, if any, is the record's to schedule).
                FOR v_start IN SELECT * FROM cryo._graph_start_instances(v_q, v_node, '{}', p_scope) LOOP
                    v_out := NULL;
                    v_err := NULL;
                    BEGIN
                        v_out := cryo._graph_state_call(v_q, v_node, v_start.item, v_start.attempt);
                    EXCEPTION WHEN OTHERS THEN
                        IF SQLSTATE NOT LIKE 'CR%' OR SQLSTATE = 'CR002' THEN
                            RAISE;
                        END IF;
                        v_err := split_part(SQLERRM, E'\n', 1);
                    END;
                    PERFORM cryo.graph_record_item(p_run_id, p_token, v_node.node_id, v_start.item,
                                                   CASE WHEN v_err IS NULL THEN 'succeeded' ELSE 'failed' END,
                                                   NULL, v_err, NULL, v_out);
                    IF coalesce((v_node.state_call ->> 'read')::boolean, false) THEN
                        p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id], jsonb_build_object(
                            'status', (SELECT n.status FROM cryo.node_states n
                                        WHERE n.run_id = p_run_id AND n.node_id = v_node.node_id),
                            'output', v_out));
                    END IF;
                    v_again := true;
                    v_ran := v_ran + 1;
                    action := 'done';
                    node_id := v_node.node_id;
                    type := v_node.type; item := v_start.item; attempt := v_start.attempt;
                    config := NULL; item_value := NULL; idempotency_key := NULL; output := v_out;
                    RETURN NEXT;
                END LOOP;
                CONTINUE;
            END IF;
            -- The driver sends only the configs of the nodes it expects to start (sending all
            -- of them made every call cost the graph's size). A node with instances to start
            -- and no config sent is asked for, and starts in the driver's next round.
            IF NOT p_configs ? v_node.node_id AND (
                   EXISTS (SELECT 1 FROM cryo.node_instances i
                            WHERE i.run_id = p_run_id AND i.node_id = v_node.node_id
                              AND (i.status = 'ready' OR (i.status = 'retrying' AND i.due_at <= cryo.now())))
                   OR coalesce((SELECT i.item + 1 FROM cryo.node_instances i
                                 WHERE i.run_id = p_run_id AND i.node_id = v_node.node_id
                                 ORDER BY i.item DESC LIMIT 1), 0) < coalesce(v_node.items, 1)) THEN
                action := 'config';
                node_id := v_node.node_id;
                type := v_node.type; item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF v_started >= v_slice THEN  -- this call's slice is used: yield below
                v_again := true;
                EXIT;
            END IF;
            FOR v_start IN SELECT * FROM cryo._graph_start_instances(v_q, v_node, p_configs, p_scope,
                                                                     v_slice - v_started) LOOP
                v_started := v_started + 1;
                action := 'start';
                node_id := v_node.node_id;
                type := v_node.type;
                item := v_start.item;
                attempt := v_start.attempt;
                config := v_start.config;
                item_value := v_start.item_value;
                idempotency_key := v_start.idempotency_key;
                output := NULL;
                RETURN NEXT;
            END LOOP;
        END LOOP;
        -- What ran here may have readied more. After a bounded share the turn yields and
        -- commits: in one transaction every node's earlier row versions stay in the
        -- indexes each read walks, so a longer turn would cost more a node.
        EXIT WHEN NOT v_again OR v_ran >= v_share OR v_started >= v_slice;
    END LOOP;
    IF v_started >= v_slice THEN
        v_again := true;
    END IF;
    IF v_again THEN
        action := 'yield';
        node_id := NULL; type := NULL; item := NULL; attempt := NULL; config := NULL;
        item_value := NULL; idempotency_key := NULL; output := NULL;
        RETURN NEXT;
        RETURN;
    END IF;

    v_failing := cryo._graph_failing(p_run_id);
    IF v_failing THEN
        -- Over when no always node or failure branch node is left to run.
        v_done := NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id
                                 AND cryo._node_status_in(n.status, 'live')
                                 AND cryo._graph_runs_on_failure(n.def));
    ELSE
        -- Over when nothing is open but the failure branch, which is then skipped.
        v_done := NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id
                                 AND cryo._node_status_in(n.status, 'live')
                                 AND NOT (n.status = 'pending'
                                          AND coalesce((n.def ->> 'on_failure')::boolean, false)));
        IF v_done THEN
            PERFORM cryo._nodes_skip_unstarted(v_q, 'the run did not fail');
        END IF;
    END IF;
    IF v_done THEN
        node_id := (SELECT n.node_id FROM cryo.node_states n
                     WHERE n.run_id = p_run_id AND n.status = 'failed' AND NOT n.tolerated
                     ORDER BY n.finished_at LIMIT 1);
        SELECT * INTO v_run FROM cryo.runs r WHERE r.id = p_run_id;
        -- An answer holding no user data is settled here: a failed run's (null), or the
        -- default output made of clear outputs. Not for a script's graph call, whose memo
        -- carries the sealed form.
        IF node_id IS NULL AND v_run.graph ? 'output'
           AND NOT cryo._graph_scope_covers(p_scope, '$output') THEN
            -- The output expression's reads come in the next round, asked for as '$output'.
            action := 'config'; node_id := '$output'; type := NULL; item := NULL;
            attempt := NULL; config := NULL; item_value := NULL; idempotency_key := NULL;
            output := NULL;
            RETURN NEXT;
            RETURN;
        END IF;
        IF node_id IS NULL THEN
            v_output := CASE WHEN v_run.graph ? 'output'
                             THEN cryo._eval(v_run.graph -> 'output', p_scope) END;
            -- (An output expression that gives null gives the default output too.)
            IF v_output IS NULL OR v_output = 'null'::jsonb THEN
                SELECT d.answer, d.sealed INTO v_default, v_sealed
                  FROM cryo._graph_default_output(p_run_id) d;
            END IF;
        END IF;
        IF node_id IS NOT NULL OR NOT v_run.graph ? 'output' THEN
            v_answer := CASE WHEN node_id IS NOT NULL THEN 'null'::jsonb
                             WHEN NOT v_sealed THEN v_default END;
            IF v_answer IS NOT NULL AND NOT EXISTS (
                    SELECT 1 FROM cryo.runs p WHERE p.id = v_run.parent_run_id AND p.kind = 'script') THEN
                action := 'settled';
                type := cryo.graph_settle(p_run_id, p_token, true, NULL,
                                          jsonb_build_object('answer', v_answer));
                item := NULL; attempt := NULL; config := NULL; item_value := NULL;
                idempotency_key := NULL; output := NULL;
                RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        -- The driver seals the answer: the output expression's value, or (type 'default')
        -- the default output, whose sealed outputs it opens first.
        action := 'finish';
        type := CASE WHEN v_default IS NOT NULL THEN 'default' END;
        item := NULL; attempt := NULL; config := NULL; item_value := NULL;
        idempotency_key := NULL;
        output := coalesce(v_default, v_output);
        RETURN NEXT;
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.graph_plan(text, uuid, jsonb, jsonb, jsonb) IS
    'Decides every node of the driven graph run that can be decided over the given scope: skips it (if false, or all predecessors skipped), runs it when it is a constant state node (p_calls, once per run: {node: {op, key, entity, expected, read, value as hex of the sealed value}}), or starts its instances (fan-out items up to max_parallel, concurrency leases taken or waited for, retries whose backoff passed). Returns (action ''skip'', node) per node skipped, (action ''done'', node, type, item, attempt, output) per constant state instance run and recorded here, (action ''config'', node) per node with instances to start whose config was not given (the driver sends it in its next call), and (action ''start'', node, type, item, attempt, rendered config, item value, idempotency key) per instance to start. When every node ended or one failed: a row with action ''settled'' (type the run''s final status) when the run''s answer held no user data and it was settled here, else a row with action ''finish'' (node_id names the failed node; when it succeeded, output is the graph''s output expression, or with type ''default'' its default output: the outputs of the nodes nothing depends on, a sealed one as {"$sealed": hex}). After 500 state nodes run in one call it returns a row with action ''yield'': more to do, in a new turn (cryo.graph_yield). A concurrency group that renders to a bad name fails its node. Costs what is ready, not the size of the graph. Raises CR002 for a stale token.';

-- Decides the ready nodes (pending, every predecessor ended): skipped when their
-- predecessors were all skipped or their `if` is false, else running (with their fan-out
-- size) -- or, a constant state node with no concurrency group, run and ended at once
-- (cryo._graph_state_now). Skips cascade within one call. Reads only ready nodes and
-- their predecessors. Returns the nodes it skipped ('skip') and ran ('done', with the
-- output, and is_read: whether an expression reads it); it stops once it has run
-- p_budget nodes (the rest are decided by the next call).
CREATE OR REPLACE FUNCTION cryo._graph_schedule(p_q cryo.queue, p_scope jsonb, p_failing boolean,
                                                p_budget integer DEFAULT NULL)
RETURNS TABLE (action text, node_id text, output jsonb, is_read boolean)
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_run_id text := p_q.run_id;
    v_node cryo.node_states;
    v_dep_status text[];
    v_scope jsonb;
    v_items jsonb;
    v_n integer;
    v_changed boolean := true;
    v_handler boolean;
    v_why text;
    v_failed_here boolean := false;
    -- Whether any node of the run was skipped: only then can a node's predecessors all
    -- have been, and only then are they read (each ready node otherwise costs a query).
    v_any_skipped boolean := EXISTS (SELECT 1 FROM cryo.node_states n
                                      WHERE n.run_id = p_q.run_id AND n.status = 'skipped');
BEGIN
    WHILE v_changed LOOP
        -- A node failing in this loop (a fan-out that is not a list) fails the run.
        IF v_failed_here THEN
            p_failing := p_failing OR cryo._graph_failing(v_run_id);
            v_failed_here := false;
        END IF;
        -- A failing run with no always node or failure branch left decides nothing more
        -- (what had not started stays pending, as the run ends).
        IF p_failing AND NOT EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = v_run_id
                                        AND n.status = 'pending'
                                        AND cryo._graph_runs_on_failure(n.def)) THEN
            RETURN;
        END IF;
        v_changed := false;
        FOR v_node IN SELECT * FROM cryo.node_states n
                       WHERE n.run_id = v_run_id AND n.status = 'pending' AND n.open_deps = 0
                       ORDER BY n.ord LOOP
            v_handler := cryo._graph_runs_on_failure(v_node.def);
            IF NOT p_failing AND coalesce((v_node.def ->> 'on_failure')::boolean, false) THEN
                CONTINUE;  -- the failure branch waits for a failure (skipped at the end)
            END IF;
            -- Why the node is skipped, if it is: the run is failing (what is not an always
            -- node or the failure branch will not run, and its skip lets those after it be
            -- decided), its predecessors were all skipped, or its `if` is false.
            v_why := CASE WHEN p_failing AND NOT v_handler THEN 'the run failed' END;
            -- Each predecessor by its primary key (see _graph_node_ended).
            IF v_why IS NULL AND v_any_skipped AND cardinality(v_node.deps) > 0
               AND NOT v_handler THEN
                v_dep_status := ARRAY(SELECT (SELECT n.status FROM cryo.node_states n
                                               WHERE n.run_id = v_run_id AND n.node_id = d)
                                        FROM unnest(v_node.deps) AS d);
                -- (A failed predecessor here failed with continue_on_error: it ended.)
                IF NOT EXISTS (SELECT 1 FROM unnest(v_dep_status) s WHERE s <> 'skipped') THEN
                    v_why := 'its predecessors were all skipped';
                END IF;
            END IF;
            -- (Only an `if` and a fan-out read the node's scope.) A scope that names the
            -- nodes it covers (`$for`) holds only what those read: another node is asked
            -- for, and decided in the driver's next round with its entries.
            IF v_why IS NULL AND (v_node.def ? 'if' OR v_node.def ? 'fan_out')
               AND NOT cryo._graph_scope_covers(p_scope, v_node.node_id) THEN
                action := 'config'; node_id := v_node.node_id; output := NULL; is_read := NULL;
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF v_why IS NULL AND (v_node.def ? 'if' OR v_node.def ? 'fan_out') THEN
                v_scope := p_scope || jsonb_build_object('node', jsonb_build_object(
                    'id', v_node.node_id,
                    'idempotency_key', cryo._graph_key(v_run_id, v_node.node_id, 0, false)));
                IF v_node.def ? 'if'
                   AND NOT cryo._truthy(cryo._eval(v_node.def -> 'if', v_scope)) THEN
                    v_why := 'if was false';
                END IF;
            END IF;
            IF v_why IS NOT NULL THEN
                v_any_skipped := true;
                PERFORM cryo._graph_skip(p_q, v_node.node_id, v_why);
                action := 'skip'; node_id := v_node.node_id; output := NULL; is_read := NULL;
                RETURN NEXT;
                v_changed := true;
                CONTINUE;
            END IF;
            v_n := NULL;
            IF v_node.def ? 'fan_out' THEN
                v_items := cryo._eval(v_node.def -> 'fan_out', v_scope);
                IF jsonb_typeof(v_items) <> 'array' THEN
                    PERFORM cryo._node_end(v_run_id, v_node.node_id, 'failed',
                                           'fan_out items is not a list');
                    PERFORM cryo._history(v_run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                          v_node.node_id, 0);
                    v_changed := true;
                    v_failed_here := true;
                    CONTINUE;
                END IF;
                v_n := jsonb_array_length(v_items);
                IF v_n > cryo._graph_fan_out_max() THEN  -- the deployment's bound
                    PERFORM cryo._node_end(v_run_id, v_node.node_id, 'failed',
                        format('fan_out has %s items, over the limit of %s (CRYOPG_GRAPH_FAN_OUT_MAX)',
                               v_n, cryo._graph_fan_out_max()));
                    PERFORM cryo._history(v_run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                          v_node.node_id, 0);
                    v_changed := true;
                    v_failed_here := true;
                    CONTINUE;
                END IF;
            END IF;
            IF v_node.state_call IS NOT NULL AND NOT v_node.def ? 'concurrency' THEN
                output := cryo._graph_state_now(p_q, v_node);
                IF output IS NOT NULL THEN
                    action := 'done'; node_id := v_node.node_id;
                    is_read := coalesce((v_node.state_call ->> 'read')::boolean, false);
                    IF is_read THEN  -- a later `if` in this call reads it
                        p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id],
                            jsonb_build_object('status', 'succeeded', 'output', output));
                    END IF;
                    RETURN NEXT;
                    v_changed := true;
                    p_budget := p_budget - 1;
                    IF p_budget <= 0 THEN
                        RETURN;
                    END IF;
                    CONTINUE;
                END IF;
            END IF;
            IF cryo._node_start(p_q, v_node.node_id, v_n) THEN  -- an empty fan-out
                v_changed := true;
            END IF;
        END LOOP;
    END LOOP;
END
$$;

-- The instances of one running node that start now: ready ones (a concurrency group came
-- free), retries whose backoff passed, and new fan-out items after the last one created,
-- up to max_parallel. Instances already under way are not visited, so a turn over a
-- large fan-out costs what starts.
CREATE OR REPLACE FUNCTION cryo._graph_start_instances(
    p_q cryo.queue, p_node cryo.node_states, p_configs jsonb, p_scope jsonb,
    p_budget integer DEFAULT NULL)
RETURNS TABLE (item integer, attempt integer, config jsonb, item_value jsonb, idempotency_key text)
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_run_id text := p_q.run_id;
    v_node text := p_node.node_id;
    v_max integer := nullif(p_node.def ->> 'max_parallel', '')::integer;
    v_fan boolean := p_node.items IS NOT NULL;
    -- A loop's iterations are its items: each its own key, and node.iteration to read.
    v_loop boolean := p_node.def ? 'loop';
    v_items jsonb;
    v_active integer;
    v_next integer;
    v_n integer;
    v_scope jsonb;
    v_inst cryo.node_instances;
    v_group text;
    v_holder text;
    v_path text;
    v_base jsonb := p_scope;
BEGIN
    IF v_fan THEN
        v_items := cryo._eval(p_node.def -> 'fan_out', p_scope || jsonb_build_object(
            'node', jsonb_build_object('id', v_node)));
        -- Each item's scope is a copy: without the input when nothing rendered per item
        -- reads it (a fan-out over a large input copied all of it for every item).
        IF NOT jsonb_path_exists(jsonb_build_array(p_configs -> v_node, p_node.def -> 'concurrency'),
                                 'strict $.**.path ? (@[0] == "input")') THEN
            v_base := p_scope - 'input';
        END IF;
    END IF;
    SELECT count(*) INTO v_active FROM cryo.node_instances i
     WHERE i.run_id = v_run_id AND i.node_id = v_node
       AND cryo._node_status_in(i.status, 'instance active');
    v_next := coalesce((SELECT i.item + 1 FROM cryo.node_instances i
                         WHERE i.run_id = v_run_id AND i.node_id = v_node
                         ORDER BY i.item DESC LIMIT 1), 0);
    FOR v_n IN
        SELECT i.item FROM cryo.node_instances i
         WHERE i.run_id = v_run_id AND i.node_id = v_node
           AND (i.status = 'ready' OR (i.status = 'retrying' AND i.due_at <= cryo.now()))
        UNION ALL
        SELECT g FROM generate_series(v_next, coalesce(p_node.items, 1) - 1) g
        ORDER BY 1
    LOOP
        EXIT WHEN v_max IS NOT NULL AND v_active >= v_max;
        EXIT WHEN p_budget IS NOT NULL AND p_budget <= 0;  -- the rest in the next slice
        p_budget := p_budget - 1;
        v_path := 'node/' || v_node || '/' || v_n;
        v_scope := v_base || jsonb_build_object('node', jsonb_build_object(
            'id', v_node, 'idempotency_key', cryo._graph_key(v_run_id, v_node, v_n, v_fan OR v_loop))
            || CASE WHEN v_loop THEN jsonb_build_object('iteration', v_n) ELSE '{}' END);
        IF v_fan THEN
            v_scope := v_scope || jsonb_build_object('item', v_items -> v_n, 'item_index', v_n);
        END IF;
        PERFORM cryo._instance_open(p_q, v_node, v_n);
        v_group := NULL;
        -- A node's concurrency group is the same project lease scripts and submits use,
        -- held by this run for as long as the instance runs. When the run was admitted
        -- through that very group it holds it already (no other run is in it), and the
        -- instance runs under the run's lease instead of waiting behind its own run.
        IF p_node.def ? 'concurrency' THEN
            v_group := cryo._eval(p_node.def -> 'concurrency', v_scope) #>> '{}';
            BEGIN
                PERFORM cryo._check_name('concurrency group', v_group);
            EXCEPTION WHEN SQLSTATE 'CR004' THEN
                -- A group that renders to nothing fails this node, not the driver's turn.
                PERFORM cryo.graph_record_item(v_run_id, p_q.claim_token, v_node, v_n, 'failed',
                                               NULL, 'concurrency group ' || SQLERRM);
                CONTINUE;
            END;
            PERFORM cryo._lock_group(p_q.org, p_q.project, v_group);
            PERFORM cryo._declare_group_limit(p_q.org, p_q.project, v_group,
                                              (p_node.def ->> 'concurrency_limit')::integer,
                                              (p_node.def ->> 'concurrency_window')::float8);
            v_holder := cryo._group_holder(p_q.org, p_q.project, v_group);
            IF v_holder IS NOT NULL AND EXISTS (
                    SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                       AND l.grp = v_group AND l.holder_run_id = v_run_id
                       AND l.kind = 'admission') THEN
                NULL;  -- the run's own admission lease covers the instance
            ELSIF cryo._group_full(p_q.org, p_q.project, v_group) AND NOT EXISTS (
                    SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                       AND l.grp = v_group AND l.holder_run_id = v_run_id AND l.path = v_path) THEN
                IF NOT EXISTS (SELECT 1 FROM cryo.lease_waiters w
                                WHERE w.run_id = v_run_id AND w.grp = v_group AND w.path = v_path) THEN
                    PERFORM cryo._queue_for_lease(p_q.org, p_q.project, v_group, v_run_id,
                                                  'graph', v_path, true);
                END IF;
                PERFORM cryo._instance_await_lease(v_run_id, v_node, v_n, v_group);
                CONTINUE;  -- waits in the group's FIFO; a grant wakes the run
            END IF;
            IF NOT EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                              AND l.grp = v_group AND l.holder_run_id = v_run_id AND l.path = v_path) THEN
                PERFORM cryo._take_lease(p_q.org, p_q.project, v_group, v_run_id, 'graph', v_path, true);
            END IF;
        END IF;
        v_inst := cryo._instance_run(v_run_id, v_node, v_n, v_group);
        v_active := v_active + 1;
        item := v_n;
        attempt := v_inst.attempt;
        config := CASE WHEN p_configs ? v_node THEN cryo._render(p_configs -> v_node, v_scope)
                       ELSE '{}'::jsonb END;
        item_value := CASE WHEN v_fan THEN v_items -> v_n END;
        idempotency_key := v_scope #>> '{node,idempotency_key}';
        RETURN NEXT;
    END LOOP;
END
$$;

-- Records how an instance ended. A failure with attempts left (and an exit code the
-- node's retry covers, and its retry_if true over failure.exit_code, failure.error and
-- failure.status, an http node's status) schedules the instance again after its backoff, with a fresh
-- child run, so it re-runs memos and all under the same idempotency key. Returns the
-- instance's new status.
CREATE OR REPLACE FUNCTION cryo.graph_record_item(
    p_run_id text, p_token uuid, p_node text, p_item integer, p_outcome text,
    p_output bytea DEFAULT NULL, p_error text DEFAULT NULL, p_exit_code integer DEFAULT NULL,
    p_output_clear jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_status text;
    v_if jsonb;
BEGIN
    IF p_outcome = 'failed' THEN  -- its retry_if decides over the failure
        SELECT n.def #> '{retry,retry_if}' INTO v_if FROM cryo.node_states n
         WHERE n.run_id = p_run_id AND n.node_id = p_node;
    END IF;
    v_status := cryo._instance_ended(
        p_run_id, v_q.org, v_q.project, p_node, p_item, p_outcome, p_output, p_error,
        p_exit_code, p_output_clear,
        v_if IS NULL OR cryo._truthy(cryo._eval(v_if, jsonb_build_object(
            'failure', jsonb_build_object(
                'exit_code', p_exit_code, 'error', p_error,
                'status', substring(p_error FROM '^HTTP ([0-9]{3})$')::integer)))));
    IF v_status = 'succeeded' AND p_outcome = 'succeeded' THEN  -- its cache, if it has one
        PERFORM cryo._graph_cache_keep(p_run_id, p_node, p_item, p_output, p_output_clear);
    END IF;
    RETURN v_status;
END
$$;
COMMENT ON FUNCTION cryo.graph_record_item(text, uuid, text, integer, text, bytea, text, integer, jsonb) IS
    'Records that an instance of a node of the driven graph run ended (succeeded or failed, with its sealed output, or p_output_clear for one holding no user data), or schedules its retry; ends the node when all its instances have (a loop''s node is decided by the next round); a success stores its output under the instance''s cache key, if its cache missed. Returns the instance''s status (succeeded, failed, retrying). Raises CR002 for a stale token, CR004 for a bad outcome, CR005 for an instance never started.';

-- An agent-bound instance becomes a child run; its end wakes the graph run.
CREATE OR REPLACE FUNCTION cryo.graph_start_job(
    p_run_id text, p_token uuid, p_node text, p_item integer, p_filename text,
    p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[],
    p_graph jsonb DEFAULT NULL, p_workflow text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_child text;
BEGIN
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, p_filename, p_interpreter, p_source, p_input, NULL,
        p_required_caps, p_workflow, p_parent_run_id => p_run_id, p_graph => p_graph,
        -- the node's timeout bounds each attempt's job (79_timeouts.sql)
        p_timeout => (SELECT (n.def ->> 'timeout')::float8 FROM cryo.node_states n
                       WHERE n.run_id = p_run_id AND n.node_id = p_node)) s;
    UPDATE cryo.runs SET graph_node = p_node, graph_item = p_item WHERE id = v_child;
    PERFORM cryo._instance_job(p_run_id, p_node, p_item, v_child);
    RETURN v_child;
END
$$;
COMMENT ON FUNCTION cryo.graph_start_job(text, uuid, text, integer, text, text, bytea, bytea, text[], jsonb, text) IS
    'Starts the child run that does an instance of a node of the driven graph run (a job for an agent, or with p_graph a child graph run); returns its id. Raises CR002 for a stale token, CR004 for a missing source.';

-- An instance that waits in the database: a timer, a signal, an event, or an approval.
CREATE OR REPLACE FUNCTION cryo.graph_wait_item(
    p_run_id text, p_token uuid, p_node text, p_item integer, p_kind text, p_name text,
    p_seconds double precision)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    IF p_kind NOT IN ('sleep', 'signal', 'event', 'approval') THEN
        RAISE EXCEPTION 'a node waits on sleep, signal, event or approval, not %', p_kind
            USING ERRCODE = 'CR004';
    END IF;
    PERFORM cryo._check_timeout(p_seconds);
    PERFORM cryo._instance_wait(v_q, p_node, p_item, p_kind, p_name, p_seconds);
END
$$;
COMMENT ON FUNCTION cryo.graph_wait_item(text, uuid, text, integer, text, text, double precision) IS
    'Makes an instance of a node of the driven graph run wait for a timer, a signal or event of p_name, or an approval, at most p_seconds (NULL: no limit). Returns nothing. Raises CR002 for a stale token, CR004 for an unknown kind or bad duration.';

-- Ends a driver's turn on a graph run: finished when the plan said so, else parked until
-- the earliest timer or retry among its instances, or until a child, signal, event,
-- approval or lease wakes it.
CREATE OR REPLACE FUNCTION cryo.graph_settle(
    p_run_id text, p_token uuid, p_finish boolean, p_output bytea DEFAULT NULL,
    p_output_clear jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_failed cryo.node_states;
    v_child record;
    v_reason text;
BEGIN
    IF p_finish THEN
        SELECT * INTO v_failed FROM cryo.node_states n
         WHERE n.run_id = p_run_id AND n.status = 'failed' AND NOT n.tolerated
         ORDER BY n.finished_at LIMIT 1;
        -- A failed node fails the run and cancels what is still running.
        FOR v_child IN SELECT i.job_run_id FROM cryo.node_instances i JOIN cryo.runs c ON c.id = i.job_run_id
                        WHERE i.run_id = p_run_id AND NOT cryo.is_terminal(c.status) LOOP
            PERFORM cryo.cancel_run(v_child.job_run_id);
        END LOOP;
        -- (Asked first: the call is planned afresh each time, the question is not.)
        IF EXISTS (SELECT 1 FROM cryo.lease_waiters w WHERE w.run_id = p_run_id) THEN
            PERFORM cryo._leave_lease_queues(p_run_id);
        END IF;
        IF p_output IS NOT NULL OR p_output_clear IS NOT NULL THEN
            INSERT INTO cryo.run_outputs (run_id, org, project, key, value, value_clear, updated_at)
            VALUES (p_run_id, v_q.org, v_q.project, 'output', p_output,
                    CASE WHEN p_output IS NULL THEN p_output_clear END, cryo.now())
            ON CONFLICT (run_id, key) DO UPDATE
               SET value = excluded.value, value_clear = excluded.value_clear,
                   updated_at = excluded.updated_at;
        END IF;
        IF v_failed.node_id IS NOT NULL THEN
            -- What was still running was cancelled above: its nodes say so; and what
            -- never started is skipped, so no node of a finished run is left pending.
            PERFORM cryo._graph_cancel_nodes(p_run_id, true);
            PERFORM cryo._nodes_skip_unstarted(v_q, 'the run failed');
            -- The run exits as its failing node's job did (1 when no job ran it).
            PERFORM cryo._finalize(p_run_id, 'failed',
                coalesce((SELECT c.exit_code FROM cryo.node_instances i
                            JOIN cryo.runs c ON c.id = i.job_run_id
                           WHERE i.run_id = p_run_id AND i.node_id = v_failed.node_id
                             AND i.status = 'failed' AND c.exit_code BETWEEN 1 AND 255
                           ORDER BY i.finished_at LIMIT 1), 1),
                'node ' || v_failed.node_id || ' failed: ' || coalesce(v_failed.error, ''));
            RETURN 'failed';
        END IF;
        PERFORM cryo._finalize(p_run_id, 'succeeded', 0, NULL);
        RETURN 'succeeded';
    END IF;
    SELECT CASE WHEN bool_or(i.status = 'running') THEN 'running-nodes'
                WHEN bool_or(i.wait_kind = 'approval') THEN 'awaiting-approval'
                WHEN bool_or(i.wait_kind = 'signal') THEN 'awaiting-signal'
                WHEN bool_or(i.wait_kind = 'event') THEN 'awaiting-event'
                WHEN bool_or(i.wait_kind = 'sleep') THEN 'sleeping'
                WHEN bool_or(i.status = 'ready') THEN 'awaiting-lease'
                ELSE 'retry-backoff' END
      INTO v_reason
      FROM cryo.node_instances i WHERE i.run_id = p_run_id
       AND cryo._node_status_in(i.status, 'instance live');
    UPDATE cryo.runs r SET drive_failures = 0 WHERE r.id = p_run_id AND r.drive_failures <> 0;
    PERFORM cryo._park(p_run_id, coalesce(v_reason, 'running-nodes'), NULL, NULL,
                       (SELECT min(i.due_at) FROM cryo.node_instances i
                         WHERE i.run_id = p_run_id
                           AND cryo._node_status_in(i.status, 'instance timed')));
    RETURN 'parked';
END
$$;
COMMENT ON FUNCTION cryo.graph_settle(text, uuid, boolean, bytea, jsonb) IS
    'Ends a driver''s turn on a graph run: with p_finish, ends the run (failed when a node failed, with that node''s job''s exit code, cancelling its running children and their nodes; else succeeded), storing p_output (sealed) or p_output_clear (an answer holding no user data, as {"answer": v}) as its output; otherwise parks it until its earliest timer or retry, or until something it waits on wakes it. Returns ''succeeded'', ''failed'' or ''parked''. Raises CR002 for a stale token.';

-- A turn that has done its share yields: the run parks and is pending again at once,
-- behind the runs that were waiting, so a long chain of database-only nodes goes on in
-- the next turn (any driver's) instead of stalling with nothing to wake it.
CREATE OR REPLACE FUNCTION cryo.graph_yield(p_run_id text, p_token uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    UPDATE cryo.runs r SET drive_failures = 0 WHERE r.id = p_run_id AND r.drive_failures <> 0;
    PERFORM cryo._park(p_run_id, 'running-nodes', NULL, NULL, NULL);
    PERFORM cryo._wake(ARRAY[p_run_id], 'turn_yielded');
END
$$;
COMMENT ON FUNCTION cryo.graph_yield(text, uuid) IS
    'Ends a driver''s turn on a graph run that has more to do: the run is pending again at once, behind those already waiting. Returns nothing. Raises CR002 for a stale token.';

-- Whether the database alone can run a whole graph in one call: every node a constant
-- state node whose call the server sealed (p_calls), with no `if`, fan-out or concurrency
-- group, and the graph with no output expression or concurrency group of its own. Such a
-- graph needs nothing the driver holds (no expression reads the input or a sealed output).
CREATE OR REPLACE FUNCTION cryo._graph_runs_itself(p_graph jsonb, p_calls jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN p_calls IS NOT NULL AND jsonb_typeof(p_graph -> 'nodes') = 'array'
       AND NOT p_graph ? 'output' AND NOT p_graph ? 'concurrency'
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_graph -> 'nodes') d
                        WHERE NOT p_calls ? (d ->> 'id') OR d ? 'if' OR d ? 'fan_out'
                           OR d ? 'concurrency' OR d ->> 'type' IS DISTINCT FROM 'state');
END
$$;

-- Submits a graph run, as submit_script does, and when the database can run all of it
-- (cryo._graph_runs_itself) drives it at once in the same transaction -- the turn a
-- server driver would take next, without the hop: a chain of constant state nodes has
-- ended when its submit returns. Whatever is left (a retry's backoff, a share's yield)
-- goes to the drivers as after any turn.
CREATE OR REPLACE FUNCTION cryo.submit_graph(
    p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea,
    p_input bytea, p_idempotency_key text, p_untrusted boolean, p_concurrency text, p_policy text,
    p_workdir text, p_graph jsonb, p_calls jsonb DEFAULT NULL,
    p_timeout double precision DEFAULT NULL, p_priority integer DEFAULT NULL)
RETURNS TABLE (run_id text, created boolean, status text, queue_position integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
    v_created boolean;
    v_token uuid;
    v_plan record;
    v_ended text;
    v_itself boolean;
BEGIN
    IF p_graph IS NULL THEN
        RAISE EXCEPTION 'a graph run needs its compiled structure' USING ERRCODE = 'CR004';
    END IF;
    v_itself := cryo._graph_runs_itself(p_graph, p_calls);
    IF v_itself THEN  -- the enqueue need not wake the drivers: this call drives the run
        PERFORM set_config('cryo.graph_self_driven', 'on', true);
    END IF;
    SELECT s.run_id, s.created INTO v_id, v_created
      FROM cryo.submit_script(p_org, p_project, p_filename, p_interpreter, p_source, p_input,
                              p_idempotency_key, '{graph}', NULL, NULL, p_concurrency,
                              p_policy, p_untrusted, NULL, p_workdir, p_graph,
                              p_timeout, p_priority) s;
    IF v_itself THEN
        PERFORM set_config('cryo.graph_self_driven', '', true);
        IF v_id IS NOT NULL AND v_created THEN
            v_token := cryo._drive_run('submit', v_id);
            IF v_token IS NULL THEN  -- queued behind its group: the drivers take it later
                PERFORM pg_notify('cryo_graph', '');
            END IF;
        END IF;
    END IF;
    IF v_token IS NOT NULL THEN
        -- The calls, then (when nothing can be skipped or fail) every node at once, and
        -- the run is over: it succeeded, and its answer is its sinks' clear outputs (it
        -- has no output expression and no parent), as graph_plan would settle it.
        p_calls := cryo._graph_checked_calls(v_id, p_calls);
        IF cryo._graph_state_batch(cryo._claimed_row(v_id, v_token), p_calls) THEN
            PERFORM cryo.graph_settle(v_id, v_token, true, NULL, jsonb_build_object(
                'answer', (cryo._graph_default_output(v_id)).answer));
            v_token := NULL;
        END IF;
    END IF;
    IF v_token IS NOT NULL THEN  -- one node at a time, as a driver's turn would
        FOR v_plan IN SELECT * FROM cryo.graph_plan(
                v_id, v_token, '{}', jsonb_build_object('nodes', '{}'::jsonb, 'run',
                                                        jsonb_build_object('id', v_id)),
                p_calls) LOOP
            IF v_plan.action IN ('settled', 'yield', 'finish', 'start', 'config') THEN
                v_ended := v_plan.action;
            END IF;
        END LOOP;
        IF v_ended IS NULL THEN  -- waits on something (a retry's backoff): parked
            PERFORM cryo.graph_settle(v_id, v_token, false);
        ELSIF v_ended <> 'settled' THEN  -- more for a driver: pending again at once
            PERFORM cryo.graph_yield(v_id, v_token);
        END IF;
    END IF;
    RETURN QUERY SELECT v_id, v_created, r.status,
                        CASE WHEN r.status = 'queued' THEN cryo._queue_position(v_id) END
                   FROM cryo.runs r WHERE r.id = v_id;
    IF v_id IS NULL THEN  -- skip: the group was held, no run
        RETURN QUERY SELECT NULL::text, false, NULL::text, NULL::integer;
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.submit_graph(text, text, text, text, bytea, bytea, text, boolean, text, text, text, jsonb, jsonb, double precision, integer) IS
    'Creates a graph run as submit_script does (p_graph its compiled structure, p_source its sealed document); when every node is a constant state node whose call is in p_calls ({node: {op, key, entity, expected, read, value as hex of the sealed value}}) with no if, fan-out or concurrency and the graph has no output expression or concurrency group, drives it at once in this transaction, so it has usually ended when this returns. Returns (run_id, created, status, queue_position); run_id NULL when skip found the group held. Raises what submit_script raises.';

-- A turn that failed (an error no node could be blamed for) was rolled back to before it
-- started; the run parks with a backoff that doubles with each failure in a row (0.5 s
-- to 60 s) and says why in history, so it never holds the drivers or the runs behind it.
CREATE OR REPLACE FUNCTION cryo.graph_defer(p_run_id text, p_token uuid, p_error text)
RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_failures integer;
    v_secs double precision;
BEGIN
    UPDATE cryo.runs r SET drive_failures = r.drive_failures + 1 WHERE r.id = p_run_id
    RETURNING r.drive_failures INTO v_failures;
    v_secs := least(60, 0.5 * power(2, least(v_failures - 1, 10)));
    -- The reason is the event's name (clear, as node errors are), the count its ordinal.
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'graph_turn_failed', 'graph',
                          left(coalesce(p_error, 'failed'), 200), v_failures);
    PERFORM cryo._park(p_run_id, 'driver-backoff', NULL, NULL,
                       cryo.now() + make_interval(secs => v_secs));
    RETURN v_secs;
END
$$;
COMMENT ON FUNCTION cryo.graph_defer(text, uuid, text) IS
    'Parks a graph run whose driver turn failed with p_error (one line, kept in history as graph_turn_failed), to be driven again after a backoff that doubles with each failure in a row, from 0.5 s up to 60 s; returns the backoff in seconds. Raises CR002 for a stale token.';

-- Exact timers: wakes the graph runs whose earliest timer, retry or backoff is due on the
-- database clock, and returns the seconds until the next one (NULL: none), so a server
-- arms itself for that deadline instead of waiting for the tick.
CREATE OR REPLACE FUNCTION cryo.wake_due_graphs(p_batch integer DEFAULT 1000)
RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_sleeps text[];
    v_waits text[];
    v_retries text[];
BEGIN
    SELECT array_agg(d.run_id) FILTER (WHERE d.kind = 'timer_fired'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'retry_due'),
           array_agg(d.run_id) FILTER (WHERE d.kind = 'wait_timed_out')
      INTO v_sleeps, v_retries, v_waits
      FROM (SELECT q.run_id,
                   CASE WHEN q.park_reason = 'driver-backoff' THEN 'retry_due'
                        ELSE cryo._graph_due_kind(q.run_id) END AS kind
              FROM cryo.queue q
             WHERE q.state = 'parked' AND q.wake_at <= v_now AND q.required_caps = '{graph}'
             ORDER BY q.wake_at
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) d;
    PERFORM cryo._wake(v_sleeps, 'timer_fired', NULL, NULL, 0);
    PERFORM cryo._wake(v_retries, 'retry_due');
    PERFORM cryo._wake(v_waits, 'wait_timed_out', NULL, NULL, 124);
    RETURN (SELECT extract(epoch FROM q.wake_at - v_now)::double precision FROM cryo.queue q
             WHERE q.state = 'parked' AND q.wake_at > v_now AND q.required_caps = '{graph}'
             ORDER BY q.wake_at LIMIT 1);
END
$$;
COMMENT ON FUNCTION cryo.wake_due_graphs(integer) IS
    'Wakes up to p_batch parked graph runs whose timer, retry or backoff is due on the database clock; returns the seconds until the next such deadline, NULL when none. Raises nothing of its own.';

-- How tick() names the wake of a graph run whose earliest timer is due: a sleep node's
-- timer fired, a node's retry backoff passed, or a wait node's timeout ran out.
CREATE OR REPLACE FUNCTION cryo._graph_due_kind(p_run_id text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce((
        SELECT CASE WHEN i.status = 'retrying' THEN 'retry_due'
                    WHEN i.wait_kind = 'sleep' THEN 'timer_fired'
                    ELSE 'wait_timed_out' END
          FROM cryo.node_instances i
         WHERE i.run_id = p_run_id AND cryo._node_status_in(i.status, 'instance timed')
           AND i.due_at IS NOT NULL
         ORDER BY i.due_at LIMIT 1), 'wait_timed_out')
$$;

-- -- graph calls from scripts ------------------------------------------------------------
-- A script calls a stored graph (family graph.call, name: the graph's name) or a single
-- node (family node.call, name: the node type) and waits for its output: a durable call
-- whose first reach submits the child graph run and parks the caller on a marker naming
-- it; the child's ending wakes the caller (cryo._wake_parent) with the memo below, so
-- every later pass answers from the journal and submits nothing.

CREATE OR REPLACE FUNCTION cryo.call_graph(
    p_run_id text, p_token uuid, p_position integer, p_family text, p_name text,
    p_ordinal integer, p_workflow text, p_filename text, p_source bytea, p_input bytea,
    p_graph jsonb, p_path text DEFAULT NULL)
RETURNS TABLE (parked boolean, child_run_id text, status text, exit_code integer,
               output bytea, error text)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text;
    v_memo cryo.journal;
    v_child text;
    v_got record;
BEGIN
    IF p_family IS NULL OR p_family NOT IN ('graph.call', 'node.call') THEN
        RAISE EXCEPTION 'a graph call''s family is graph.call or node.call, not %', coalesce(p_family, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    v_memo := cryo._replay(p_run_id, p_family, p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.ref_run_id, v_memo.answer_clear ->> 'status',
                            v_memo.exit_code, v_memo.result, v_memo.answer_clear ->> 'error';
        RETURN;
    END IF;
    -- A marker an earlier pass left names the child it submitted: never a second one.
    SELECT j.ref_run_id INTO v_child FROM cryo.journal j
     WHERE j.run_id = p_run_id AND j.path = v_path AND j.status = 'pending';
    IF v_child IS NULL THEN
        IF p_graph IS NULL OR p_source IS NULL THEN
            RAISE EXCEPTION 'a graph call needs a compiled graph and its sealed document'
                USING ERRCODE = 'CR004';
        END IF;
        SELECT s.run_id INTO v_child FROM cryo.submit_script(
            v_q.org, v_q.project, coalesce(p_filename, 'graph.json'), NULL, p_source, p_input,
            NULL, '{graph}', p_workflow, p_parent_run_id => p_run_id, p_graph => p_graph) s;
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'graph_called', p_family, p_name,
                              p_ordinal);
    END IF;
    PERFORM cryo._park_on(v_q, p_position, v_path, p_family, p_name, p_ordinal,
                          'awaiting-children', p_name, NULL, v_child);
    IF EXISTS (SELECT 1 FROM cryo.runs c WHERE c.id = v_child AND cryo.is_terminal(c.status)) THEN
        -- Only reachable from a marker whose child has ended: wake at once, answered.
        SELECT * INTO v_got FROM cryo._graph_call_memo(v_child);
        PERFORM cryo._wake(ARRAY[p_run_id], 'graph_call_completed', v_got.result, v_got.answer,
                           v_got.exit_code);
    END IF;
    RETURN QUERY SELECT true, v_child, NULL::text, NULL::integer, NULL::bytea, NULL::text;
END
$$;
COMMENT ON FUNCTION cryo.call_graph(text, uuid, integer, text, text, integer, text, text, bytea, bytea, jsonb, text) IS
    'A durable call of the claimed run that runs a graph (family graph.call: a stored graph named p_name; node.call: one node of type p_name) as its child and waits for it. The first reach submits the child graph run (p_graph the compiled structure, p_source its sealed document, p_input its sealed input), marks the call and parks the caller until the child ends; returns (parked true, child id, ...). A recorded call returns (false, child id, status, exit code, sealed output as {"answer": v} or NULL when the child did not succeed, error). Raises CR002 for a stale claim, CR004 for a bad family, identity or missing graph, CR009 for a disagreeing path.';
