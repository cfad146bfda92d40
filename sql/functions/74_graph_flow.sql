-- Graph control flow beyond edges (issue 39 item 7): loops with a bound, early stop, and
-- result caching. Decisions over expressions happen in the driver's turn (graph_plan
-- calls cryo._graph_flow first in each round), over the scope the driver unseals, and
-- every node row changes through the node transitions (12_node_transitions.sql).
--
-- A loop node ({"loop": {"while" | "until": expr, "max_iterations": n}}) runs its body
-- (the node itself: a job, or a workflow node's child graph) as one instance per
-- iteration: item k is iteration k. An iteration that succeeds leaves the node running
-- (cryo._instance_ended); the next round reads its output (nodes.<id>.output is the last
-- ended iteration's) and opens iteration k + 1 or ends the node with that output. An
-- iteration once ended is a row that never runs again, so a replayed turn (a driver that
-- died, a rolled-back transaction) re-runs no ended iteration.
--
-- A node's stop_if (an expression) is decided once, in the round after the node
-- succeeded: when it holds, every node that has not started is skipped with the reason,
-- and the run ends succeeded once what was already running ends.
--
-- A node's cache ({"key": template, "ttl": seconds}): the driver renders the key with
-- the node's config, digests it under the org's key, and asks cryo.graph_cache_take
-- before starting an instance. An entry younger than the ttl ends the instance at once
-- with the stored (sealed) output, marked cached; otherwise the instance remembers the
-- key, and cryo.graph_record_item stores its output there when it succeeds. Entries are
-- per project and per trust: an untrusted run reads and writes only untrusted entries.

-- Whether a round has a flow decision to make: a succeeded node whose stop_if is not yet
-- decided, or a loop under way. Most runs have neither, and two probes of partial
-- indexes empty for them cost a fraction of opening cryo._graph_flow's loops (which
-- graph_plan calls only when this says so).
CREATE OR REPLACE FUNCTION cryo._graph_flow_due(p_run_id text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM cryo.node_states n
                    WHERE n.run_id = p_run_id AND n.def ? 'stop_if' AND n.status = 'succeeded'
                      AND NOT n.stop_checked)
        OR EXISTS (SELECT 1 FROM cryo.node_states n
                    WHERE n.run_id = p_run_id AND n.def ? 'loop'
                      AND cryo._node_status_in(n.status, 'under way'))
$$;

-- One round's flow decisions for a driven graph run: stop_if of the nodes that
-- succeeded since, and the loops whose last iteration ended. Returns the scope with the
-- status of each loop it ended (when an expression reads it), or NULL when it changed
-- nothing.
CREATE OR REPLACE FUNCTION cryo._graph_flow(p_q cryo.queue, p_scope jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_node cryo.node_states;
    v_last cryo.node_instances;
    v_changed boolean := false;
    v_loop jsonb;
    v_scope jsonb;
    v_again boolean;
    v_max integer;
BEGIN
    FOR v_node IN SELECT * FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.def ? 'stop_if' AND n.status = 'succeeded'
                     AND NOT n.stop_checked
                   ORDER BY n.ord LOOP
        PERFORM cryo._node_stop_checked(p_q.run_id, v_node.node_id);
        CONTINUE WHEN cryo._graph_failing(p_q.run_id) OR NOT cryo._truthy(cryo._eval(
            v_node.def -> 'stop_if', p_scope || jsonb_build_object('node', jsonb_build_object(
                'id', v_node.node_id))));
        PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'graph_stopped', 'node',
                              v_node.node_id, 0);
        PERFORM cryo._nodes_skip_unstarted(p_q, 'stopped early: the stop_if of '
                                                || v_node.node_id || ' held');
        v_changed := true;
    END LOOP;
    FOR v_node IN SELECT * FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.def ? 'loop'
                     AND cryo._node_status_in(n.status, 'under way')
                   ORDER BY n.ord LOOP
        SELECT * INTO v_last FROM cryo.node_instances i
         WHERE i.run_id = p_q.run_id AND i.node_id = v_node.node_id
         ORDER BY i.item DESC LIMIT 1;
        -- (A failed iteration ended its node; one under way is not decided yet.)
        CONTINUE WHEN v_last.item IS NULL OR NOT cryo._node_status_in(v_last.status, 'done');
        v_loop := v_node.def -> 'loop';
        v_max := (v_loop ->> 'max_iterations')::integer;
        v_scope := p_scope || jsonb_build_object('node', jsonb_build_object(
            'id', v_node.node_id, 'iteration', v_last.item));
        v_again := cryo._truthy(cryo._eval(coalesce(v_loop -> 'while', v_loop -> 'until'), v_scope));
        IF v_loop ? 'until' THEN
            v_again := NOT v_again;
        END IF;
        v_changed := true;
        IF v_again AND v_last.item + 1 < v_max THEN
            PERFORM cryo._instance_open(p_q, v_node.node_id, v_last.item + 1);
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_iteration', 'node',
                                  v_node.node_id, v_last.item + 1);
            CONTINUE;
        ELSIF v_again THEN
            PERFORM cryo._node_end(p_q.run_id, v_node.node_id, 'failed',
                format('loop reached max_iterations (%s) and its condition still asked for more',
                       v_max));
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_failed', 'node',
                                  v_node.node_id, v_last.item);
        ELSE
            PERFORM cryo._node_end(p_q.run_id, v_node.node_id, 'succeeded', NULL, v_last.output,
                                   v_last.output_clear);
            PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_completed', 'node',
                                  v_node.node_id, v_last.item, v_last.attempt, v_last.output);
        END IF;
        IF p_scope -> 'nodes' ? v_node.node_id THEN  -- an expression after it reads it
            p_scope := jsonb_set(p_scope, ARRAY['nodes', v_node.node_id, 'status'],
                                 to_jsonb(CASE WHEN v_again THEN 'failed' ELSE 'succeeded' END));
        END IF;
    END LOOP;
    RETURN CASE WHEN v_changed THEN p_scope END;
END
$$;

-- The trust a run's cache entries have: an untrusted run's are its own kind.
CREATE OR REPLACE FUNCTION cryo._graph_cache_trust(p_run_id text)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT cryo._run_untrusted(p_run_id)
$$;

-- Before an instance of a node with a cache starts: its entry, when one younger than
-- p_ttl seconds is stored under p_key for the run's project and trust, ends the instance
-- at once with that output (marked cached; history node_cached when it ends the node).
-- Otherwise the instance keeps the key, and its output is stored there if it succeeds.
CREATE OR REPLACE FUNCTION cryo.graph_cache_take(
    p_run_id text, p_token uuid, p_node text, p_item integer, p_key bytea, p_ttl double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_entry cryo.graph_cache;
BEGIN
    IF p_key IS NULL OR length(p_key) <> 32 OR p_ttl IS NULL OR NOT p_ttl > 0 THEN
        RAISE EXCEPTION 'a cache key is 32 bytes and a ttl more than 0 seconds' USING ERRCODE = 'CR004';
    END IF;
    SELECT * INTO v_entry FROM cryo.graph_cache c
     WHERE c.org = v_q.org AND c.project = v_q.project
       AND c.untrusted = cryo._graph_cache_trust(p_run_id) AND c.key_hash = p_key
       AND c.stored_at > cryo.now() - make_interval(secs => p_ttl);
    IF NOT FOUND THEN
        PERFORM cryo._instance_cache(p_run_id, p_node, p_item, p_key, false);
        RETURN false;
    END IF;
    PERFORM cryo._instance_cache(p_run_id, p_node, p_item, NULL, true);
    PERFORM cryo._instance_ended(p_run_id, v_q.org, v_q.project, p_node, p_item, 'succeeded',
                                 v_entry.value, NULL, NULL, v_entry.value_clear, false,
                                 'node_cached');
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.graph_cache_take(text, uuid, text, integer, bytea, double precision) IS
    'Before an instance of a node with a cache starts: when the run''s project holds an entry under p_key (a 32-byte keyed digest of the rendered key) for the run''s trust, stored less than p_ttl seconds ago, ends the instance succeeded with its output, marked cached, and returns true; else keeps the key on the instance (its output is stored there when it succeeds) and returns false. Raises CR002 for a stale token, CR004 for a bad key or ttl, CR005 for an instance never started.';

-- An instance that succeeded stores its output under its cache key, if it has one (its
-- cache missed when it started), for its run's project and trust.
CREATE OR REPLACE FUNCTION cryo._graph_cache_keep(p_run_id text, p_node text, p_item integer,
                                                  p_output bytea, p_output_clear jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cryo.graph_cache (org, project, untrusted, key_hash, value, value_clear,
                                  stored_at, run_id, node_id)
    SELECT i.org, i.project, cryo._graph_cache_trust(p_run_id), i.cache_key, p_output,
           CASE WHEN p_output IS NULL THEN p_output_clear END, cryo.now(), p_run_id, p_node
      FROM cryo.node_instances i
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item
       AND i.cache_key IS NOT NULL
    ON CONFLICT (org, project, untrusted, key_hash) DO UPDATE
       SET value = excluded.value, value_clear = excluded.value_clear,
           stored_at = excluded.stored_at, run_id = excluded.run_id, node_id = excluded.node_id;
END
$$;
