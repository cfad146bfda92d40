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
-- This file holds how a driver takes a run and what it reads (graph_state), and the
-- constant state nodes run in place; planning, starting and settling are in
-- 75_graphs.sql. The writes go through the node transitions (12_node_transitions.sql),
-- the expressions are 15_expressions.sql's; approvals, reruns and reads of nodes are in
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
               input bytea, input_clear jsonb, graph jsonb, more boolean)
LANGUAGE plpgsql
-- Its queries are keyed: one generic plan. (With custom plans the read by the arrays'
-- ids was planned again on every call, about 0.2 ms a turn.)
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_ids text[];
    v_tokens uuid[];
    v_more boolean;
BEGIN
    -- Two statements, not one join: _drive's queries see runs committed after this
    -- statement's snapshot was taken, and a join under the older snapshot would drop a
    -- just-submitted run while its claim still committed (a run held by no driver).
    SELECT array_agg(d.run_id), array_agg(d.claim_token) INTO v_ids, v_tokens
      FROM cryo._drive(p_driver, p_limit) d;
    -- Whether others still wait: the driver wakes another at once (the turns go on side
    -- by side) and looks again after its own, without asking in a round trip of its own.
    v_more := v_ids IS NOT NULL AND cryo.graph_runs_waiting();
    -- Without p_documents the document and structure stay in the table: a driver that
    -- kept them from an earlier turn would otherwise take both across on every turn, a
    -- cost that grows with the graph (about 1 ms a turn at 400 nodes, 10 at 5,000).
    RETURN QUERY
        SELECT d.run_id, d.claim_token, r.org, r.project,
               CASE WHEN p_documents THEN r.source END, r.input, r.input_clear,
               CASE WHEN p_documents THEN r.graph END, v_more
          FROM unnest(v_ids, v_tokens) AS d(run_id, claim_token)
          -- A probe by key per run taken (OFFSET 0: as a plain join, a young table's
          -- generic plan hashed a scan of every run in it).
          CROSS JOIN LATERAL (SELECT * FROM cryo.runs x WHERE x.id = d.run_id OFFSET 0) r;
END
$$;
COMMENT ON FUNCTION cryo.drive_graphs(text, integer, boolean) IS
    'Takes up to p_limit graph runs needing a step forward, for a server driver, with a claim token each; returns each run''s input and, unless p_documents is false (a driver that keeps documents reads them with cryo.read_graph when it has not), its sealed document and clear structure, and (more) whether other graph runs were still pending once these were taken. Settle each with graph_settle in the same transaction. Raises nothing of its own.';

-- Whether the scope a driver sent holds what a node's expressions read (p_node '$output':
-- the graph's output expression): a scope without `$for` is whole; one with it holds the
-- entries the nodes it names read (cryopg/graphs/driver.py sent_scope), so a planning
-- round costs what it decides, not the number of nodes that have ended.
CREATE OR REPLACE FUNCTION cryo._graph_scope_covers(p_scope jsonb, p_node text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT NOT p_scope ? '$for' OR (p_scope -> '$for') ? p_node
$$;

-- The most items a fan_out may have: the deployment's CRYOPG_GRAPH_FAN_OUT_MAX, which the
-- server sets on its sessions as cryo.graph_fan_out_max (a DBA may set it on the database
-- too), else 10,000. A list the submitted input holds past it is refused at submit (the
-- server's 400, fan_out_too_large: CR210); one an expression gives at run time past it
-- fails its node with the reason.
CREATE OR REPLACE FUNCTION cryo._graph_fan_out_max()
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('cryo.graph_fan_out_max', true), '')::integer, 10000)
$$;

-- How many instances one planning call starts before the turn yields (a slice of a
-- large fan-out; cryo.graph_slice_size, else 200): a turn holds its driver for a bounded
-- time, and a cancel or another run's turn waits for one slice at most.
CREATE OR REPLACE FUNCTION cryo._graph_slice()
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT greatest(coalesce(nullif(current_setting('cryo.graph_slice_size', true), '')::integer,
                             200), 1)
$$;

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
