-- The graph tier's interpreter. A graph run's position is its node state: node_states
-- (one row per node) and node_instances (one per started instance: the node itself, or one
-- per fan-out item). Its decisions -- which nodes are ready, whether an `if` holds, what
-- a fan-out iterates, which concurrency group a node takes, when a node has failed for
-- good, when the run is over -- are made here, over a scope the server unseals and passes
-- in (SQL never holds a key). What needs a key or a process the server does in the same
-- transaction: it seals state values and node outputs, and turns agent-bound nodes into
-- child runs through cryo.graph_start_job.
--
-- A graph run needing a step forward has a pending queue row with required_caps
-- '{graph}'. A server driver takes it with cryo.drive_graphs (FOR UPDATE SKIP LOCKED,
-- inside the driver's transaction), plans and records until nothing more is ready, and
-- settles it (parked until something it waits on happens, or finished) before commit. A
-- driver that dies rolls its transaction back and the run is pending again: any replica
-- can advance any run, none can advance one twice, and no ownership lease is needed.
--
-- The writes go through the node transitions (12_node_transitions.sql) and the
-- expressions are 15_expressions.sql's; approvals, reruns and reads of nodes are in
-- 76_graph_operators.sql and 77_graph_reads.sql.

-- The key a node instance hands to the outside world: the same across retries, replay
-- and re-dispatch, distinct per node and per fan-out item.
-- (PL/pgSQL: a SQL function that is not inlined is planned again on every call.)
CREATE OR REPLACE FUNCTION cryo._graph_key(p_run_id text, p_node text, p_item integer, p_fan_out boolean)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN left(encode(sha256(convert_to(p_run_id || '/node/' || p_node
                                         || CASE WHEN p_fan_out THEN '/' || p_item ELSE '' END,
                                         'UTF8')), 'hex'), 32);
END
$$;

-- Whether any graph run waits for a driver. A driver that has just taken one asks this
-- before it looks again (and wakes another): a lone chain's turn then costs one look,
-- not three. It takes no lock: a run another driver is taking right now still counts,
-- which costs at most one look that finds nothing.
-- (PL/pgSQL, so its plan is kept for the session: as SQL it was planned on each call.)
CREATE OR REPLACE FUNCTION cryo.graph_runs_waiting()
RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM cryo.queue q
                    WHERE q.state = 'pending' AND q.required_caps = '{graph}');
END
$$;
COMMENT ON FUNCTION cryo.graph_runs_waiting() IS
    'Returns whether a graph run is pending for a driver (cryo.drive_graphs would hand one out, unless another driver takes it first). Raises nothing.';

-- A driver takes graph runs needing a step forward. Inside the caller's transaction the
-- rows stay locked; the caller must settle each (cryo.graph_settle) before committing.
CREATE OR REPLACE FUNCTION cryo.drive_graphs(p_driver text, p_limit integer DEFAULT 1,
                                             p_documents boolean DEFAULT true)
RETURNS TABLE (run_id text, claim_token uuid, org text, project text, source bytea,
               input bytea, input_clear jsonb, graph jsonb)
LANGUAGE plpgsql
-- Its queries are keyed: one generic plan. (With custom plans the read by the arrays'
-- ids was planned again on every call, about 0.2 ms a turn.)
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_ids text[];
    v_tokens uuid[];
BEGIN
    -- Two statements, not one join: _drive's queries see runs committed after this
    -- statement's snapshot was taken, and a join under the older snapshot would drop a
    -- just-submitted run while its claim still committed (a run held by no driver).
    SELECT array_agg(d.run_id), array_agg(d.claim_token) INTO v_ids, v_tokens
      FROM cryo._drive(p_driver, p_limit) d;
    -- Without p_documents the document and structure stay in the table: a driver that
    -- kept them from an earlier turn would otherwise take both across on every turn, a
    -- cost that grows with the graph (about 1 ms a turn at 400 nodes, 10 at 5,000).
    RETURN QUERY
        SELECT d.run_id, d.claim_token, r.org, r.project,
               CASE WHEN p_documents THEN r.source END, r.input, r.input_clear,
               CASE WHEN p_documents THEN r.graph END
          FROM unnest(v_ids, v_tokens) AS d(run_id, claim_token)
          -- A probe by key per run taken (OFFSET 0: as a plain join, a young table's
          -- generic plan hashed a scan of every run in it).
          CROSS JOIN LATERAL (SELECT * FROM cryo.runs x WHERE x.id = d.run_id OFFSET 0) r;
END
$$;
COMMENT ON FUNCTION cryo.drive_graphs(text, integer, boolean) IS
    'Takes up to p_limit graph runs needing a step forward, for a server driver, with a claim token each; returns each run''s input and, unless p_documents is false (a driver that keeps documents reads them with cryo.read_graph when it has not), its sealed document and clear structure. Settle each with graph_settle in the same transaction. Raises nothing of its own.';

-- Everything the driver needs to build a run's scope and see what happened: each node
-- and instance with its sealed output, the state of the child run doing it, and for a
-- waiting instance whether what it waits for has come.
CREATE OR REPLACE FUNCTION cryo.graph_state(p_run_id text, p_token uuid,
                                            p_nodes text[] DEFAULT NULL,
                                            p_started boolean DEFAULT false)
RETURNS TABLE (node_id text, type text, node_status text, items integer, item integer,
               item_status text, attempt integer, output bytea, error text,
               job_run_id text, job_status text, job_finished boolean, job_exit_code integer,
               job_error text, wait_kind text, wait_name text, due boolean, signal_id bigint,
               event_id bigint, started_at timestamptz, output_clear jsonb)
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_untrusted boolean := cryo._run_untrusted(p_run_id);
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    -- Two keyed parts, whatever the planner's statistics say about a brand-new run: the
    -- nodes asked for with all their instances (by primary key), and the instances still
    -- in flight of the others (through a partial index). LATERAL keeps each instance
    -- lookup on (run_id, node_id), never a scan of the run's instances per node; OFFSET 0
    -- keeps each a probe (pulled up into plain joins, the generic plans hashed or merged
    -- in every node and instance of the run, and a turn grew with the graph).
    RETURN QUERY
        WITH picked AS (
            SELECT n.*, true AS whole FROM cryo.node_states n
             WHERE p_nodes IS NULL AND n.run_id = p_run_id
            UNION ALL
            SELECT n.*, true FROM unnest(p_nodes) AS k(id)
             CROSS JOIN LATERAL (SELECT * FROM cryo.node_states m
                                  WHERE m.run_id = p_run_id AND m.node_id = k.id
                                    AND NOT (p_started AND m.status = 'pending') OFFSET 0) n
            UNION ALL
            SELECT n.*, false FROM (SELECT DISTINCT l.node_id FROM cryo.node_instances l
                                     WHERE p_nodes IS NOT NULL AND l.run_id = p_run_id
                                       AND cryo._node_status_in(l.status, 'instance live')
                                       AND NOT (l.node_id = ANY (p_nodes))) k
             CROSS JOIN LATERAL (SELECT * FROM cryo.node_states m
                                  WHERE m.run_id = p_run_id AND m.node_id = k.node_id OFFSET 0) n
        )
        SELECT n.node_id, n.type, n.status, n.items, i.item, i.status, i.attempt,
               coalesce(i.output, CASE WHEN i.item IS NULL THEN n.output END), coalesce(i.error, n.error),
               i.job_run_id, j.status, cryo.is_terminal(j.status), j.exit_code, j.error,
               i.wait_kind, i.wait_name, i.due_at <= cryo.now(),
               (SELECT s.id FROM cryo.signals s
                 WHERE i.wait_kind = 'signal' AND i.status = 'waiting' AND s.run_id = p_run_id
                   AND s.name = i.wait_name AND s.consumed_at IS NULL ORDER BY s.id LIMIT 1),
               (SELECT e.id FROM cryo.events e
                 WHERE i.wait_kind = 'event' AND i.status = 'waiting' AND e.org = n.org
                   AND e.project = n.project AND e.name = i.wait_name
                   AND e.created_at >= i.started_at
                   -- the namespaces the run hears (cryo._publish_event)
                   AND CASE WHEN v_untrusted THEN e.untrusted OR e.published ELSE NOT e.untrusted END
                 ORDER BY e.id LIMIT 1),
               i.started_at,
               coalesce(i.output_clear, CASE WHEN i.item IS NULL THEN n.output_clear END)
          FROM picked n
          LEFT JOIN LATERAL (
              SELECT x.* FROM cryo.node_instances x
               WHERE x.run_id = p_run_id AND x.node_id = n.node_id
                 AND (n.whole OR cryo._node_status_in(x.status, 'instance live'))
              OFFSET 0) i ON true
          LEFT JOIN LATERAL (SELECT c.status, c.exit_code, c.error FROM cryo.runs c
                              WHERE c.id = i.job_run_id OFFSET 0) j ON true
         ORDER BY n.node_id, i.item;
END
$$;
COMMENT ON FUNCTION cryo.graph_state(text, uuid, text[], boolean) IS
    'Returns the nodes of the driven graph run with their instances: status, attempt, sealed output (or output_clear, for one holding no user data), the child run doing it and how it ended, and for a wait whether it is due and which signal or event answers it. With p_nodes, only those nodes and the instances still in flight of the others (a turn reads what it needs, by key); with p_started as well, only those of the listed nodes that have left pending (a pending node has no output and one status). Raises CR002 for a stale token.';

-- The signal a waiting instance takes: marked consumed, returned for the driver to open.
CREATE OR REPLACE FUNCTION cryo.graph_take_signal(p_run_id text, p_token uuid, p_signal_id bigint,
                                                  p_node text, p_item integer)
RETURNS TABLE (payload bytea, payload_clear jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY
        UPDATE cryo.signals s SET consumed_at = cryo.now(),
                                  consumed_path = 'node/' || p_node || '/' || p_item
         WHERE s.id = p_signal_id AND s.run_id = p_run_id AND s.consumed_at IS NULL
        RETURNING s.payload, s.payload_clear;
END
$$;
COMMENT ON FUNCTION cryo.graph_take_signal(text, uuid, bigint, text, integer) IS
    'Consumes a queued signal for a waiting node instance of the driven graph run; returns its payload (sealed, or clear from SQL), no row when it was taken already. Raises CR002 for a stale token.';

-- The calls, each set or delete that passes the checks its write makes marked
-- `"checked": true` (see _graph_set_calls).
CREATE OR REPLACE FUNCTION cryo._graph_checked_calls(p_run_id text, p_calls jsonb)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_checked text[] := '{}';
    v_c record;
BEGIN
    BEGIN
        FOR v_c IN SELECT c.key AS node_id, c.value AS call FROM jsonb_each(p_calls) c
                    WHERE c.value ->> 'op' IN ('set', 'delete') LOOP
            PERFORM cryo._graph_check_call(p_run_id, v_c.call);
            v_checked := v_checked || v_c.node_id;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE NOT LIKE 'CR%' THEN
            RAISE;
        END IF;
        v_checked := '{}';
        FOR v_c IN SELECT c.key AS node_id, c.value AS call FROM jsonb_each(p_calls) c
                    WHERE c.value ->> 'op' IN ('set', 'delete') LOOP
            BEGIN
                PERFORM cryo._graph_check_call(p_run_id, v_c.call);
                v_checked := v_checked || v_c.node_id;
            EXCEPTION WHEN OTHERS THEN
                IF SQLSTATE NOT LIKE 'CR%' THEN
                    RAISE;
                END IF;
            END;
        END LOOP;
    END;
    RETURN (SELECT coalesce(jsonb_object_agg(c.key, (c.value - 'checked')
                                || CASE WHEN c.key = ANY (v_checked)
                                        THEN '{"checked": true}'::jsonb ELSE '{}'::jsonb END), '{}')
              FROM jsonb_each(p_calls) c);
END
$$;

-- The checks a state write makes before it writes (cryo._state_set, _state_delete), for a
-- constant call; raises what they raise.
CREATE OR REPLACE FUNCTION cryo._graph_check_call(p_run_id text, p_call jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._state_key(p_call ->> 'key', true);
    PERFORM cryo.state_scope(cryo._run_org(p_run_id), cryo._run_project(p_run_id), p_run_id,
                             p_call ->> 'entity');
    IF p_call ->> 'op' = 'set' AND p_call ->> 'value' IS NULL THEN
        RAISE EXCEPTION 'a state value cannot be NULL (use state_delete)' USING ERRCODE = 'CR004';
    END IF;
END
$$;

-- Runs one instance of a constant state node through the same functions a script's
-- state verbs use (one home for each rule: versions, history, memos, races), and
-- returns its output, which holds no user data: set {version}, delete {deleted}, add
-- {claimed}, cas {swapped}. The memo name is the one the driver's Python path uses.
CREATE OR REPLACE FUNCTION cryo._graph_state_call(p_q cryo.queue, p_node cryo.node_states,
                                                  p_item integer, p_attempt integer)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_call jsonb := p_node.state_call;
    v_entity text := v_call ->> 'entity';
    v_key text := v_call ->> 'key';
    v_name text := 'node:' || p_node.node_id || '#' || p_item || '#' || p_attempt;
BEGIN
    CASE v_call ->> 'op'
    WHEN 'set' THEN
        RETURN jsonb_build_object('version', cryo._state_set(p_q, v_entity, v_key,
                                                             p_node.state_value));
    WHEN 'delete' THEN
        RETURN jsonb_build_object('deleted', cryo._state_delete(p_q, v_entity, v_key));
    WHEN 'add' THEN
        RETURN (SELECT jsonb_build_object('claimed', a.claimed)
                  FROM cryo.state_add(p_q.run_id, p_q.claim_token, v_entity, v_key,
                                      p_node.state_value, NULL, v_name, 0) a);
    WHEN 'cas' THEN
        RETURN (SELECT jsonb_build_object('swapped', a.swapped)
                  FROM cryo.state_cas(p_q.run_id, p_q.claim_token, v_entity, v_key,
                                      p_node.state_value, (v_call ->> 'expected')::bigint,
                                      NULL, v_name, 0) a);
    ELSE
        RAISE EXCEPTION 'a state node the database runs is set, delete, add or cas, not %',
            v_call ->> 'op' USING ERRCODE = 'CR004';
    END CASE;
END
$$;

-- A ready constant state node with no concurrency group, run and ended in one step: the
-- state call, then the instance and the node written once each and one history event,
-- as the general path (running, an instance started, graph_record_item) would leave them.
-- A call checked when it was handed over (cryo._graph_set_calls) runs without a
-- subtransaction: only a lost claim can fail it, and that ends the turn anyway.
-- Returns its output; NULL when the call failed (undone), and the node then takes the
-- general path, whose record gives it its retries and its one-line reason.
CREATE OR REPLACE FUNCTION cryo._graph_state_now(p_q cryo.queue, p_node cryo.node_states)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_out jsonb;
BEGIN
    IF (p_node.state_call ->> 'checked') = 'true' THEN
        v_out := cryo._graph_state_call(p_q, p_node, 0, 1);
    ELSE
        BEGIN
            v_out := cryo._graph_state_call(p_q, p_node, 0, 1);
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE NOT LIKE 'CR%' OR SQLSTATE = 'CR002' THEN
                RAISE;
            END IF;
            RETURN NULL;
        END;
    END IF;
    PERFORM cryo._node_ran_now(p_q, p_node, v_out);
    RETURN v_out;
END
$$;

-- The order the schedule runs a fresh run's nodes in when none is skipped or fails: by
-- waves (nodes ready together; a node's wave is the longest path to it from a root),
-- each wave in document order -- as _graph_schedule's loop takes them. Kahn's algorithm
-- over the run's edges held in arrays indexed by the nodes' ord (1..n), so it costs the
-- graph's nodes and edges once, whatever its shape. NULL when the ords are not 1..n.
CREATE OR REPLACE FUNCTION cryo._graph_wave_order(p_run_id text)
RETURNS text[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_ids text[];     -- node id by ord
    v_open int[];     -- predecessors not yet run, by ord
    v_n int;
    v_src int[];      -- edges (from, to) as ords, sorted by from
    v_dst int[];
    v_start int[];    -- v_dst[v_start[u] .. v_end[u]]: the nodes after u
    v_end int[];
    v_front int[];
    v_next int[];
    v_order text[] := '{}';
    v_dense boolean;
    u int;
    v int;
    i int;
BEGIN
    SELECT array_agg(n.node_id ORDER BY n.ord), array_agg(n.open_deps ORDER BY n.ord),
           count(*), bool_and(n.ord IS NOT NULL) AND max(n.ord) = count(*) AND min(n.ord) = 1
      INTO v_ids, v_open, v_n, v_dense
      FROM cryo.node_states n WHERE n.run_id = p_run_id;
    IF v_n = 0 OR NOT coalesce(v_dense, false) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.ord ORDER BY n.ord, m.ord), array_agg(m.ord ORDER BY n.ord, m.ord)
      INTO v_src, v_dst
      FROM cryo.node_states n
     CROSS JOIN unnest(n.dependents) AS d(id)
      JOIN cryo.node_states m ON m.run_id = p_run_id AND m.node_id = d.id
     WHERE n.run_id = p_run_id;
    v_start := array_fill(NULL::int, ARRAY[v_n]);
    v_end := array_fill(NULL::int, ARRAY[v_n]);
    FOR i IN 1 .. coalesce(cardinality(v_src), 0) LOOP
        u := v_src[i];
        IF v_start[u] IS NULL THEN
            v_start[u] := i;
        END IF;
        v_end[u] := i;
    END LOOP;
    v_front := '{}';
    FOR u IN 1 .. v_n LOOP
        IF v_open[u] = 0 THEN
            v_front := v_front || u;
        END IF;
    END LOOP;
    WHILE cardinality(v_front) > 0 LOOP
        v_next := '{}';
        FOREACH u IN ARRAY v_front LOOP
            v_order := v_order || v_ids[u];
            FOR i IN coalesce(v_start[u], 1) .. coalesce(v_end[u], 0) LOOP
                v := v_dst[i];
                v_open[v] := v_open[v] - 1;
                IF v_open[v] = 0 THEN
                    v_next := v_next || v;
                END IF;
            END LOOP;
        END LOOP;
        -- Each wave in document order (a chain's waves are one node: nothing to sort).
        v_front := CASE WHEN cardinality(v_next) > 1
                        THEN ARRAY(SELECT k FROM unnest(v_next) k ORDER BY k) ELSE v_next END;
    END LOOP;
    RETURN v_order;
END
$$;

-- A fresh graph run whose every node is a constant set or delete in p_calls, checked
-- (cryo._graph_checked_calls), with no `if`, fan-out, concurrency or failure branch:
-- nothing can be skipped or fail, so every node runs, in the order the schedule would
-- take them (cryo._graph_wave_order), each call through the 70_state.sql functions (all
-- sets in one cryo._state_set_cells write when no two nodes touch one cell), and the rows
-- they leave are written once for all of them: the same instance, node row and one
-- node_completed event each that cryo._graph_state_now writes for one (keep the two
-- alike). A node's cost stays flat at any size: nothing is read again per node. Returns
-- whether it ran them; when it did not, graph_plan runs them one at a time as ever.
CREATE OR REPLACE FUNCTION cryo._graph_state_batch(p_q cryo.queue, p_calls jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run_id text := p_q.run_id;
    v_order text[];
    v_outs jsonb[] := '{}';
    v_node cryo.node_states;
    v_call jsonb;
    v_calls jsonb[];
    v_distinct boolean;
    v_set_at integer[];
    v_entities text[];
    v_keys text[];
    v_values bytea[];
    v_versions bigint[];
BEGIN
    IF NOT coalesce((SELECT bool_and(coalesce(
                   n.status = 'pending' AND n.type = 'state'
                   AND (p_calls -> n.node_id ->> 'checked') = 'true'
                   AND p_calls -> n.node_id ->> 'op' IN ('set', 'delete')
                   AND NOT (n.def ? 'if' OR n.def ? 'fan_out' OR n.def ? 'concurrency')
                   AND NOT coalesce((n.def ->> 'on_failure')::boolean, false), false))
              FROM cryo.node_states n WHERE n.run_id = v_run_id), false) THEN
        RETURN false;
    END IF;
    v_order := cryo._graph_wave_order(v_run_id);
    IF v_order IS NULL THEN
        RETURN false;
    END IF;
    SELECT array_agg(x.c ORDER BY o.i),
           count(DISTINCT (cryo.state_scope(p_q.org, p_q.project, v_run_id, x.c ->> 'entity'),
                           x.c ->> 'key')) = count(*)
      INTO v_calls, v_distinct
      FROM unnest(v_order) WITH ORDINALITY AS o(id, i), LATERAL (SELECT p_calls -> o.id) x(c);
    IF v_distinct THEN
        -- No two nodes touch one cell, so none sees another's write and the order within
        -- the run cannot matter: every set in one write, each delete as its own call.
        SELECT array_agg(u.i ORDER BY u.i), array_agg(u.c ->> 'entity' ORDER BY u.i),
               array_agg(u.c ->> 'key' ORDER BY u.i),
               array_agg(decode(u.c ->> 'value', 'hex') ORDER BY u.i)
          INTO v_set_at, v_entities, v_keys, v_values
          FROM unnest(v_calls) WITH ORDINALITY AS u(c, i) WHERE u.c ->> 'op' = 'set';
        IF v_set_at IS NOT NULL THEN
            v_versions := cryo._state_set_cells(p_q, v_entities, v_keys, v_values);
        END IF;
        v_outs := array_fill(NULL::jsonb, ARRAY[cardinality(v_calls)]);
        FOR i IN 1 .. coalesce(cardinality(v_set_at), 0) LOOP
            v_outs[v_set_at[i]] := jsonb_build_object('version', v_versions[i]);
        END LOOP;
        FOR i IN 1 .. cardinality(v_calls) LOOP
            IF v_calls[i] ->> 'op' = 'delete' THEN
                v_outs[i] := jsonb_build_object('deleted', cryo._state_delete(
                    p_q, v_calls[i] ->> 'entity', v_calls[i] ->> 'key'));
            END IF;
        END LOOP;
    ELSE
        FOR v_node IN SELECT n.* FROM unnest(v_order) WITH ORDINALITY AS o(id, i)
                        JOIN cryo.node_states n ON n.run_id = v_run_id AND n.node_id = o.id
                       ORDER BY o.i LOOP
            -- The call as _graph_set_calls would have stored it on the node (written below).
            v_call := p_calls -> v_node.node_id;
            v_node.state_call := v_call - 'value';
            v_node.state_value := decode(v_call ->> 'value', 'hex');
            v_outs := v_outs || cryo._graph_state_call(p_q, v_node, 0, 1);
        END LOOP;
    END IF;
    PERFORM cryo._nodes_ran_now(p_q, v_order, v_outs, p_calls);
    RETURN true;
END
$$;

-- The run's default output (no output expression; the one place it is made): the
-- outputs of the nodes nothing depends on, by node id -- a fan-out's as the list of its
-- items' outputs -- and null for a node (or item) that did not end with one. An output
-- holding no user data is there in the clear; a sealed one as {"$sealed": hex}, for the
-- driver, which holds the key, to open in place (an output in the clear never has that
-- shape: it is a state node's). sealed says whether any is.
CREATE OR REPLACE FUNCTION cryo._graph_default_output(p_run_id text, OUT answer jsonb,
                                                      OUT sealed boolean)
RETURNS record
-- PL/pgSQL: its query is planned once a session, not on every call.
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT coalesce(jsonb_object_agg(n.node_id, CASE
               WHEN n.items IS NULL THEN CASE WHEN cryo._node_status_in(n.status, 'done')
                                              THEN cryo._graph_output(n.output, n.output_clear)
                                              ELSE 'null' END
               ELSE (SELECT coalesce(jsonb_agg(CASE WHEN cryo._node_status_in(i.status, 'done')
                                                    THEN cryo._graph_output(i.output, i.output_clear)
                                                    ELSE 'null' END ORDER BY g.k), '[]')
                       FROM generate_series(0, n.items - 1) AS g(k)
                       LEFT JOIN cryo.node_instances i
                              ON i.run_id = n.run_id AND i.node_id = n.node_id AND i.item = g.k)
               END), '{}')
      INTO answer
      FROM cryo.node_states n
     WHERE n.run_id = p_run_id AND cardinality(n.dependents) = 0;
    sealed := jsonb_path_exists(answer, 'lax $.**."$sealed"');
END
$$;

-- An output as the run's output carries it: in the clear, or sealed as {"$sealed": hex}.
CREATE OR REPLACE FUNCTION cryo._graph_output(p_sealed bytea, p_clear jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_sealed IS NOT NULL THEN jsonb_build_object('$sealed', encode(p_sealed, 'hex'))
                ELSE coalesce(p_clear, 'null') END
$$;

-- Whether a node of the run has failed for good (the run is failing); a node that failed
-- with continue_on_error does not count.
CREATE OR REPLACE FUNCTION cryo._graph_failing(p_run_id text)
RETURNS boolean
-- PL/pgSQL: its query is planned once a session, not on every call.
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.status = 'failed'
                      AND NOT n.tolerated);
END
$$;

-- Whether a node runs when the run is failing: always nodes, and the failure branch.
CREATE OR REPLACE FUNCTION cryo._graph_runs_on_failure(p_def jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((p_def ->> 'always')::boolean, false) OR coalesce((p_def ->> 'on_failure')::boolean, false)
$$;

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
BEGIN
    IF p_calls IS NOT NULL THEN
        PERFORM cryo._graph_set_calls(p_run_id, cryo._graph_checked_calls(p_run_id, p_calls));
    END IF;
    LOOP
        v_again := false;
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
            FOR v_start IN SELECT * FROM cryo._graph_start_instances(v_q, v_node, p_configs, p_scope) LOOP
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
        EXIT WHEN NOT v_again OR v_ran >= v_share;
    END LOOP;
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
            -- (Only an `if` and a fan-out read the node's scope.)
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
    p_q cryo.queue, p_node cryo.node_states, p_configs jsonb, p_scope jsonb)
RETURNS TABLE (item integer, attempt integer, config jsonb, item_value jsonb, idempotency_key text)
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_run_id text := p_q.run_id;
    v_node text := p_node.node_id;
    v_max integer := nullif(p_node.def ->> 'max_parallel', '')::integer;
    v_fan boolean := p_node.items IS NOT NULL;
    v_items jsonb;
    v_active integer;
    v_next integer;
    v_n integer;
    v_scope jsonb;
    v_inst cryo.node_instances;
    v_group text;
    v_holder text;
    v_path text;
BEGIN
    IF v_fan THEN
        v_items := cryo._eval(p_node.def -> 'fan_out', p_scope || jsonb_build_object(
            'node', jsonb_build_object('id', v_node)));
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
        v_path := 'node/' || v_node || '/' || v_n;
        v_scope := p_scope || jsonb_build_object('node', jsonb_build_object(
            'id', v_node, 'idempotency_key', cryo._graph_key(v_run_id, v_node, v_n, v_fan)));
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
            v_holder := cryo._group_holder(p_q.org, p_q.project, v_group);
            IF v_holder = v_run_id AND EXISTS (
                    SELECT 1 FROM cryo.leases l WHERE l.org = p_q.org AND l.project = p_q.project
                       AND l.grp = v_group AND l.holder_run_id = v_run_id
                       AND l.kind = 'admission') THEN
                NULL;  -- the run's own admission lease covers the instance
            ELSIF v_holder IS NOT NULL AND NOT EXISTS (
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
            IF v_holder IS NULL THEN
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
-- node's retry covers) schedules the instance again after its backoff, with a fresh
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
BEGIN
    RETURN cryo._instance_ended(p_run_id, v_q.org, v_q.project, p_node, p_item, p_outcome,
                                p_output, p_error, p_exit_code, p_output_clear);
END
$$;
COMMENT ON FUNCTION cryo.graph_record_item(text, uuid, text, integer, text, bytea, text, integer, jsonb) IS
    'Records that an instance of a node of the driven graph run ended (succeeded or failed, with its sealed output, or p_output_clear for one holding no user data), or schedules its retry; ends the node when all its instances have. Returns the instance''s status (succeeded, failed, retrying). Raises CR002 for a stale token, CR004 for a bad outcome, CR005 for an instance never started.';

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
        p_required_caps, p_workflow, p_parent_run_id => p_run_id, p_graph => p_graph) s;
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
    p_workdir text, p_graph jsonb, p_calls jsonb DEFAULT NULL)
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
                              p_policy, p_untrusted, NULL, p_workdir, p_graph) s;
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
COMMENT ON FUNCTION cryo.submit_graph(text, text, text, text, bytea, bytea, text, boolean, text, text, text, jsonb, jsonb) IS
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
