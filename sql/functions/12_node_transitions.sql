-- The node transitions layer: as 10_transitions.sql is for runs, these functions and no
-- others write a graph run's node rows (cryo.node_states, one per node, and
-- cryo.node_instances, one per started instance: the node itself or one per fan-out
-- item), and the status lists below are the only ones spelled out
-- (tests/sql/test_node_transitions.py holds both to it). Planning (75_graphs.sql) decides;
-- the operators' approve and reject (76_graph_operators.sql) answer; both write here.
--
-- A node:
--   _graph_init            (nothing)          -> pending, every node of a new run
--   _graph_set_calls       pending            -> pending, with its constant state call
--   _node_start            pending            -> running (an empty fan-out: succeeded)
--   _node_ran_now          pending            -> succeeded, run in the database at once
--   _nodes_ran_now         pending (all)      -> succeeded, a whole run of state nodes
--   _node_waits            running            -> waiting (no instance runs, one waits)
--   _node_end              pending | running | waiting -> succeeded | failed | skipped
--   _graph_skip            pending            -> skipped, with the reason
--   _nodes_skip_unstarted  pending (all)      -> skipped, as the run ends
--   _nodes_seed            pending            -> seeded | skipped | failed (a rerun)
--   _graph_cancel_nodes    live               -> cancelled
-- An instance:
--   _instance_open         (nothing)          -> ready
--   _instance_await_lease  ready              -> ready, waiting in its group's FIFO
--   _instance_run          ready | retrying   -> running
--   _instance_job          running            -> running, its child run named
--   _instance_wait         running            -> waiting (a timer, signal, event, approval)
--   _instance_answer       waiting            -> waiting, answered by an approver
--   _instance_ended        live               -> succeeded | failed | retrying; ends its node
--   _instance_reject       waiting            -> failed, turned down by an approver
--   _instance_cache        running            -> running, its cache key kept, or ended cached
--   _node_stop_checked     succeeded          -> succeeded, its stop_if decided
-- Ending a node (_graph_node_ended, once per node) lowers its dependents' count of open
-- predecessors: that count is what makes a node ready, so nothing ends a node but here.

-- -- the statuses ------------------------------------------------------------------------
-- Whether a node's (or an instance's) status is in one of the sets the engine reads them
-- by. SQL and immutable, and the set named by a constant: the planner inlines it into the
-- caller's query as `status = ANY ('{...}')`, so a partial index whose predicate lists
-- the same statuses still serves it.
CREATE OR REPLACE FUNCTION cryo._node_status_in(p_status text, p_set text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    -- (A searched CASE of constants: the planner does not inline `CASE p_set WHEN`, nor a
    -- cast of the CASE's text to text[], which is not immutable.)
    SELECT p_status = ANY (CASE
        -- a node: not yet ended; started and not ended; ended with its output; ended so
        -- that a rerun may start after it
        WHEN p_set = 'live' THEN '{pending,running,waiting}'::text[]
        WHEN p_set = 'under way' THEN '{running,waiting}'::text[]
        WHEN p_set = 'done' THEN '{succeeded,seeded}'::text[]
        WHEN p_set = 'ended well' THEN '{succeeded,skipped,seeded}'::text[]
        -- an instance: not yet ended; counted against max_parallel; with a deadline (a
        -- wait's timeout, a retry's backoff)
        WHEN p_set = 'instance live' THEN '{ready,running,waiting,retrying}'::text[]
        WHEN p_set = 'instance active' THEN '{running,waiting}'::text[]
        WHEN p_set = 'instance timed' THEN '{waiting,retrying}'::text[]
        END)
$$;

-- -- nodes -------------------------------------------------------------------------------

-- The node ids of a graph structure, in document order, with what each depends on.
CREATE OR REPLACE FUNCTION cryo._graph_node_defs(p_graph jsonb)
RETURNS TABLE (ord bigint, node_id text, type text, deps text[], def jsonb)
LANGUAGE sql IMMUTABLE AS $$
    SELECT n.ord, n.def ->> 'id', n.def ->> 'type',
           ARRAY(SELECT jsonb_array_elements_text(coalesce(n.def -> 'deps', '[]'))), n.def
      FROM jsonb_array_elements(p_graph -> 'nodes') WITH ORDINALITY AS n(def, ord)
$$;

-- Creates the node rows of a new graph run, every one pending.
CREATE OR REPLACE FUNCTION cryo._graph_init(p_run_id text, p_org text, p_project text, p_graph jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF jsonb_typeof(p_graph -> 'nodes') IS DISTINCT FROM 'array'
       OR jsonb_array_length(p_graph -> 'nodes') = 0 THEN
        RAISE EXCEPTION 'a graph needs at least one node' USING ERRCODE = 'CR004';
    END IF;
    -- Each node carries its definition, edges both ways and a count of predecessors
    -- still open, so a turn finds what is ready by key (V0017).
    WITH defs AS (
        SELECT d.ord, d.node_id, d.type, d.def, ARRAY(SELECT DISTINCT x FROM unnest(d.deps) x) AS deps
          FROM cryo._graph_node_defs(p_graph) d
    ), back AS (
        SELECT x.dep, array_agg(e.node_id ORDER BY e.ord) AS dependents
          FROM defs e, unnest(e.deps) AS x(dep) GROUP BY x.dep
    )
    INSERT INTO cryo.node_states (run_id, org, project, node_id, type, ord, def, deps,
                                  dependents, open_deps)
    SELECT p_run_id, p_org, p_project, d.node_id, d.type, d.ord, d.def, d.deps,
           coalesce(b.dependents, '{}'), cardinality(d.deps)
      FROM defs d LEFT JOIN back b ON b.dep = d.node_id;
END
$$;

-- Stores the constant state calls the driver handed over, checked
-- (cryo._graph_checked_calls), on their pending nodes: graph_plan runs those itself.
CREATE OR REPLACE FUNCTION cryo._graph_set_calls(p_run_id text, p_calls jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_states n
       SET state_call = c.call - 'value',
           state_value = CASE WHEN c.call ? 'value' THEN decode(c.call ->> 'value', 'hex') END
      FROM jsonb_each(p_calls) AS c(node_id, call)
     WHERE n.run_id = p_run_id AND n.node_id = c.node_id AND n.type = 'state'
       AND n.status = 'pending';
END
$$;

-- A node has ended (succeeded, failed, skipped, seeded): each node depending on it has
-- one open predecessor fewer. Called once per node, on the transition that ends it.
CREATE OR REPLACE FUNCTION cryo._graph_node_ended(p_run_id text, p_node text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_next text[] := (SELECT e.dependents FROM cryo.node_states e
                       WHERE e.run_id = p_run_id AND e.node_id = p_node);
    v_id text;
BEGIN
    -- One row by its whole primary key at a time: `node_id = ANY (...)` let a generic
    -- plan read every node of the run and filter.
    FOREACH v_id IN ARRAY coalesce(v_next, '{}') LOOP
        UPDATE cryo.node_states n SET open_deps = n.open_deps - 1
         WHERE n.run_id = p_run_id AND n.node_id = v_id;
    END LOOP;
END
$$;

-- A ready node starts: running, with its fan-out size (NULL: no fan-out). An empty
-- fan-out is done at once, with an empty list. Returns whether the node ended.
CREATE OR REPLACE FUNCTION cryo._node_start(p_q cryo.queue, p_node text, p_items integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_states n SET status = 'running', items = p_items, started_at = cryo.now()
     WHERE n.run_id = p_q.run_id AND n.node_id = p_node;
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_scheduled', 'node', p_node, 0);
    IF p_items = 0 THEN
        PERFORM cryo._node_end(p_q.run_id, p_node, 'succeeded', NULL);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- Ends a node: its status, error and (when it has no fan-out) output. A failure with
-- continue_on_error is tolerated: it does not fail the run. Ending a node a second time
-- (a fan-out's later item) rewrites the row but opens nothing again.
CREATE OR REPLACE FUNCTION cryo._node_end(
    p_run_id text, p_node text, p_status text, p_error text,
    p_output bytea DEFAULT NULL, p_output_clear jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_was text;
BEGIN
    UPDATE cryo.node_states n
       SET status = p_status, error = p_error, finished_at = cryo.now(),
           output = CASE WHEN n.items IS NULL THEN p_output END,
           output_clear = CASE WHEN n.items IS NULL THEN p_output_clear END,
           tolerated = p_status = 'failed'
                       AND coalesce((n.def ->> 'continue_on_error')::boolean, false)
      FROM (SELECT o.status FROM cryo.node_states o
             WHERE o.run_id = p_run_id AND o.node_id = p_node) was
     WHERE n.run_id = p_run_id AND n.node_id = p_node
    RETURNING was.status INTO v_was;
    IF cryo._node_status_in(v_was, 'live') THEN
        PERFORM cryo._graph_node_ended(p_run_id, p_node);  -- once, as it ends
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo._graph_skip(p_q cryo.queue, p_node text, p_why text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._node_end(p_q.run_id, p_node, 'skipped', p_why);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_skipped', 'node', p_node, 0);
END
$$;

-- A run that ends has no pending node: what never started is skipped, with the reason.
CREATE OR REPLACE FUNCTION cryo._nodes_skip_unstarted(p_q cryo.queue, p_why text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_node text;
BEGIN
    FOR v_node IN SELECT n.node_id FROM cryo.node_states n
                   WHERE n.run_id = p_q.run_id AND n.status = 'pending' ORDER BY n.ord LOOP
        PERFORM cryo._graph_skip(p_q, v_node, p_why);
    END LOOP;
END
$$;

-- A running node none of whose instances runs, and one of which waits (for a timer,
-- signal, event, approval or its lock), is waiting.
CREATE OR REPLACE FUNCTION cryo._node_waits(p_run_id text, p_node text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_states n SET status = 'waiting'
     WHERE n.run_id = p_run_id AND n.node_id = p_node AND n.status = 'running'
       AND NOT EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                          AND i.node_id = p_node AND i.status = 'running')
       AND EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                      AND i.node_id = p_node
                      AND (i.status = 'waiting' OR (i.status = 'ready' AND i.wait_kind = 'lease')));
END
$$;

-- A ready constant state node run and ended in one step (cryo._graph_state_now): the
-- instance and the node written once each and one history event, as the general path
-- (running, an instance started, graph_record_item) would leave them.
CREATE OR REPLACE FUNCTION cryo._node_ran_now(p_q cryo.queue, p_node cryo.node_states,
                                              p_out jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_id text;
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, output_clear,
                                     started_at, finished_at)
    VALUES (p_q.run_id, p_q.org, p_q.project, p_node.node_id, 0, 'succeeded', p_out,
            v_now, v_now);
    UPDATE cryo.node_states n
       SET status = 'succeeded', started_at = v_now, finished_at = v_now, output_clear = p_out
     WHERE n.run_id = p_q.run_id AND n.node_id = p_node.node_id;
    -- What _graph_node_ended does, with the dependents the row already carries.
    FOREACH v_id IN ARRAY coalesce(p_node.dependents, '{}') LOOP
        UPDATE cryo.node_states n SET open_deps = n.open_deps - 1
         WHERE n.run_id = p_q.run_id AND n.node_id = v_id;
    END LOOP;
    -- Scheduled and completed in the same instant: one event says both.
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_completed', 'node',
                          p_node.node_id, 0, 1);
END
$$;

-- Every node of a fresh run ran at once, in p_order with outputs p_outs
-- (cryo._graph_state_batch): the rows _node_ran_now writes for one, written once for all
-- (keep the two alike), with the calls they ran (p_calls) stored as _graph_set_calls would.
CREATE OR REPLACE FUNCTION cryo._nodes_ran_now(p_q cryo.queue, p_order text[], p_outs jsonb[],
                                               p_calls jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, output_clear,
                                     started_at, finished_at)
    SELECT p_q.run_id, p_q.org, p_q.project, u.id, 0, 'succeeded', u.out, v_now, v_now
      FROM unnest(p_order, p_outs) AS u(id, out);
    UPDATE cryo.node_states n
       SET status = 'succeeded', started_at = v_now, finished_at = v_now, output_clear = u.out,
           open_deps = 0, state_call = (p_calls -> u.id) - 'value',
           state_value = decode(p_calls -> u.id ->> 'value', 'hex')
      FROM unnest(p_order, p_outs) AS u(id, out)
     WHERE n.run_id = p_q.run_id AND n.node_id = u.id;
    -- As cryo._history writes them, in the order the nodes ran.
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, attempt, created_at)
    SELECT p_q.run_id, p_q.org, p_q.project, 'node_completed', 'run', 'node', u.id, 0, 1, v_now
      FROM unnest(p_order) WITH ORDINALITY AS u(id, i) ORDER BY u.i;
END
$$;

-- A rerun from a node: the nodes it does not run again (p_up) take what the old run
-- recorded (seeded, or skipped, or failed and tolerated, as they were), and every node's
-- count of open predecessors follows.
CREATE OR REPLACE FUNCTION cryo._nodes_seed(p_new text, p_old text, p_up text[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_states n
       SET status = CASE o.status WHEN 'skipped' THEN 'skipped' WHEN 'failed' THEN 'failed'
                                  ELSE 'seeded' END,
           tolerated = o.tolerated, error = o.error,
           items = o.items, output = o.output, output_clear = o.output_clear,
           started_at = cryo.now(), finished_at = cryo.now()
      FROM cryo.node_states o
     WHERE n.run_id = p_new AND o.run_id = p_old AND o.node_id = n.node_id
       AND n.node_id = ANY (p_up);
    UPDATE cryo.node_states n
       SET open_deps = (SELECT count(*) FROM cryo.node_states m WHERE m.run_id = p_new
                           AND m.node_id = ANY (n.deps) AND cryo._node_status_in(m.status, 'live'))
     WHERE n.run_id = p_new;
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, attempt, output,
                                     output_clear, started_at, finished_at)
    SELECT p_new, i.org, i.project, i.node_id, i.item, 'seeded', i.attempt, i.output,
           i.output_clear, cryo.now(), cryo.now()
      FROM cryo.node_instances i
     WHERE i.run_id = p_old AND i.node_id = ANY (p_up) AND cryo._node_status_in(i.status, 'done');
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT p_new, r.org, r.project, 'node_seeded', 'run', 'node', u, 0, cryo.now()
      FROM unnest(p_up) u, cryo.runs r WHERE r.id = p_new;
END
$$;

-- Ends the nodes of a graph run that had not ended: its running and waiting ones (with
-- p_started_only, when a failed node ends the run and its running jobs were cancelled),
-- or every one (the run itself was cancelled, from cryo._finalize), as 'cancelled'.
CREATE OR REPLACE FUNCTION cryo._graph_cancel_nodes(p_run_id text, p_started_only boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'cancelled', finished_at = cryo.now(), wait_kind = NULL
     WHERE i.run_id = p_run_id AND cryo._node_status_in(i.status, 'instance live');
    WITH ended AS (
        UPDATE cryo.node_states n SET status = 'cancelled', finished_at = cryo.now()
         WHERE n.run_id = p_run_id
           AND (cryo._node_status_in(n.status, 'under way')
                OR (n.status = 'pending' AND NOT p_started_only))
        RETURNING n.run_id, n.org, n.project, n.node_id, n.started_at
    )
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT e.run_id, e.org, e.project, 'node_cancelled', 'run', 'node', e.node_id, 0, cryo.now()
      FROM ended e WHERE e.started_at IS NOT NULL;
END
$$;

-- -- instances ---------------------------------------------------------------------------

-- An instance of a running node is created ready (kept when it exists: a retry, or one
-- that waited for its lock).
CREATE OR REPLACE FUNCTION cryo._instance_open(p_q cryo.queue, p_node text, p_item integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cryo.node_instances (run_id, org, project, node_id, item, status, started_at)
    VALUES (p_q.run_id, p_q.org, p_q.project, p_node, p_item, 'ready', cryo.now())
    ON CONFLICT ON CONSTRAINT node_instances_pkey DO NOTHING;
END
$$;

-- The instance waits in its concurrency group's FIFO: still ready, waiting for the
-- lease (wait_kind 'lease'), and its node says it waits unless another instance runs.
CREATE OR REPLACE FUNCTION cryo._instance_await_lease(p_run_id text, p_node text, p_item integer,
                                                      p_group text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_instances i SET lease_group = p_group, wait_kind = 'lease'
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
    PERFORM cryo._node_waits(p_run_id, p_node);
END
$$;

-- The instance starts (holding its group's lease, if it has one); its node runs again
-- if it waited. Returns the instance.
CREATE OR REPLACE FUNCTION cryo._instance_run(p_run_id text, p_node text, p_item integer,
                                              p_group text)
RETURNS cryo.node_instances
LANGUAGE plpgsql AS $$
DECLARE
    v_inst cryo.node_instances;
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'running', lease_group = p_group, job_run_id = NULL, wait_kind = NULL,
           started_at = CASE WHEN i.status = 'ready' THEN cryo.now() ELSE i.started_at END
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item
    RETURNING * INTO v_inst;
    UPDATE cryo.node_states n SET status = 'running'
     WHERE n.run_id = p_run_id AND n.node_id = p_node AND n.status = 'waiting';
    RETURN v_inst;
END
$$;

-- The child run doing a running instance.
CREATE OR REPLACE FUNCTION cryo._instance_job(p_run_id text, p_node text, p_item integer,
                                              p_child text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_instances i SET job_run_id = p_child, status = 'running'
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
END
$$;

-- The instance waits in the database (a timer, a signal, an event or an approval), at
-- most p_seconds (NULL: no limit).
CREATE OR REPLACE FUNCTION cryo._instance_wait(
    p_q cryo.queue, p_node text, p_item integer, p_kind text, p_name text,
    p_seconds double precision)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_instances i
       SET status = 'waiting', wait_kind = p_kind, wait_name = p_name,
           due_at = cryo.now() + make_interval(secs => p_seconds)
     WHERE i.run_id = p_q.run_id AND i.node_id = p_node AND i.item = p_item;
    PERFORM cryo._node_waits(p_q.run_id, p_node);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, 'node_waiting', 'node', p_node, p_item);
END
$$;

-- An approver's answer to a waiting approval instance (the driver records it on its next
-- turn). Returns false when none of the node waits for one.
CREATE OR REPLACE FUNCTION cryo._instance_answer(p_run_id text, p_node text, p_answer bytea,
                                                 p_by text, p_item integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    -- p_item: that item of a fanned-out node only; NULL: every waiting one.
    UPDATE cryo.node_instances i SET output = p_answer, wait_name = p_by
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.status = 'waiting'
       AND i.wait_kind = 'approval' AND i.output IS NULL
       AND (p_item IS NULL OR i.item = p_item);
    RETURN FOUND;
END
$$;

-- How an instance ended. A failure with attempts left (and an exit code the node's retry
-- covers; never with p_retry false) schedules it again after its backoff, with a fresh
-- child run, so it re-runs memos and all under the same idempotency key. Otherwise the
-- instance ends, gives back its lease, and ends its node when it failed or was the last
-- to succeed; history says so as p_event (node_failed or node_completed when NULL) with
-- p_payload (the sealed output when NULL). Returns the instance's new status.
CREATE OR REPLACE FUNCTION cryo._instance_ended(
    p_run_id text, p_org text, p_project text, p_node text, p_item integer, p_outcome text,
    p_output bytea, p_error text, p_exit_code integer, p_output_clear jsonb,
    p_retry boolean DEFAULT true, p_event text DEFAULT NULL, p_payload bytea DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
-- Keyed queries: one generic plan, not a fresh plan (and its cost) on every call.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_def jsonb;
    v_inst cryo.node_instances;
    v_node cryo.node_states;
    v_retry jsonb;
    v_delay double precision;
    v_status text;
BEGIN
    IF p_outcome NOT IN ('succeeded', 'failed') THEN
        RAISE EXCEPTION 'an instance ends succeeded or failed, not %', p_outcome USING ERRCODE = 'CR004';
    END IF;
    SELECT n.def INTO v_def FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = p_node;
    SELECT * INTO v_inst FROM cryo.node_instances i
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item FOR UPDATE;
    IF NOT FOUND OR v_def IS NULL THEN
        RAISE EXCEPTION 'run % has no started instance %/%', p_run_id, p_node, p_item USING ERRCODE = 'CR005';
    END IF;
    IF NOT cryo._node_status_in(v_inst.status, 'instance live') THEN
        RETURN v_inst.status;  -- recorded already
    END IF;
    v_retry := v_def -> 'retry';
    IF p_outcome = 'failed' AND p_retry AND v_retry IS NOT NULL
       AND v_inst.attempt < coalesce((v_retry ->> 'attempts')::integer, 1)
       AND (v_retry -> 'on_exit' IS NULL OR p_exit_code IS NULL
            OR v_retry -> 'on_exit' @> to_jsonb(p_exit_code)) THEN
        -- backoff is the first wait; an exponential retry (factor) multiplies it by the
        -- factor for each attempt already failed, up to max_delay.
        v_delay := least(coalesce((v_retry ->> 'max_delay')::float8, 'infinity'),
                         coalesce((v_retry ->> 'backoff')::float8, 0)
                         * power(coalesce((v_retry ->> 'factor')::float8, 1), v_inst.attempt - 1));
        UPDATE cryo.node_instances i
           SET status = 'retrying', attempt = i.attempt + 1, error = p_error, job_run_id = NULL,
               due_at = cryo.now() + make_interval(secs => v_delay)
         WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
        PERFORM cryo._release_leases(p_run_id, 'node/' || p_node || '/' || p_item);
        INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                                  key_ordinal, attempt, detail, created_at)
        VALUES (p_run_id, p_org, p_project, 'node_retry_scheduled', 'run', 'node', p_node, p_item,
                v_inst.attempt, jsonb_build_object('delay', v_delay), cryo.now());
        RETURN 'retrying';
    END IF;
    UPDATE cryo.node_instances i
       SET status = p_outcome, output = p_output, output_clear = p_output_clear, error = p_error,
           finished_at = cryo.now(), wait_kind = NULL
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
    IF v_inst.lease_group IS NOT NULL THEN  -- only an instance with a group holds or waits
        PERFORM cryo._release_leases(p_run_id, 'node/' || p_node || '/' || p_item);
    END IF;
    SELECT * INTO v_node FROM cryo.node_states n WHERE n.run_id = p_run_id AND n.node_id = p_node
       FOR UPDATE;
    IF p_outcome = 'failed' THEN
        v_status := 'failed';
    -- A loop's iteration that succeeded leaves its node running: the next turn decides
    -- whether another iteration opens or the node ends (cryo._graph_loops).
    ELSIF NOT v_def ? 'loop' THEN
        -- a count kept on the node: a count(*) of its instances made a fan-out quadratic
        UPDATE cryo.node_states n SET items_done = n.items_done + 1
         WHERE n.run_id = p_run_id AND n.node_id = p_node
        RETURNING n.items_done INTO v_node.items_done;
        IF v_node.items_done >= coalesce(v_node.items, 1) THEN
            v_status := 'succeeded';
        END IF;
    END IF;
    IF v_status IS NOT NULL THEN
        PERFORM cryo._node_end(p_run_id, p_node, v_status, p_error, p_output, p_output_clear);
        PERFORM cryo._history(p_run_id, p_org, p_project,
                              coalesce(p_event, CASE v_status WHEN 'failed' THEN 'node_failed'
                                                              ELSE 'node_completed' END),
                              'node', p_node, p_item, v_inst.attempt, coalesce(p_payload, p_output));
    ELSE
        PERFORM cryo._node_waits(p_run_id, p_node);
    END IF;
    RETURN p_outcome;
END
$$;

-- An approver turns a waiting approval instance down: it fails, without a retry, with
-- the reason; history says node_rejected with the sealed payload (who, the comment).
-- Returns false when none of the node waits for an approval.
CREATE OR REPLACE FUNCTION cryo._instance_reject(p_run_id text, p_org text, p_project text,
                                                 p_node text, p_by text, p_payload bytea,
                                                 p_item integer DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_item integer;
    v_found boolean := false;
BEGIN
    FOR v_item IN UPDATE cryo.node_instances i SET wait_name = p_by
                   WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.status = 'waiting'
                     AND i.wait_kind = 'approval' AND i.output IS NULL
                     AND (p_item IS NULL OR i.item = p_item)
                  RETURNING i.item LOOP
        PERFORM cryo._instance_ended(p_run_id, p_org, p_project, p_node, v_item, 'failed', NULL,
                                     left('rejected by ' || p_by, 200), NULL, NULL, false,
                                     'node_rejected', p_payload);
        v_found := true;
    END LOOP;
    RETURN v_found;
END
$$;

-- -- flow (74_graph_flow.sql) --------------------------------------------------------------

-- An instance of a node with a cache: the key its output is stored under when it
-- succeeds (its entry missed), or, with p_cached, that its output came from the cache.
CREATE OR REPLACE FUNCTION cryo._instance_cache(p_run_id text, p_node text, p_item integer,
                                                p_key bytea, p_cached boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_instances i SET cache_key = p_key, cached = p_cached
     WHERE i.run_id = p_run_id AND i.node_id = p_node AND i.item = p_item;
END
$$;

-- A succeeded node's stop_if was decided (once: it is not asked again).
CREATE OR REPLACE FUNCTION cryo._node_stop_checked(p_run_id text, p_node text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.node_states n SET stop_checked = true
     WHERE n.run_id = p_run_id AND n.node_id = p_node;
END
$$;
