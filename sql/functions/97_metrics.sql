-- Metrics (issue 40). What every replica must report alike is counted here, in the
-- database: runs submitted and finished, the queue's depth by state, the time a run
-- waits from submit to its first claim and runs from that claim to its end, claims
-- lapsed, wakes by cause, and the bytes of stored artifacts. Counters are folded from
-- the history rows the transitions write anyway (cryo.fold_metrics, on every replica's
-- tick, one at a time), so counting adds nothing to a transition; cryo.read_metrics reads
-- it all in one statement whose cost depends on the number of series, orgs and agents,
-- never on the number of runs.

-- Histogram bounds, in seconds, shared by the queue's two latencies.
-- (A CASE the planner inlines: the fold calls it twice for every run that ended.)
CREATE OR REPLACE FUNCTION cryo._metric_bucket(p_seconds double precision)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
                WHEN p_seconds <= 0.005 THEN '0.005'
                WHEN p_seconds <= 0.01 THEN '0.01'
                WHEN p_seconds <= 0.025 THEN '0.025'
                WHEN p_seconds <= 0.05 THEN '0.05'
                WHEN p_seconds <= 0.1 THEN '0.1'
                WHEN p_seconds <= 0.25 THEN '0.25'
                WHEN p_seconds <= 0.5 THEN '0.5'
                WHEN p_seconds <= 1 THEN '1'
                WHEN p_seconds <= 2.5 THEN '2.5'
                WHEN p_seconds <= 5 THEN '5'
                WHEN p_seconds <= 10 THEN '10'
                WHEN p_seconds <= 30 THEN '30'
                WHEN p_seconds <= 60 THEN '60'
                WHEN p_seconds <= 300 THEN '300'
                WHEN p_seconds <= 900 THEN '900'
                WHEN p_seconds <= 3600 THEN '3600'
                ELSE '+Inf' END
$$;

-- The kind a run is counted as: script, graph, or pipeline (a graph compiled from YAML).
CREATE OR REPLACE FUNCTION cryo._metric_kind(p_kind text, p_graph jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_kind = 'graph' AND p_graph ? 'pipeline' THEN 'pipeline' ELSE p_kind END
$$;

-- artifact_blobs: the bytes an org's project stores (each blob once, however many names).
CREATE OR REPLACE FUNCTION cryo._count_blobs()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cryo.metric_deltas (metric, org, project, n)
        VALUES ('artifact_bytes', NEW.org, NEW.project, NEW.size);
    ELSE
        INSERT INTO cryo.metric_deltas (metric, org, project, n)
        VALUES ('artifact_bytes', OLD.org, OLD.project, -OLD.size);
    END IF;
    RETURN NULL;
END
$$;

-- A child run continues its parent's trace (cryo.set_run_traceparent set the root's).
CREATE OR REPLACE FUNCTION cryo._inherit_traceparent()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.traceparent := (SELECT p.traceparent FROM cryo.runs p WHERE p.id = NEW.parent_run_id);
    RETURN NEW;
END
$$;

-- The triggers go with their functions whenever the function files are rebuilt (the
-- rebuild drops every function, CASCADE), and come back here in the same transaction.
-- Only artifact blobs are counted by a trigger: they are few and on no run's path; what
-- runs do is folded from history (cryo.fold_metrics).
CREATE OR REPLACE TRIGGER runs_inherit_traceparent BEFORE INSERT ON cryo.runs
    FOR EACH ROW WHEN (NEW.parent_run_id IS NOT NULL AND NEW.traceparent IS NULL)
    EXECUTE FUNCTION cryo._inherit_traceparent();
CREATE OR REPLACE TRIGGER artifact_blobs_count AFTER INSERT OR DELETE ON cryo.artifact_blobs
    FOR EACH ROW EXECUTE FUNCTION cryo._count_blobs();

-- The artifact bytes start from what the table holds. Run with every rebuild of the
-- functions, in its transaction: the trigger was dropped and re-created in it, and the
-- locks taken here hold writers off until it commits, so no change falls between the
-- count and the trigger.
CREATE OR REPLACE FUNCTION cryo._reseed_metric_gauges()
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE cryo.artifact_blobs IN SHARE MODE;
    LOCK TABLE cryo.metric_counts, cryo.metric_deltas IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM cryo.metric_deltas WHERE metric = 'artifact_bytes';
    DELETE FROM cryo.metric_counts WHERE metric = 'artifact_bytes';
    INSERT INTO cryo.metric_counts (metric, org, project, n)
    SELECT 'artifact_bytes', b.org, b.project, sum(b.size) FROM cryo.artifact_blobs b
     GROUP BY b.org, b.project;
END
$$;
SELECT cryo._reseed_metric_gauges();

-- What history rows count, as (metric, org, project, label, label2, n, total): a run
-- submitted (by kind), a run ended (by kind and outcome, with the time from its submit
-- to its first claim and from that claim to its end, when it was claimed), a claim
-- lapsed, a parked run woken (by cause: the kind of a row cryo._wake wrote, marked woke;
-- a signal, lease or activity's end found at once writes the same kind unmarked, and is
-- no wake). The run's row gives the kind and the times; a run already deleted is not
-- counted (its history goes with it: cryo._count_history_of
-- counts what is deleted before the fold reached it).
CREATE OR REPLACE FUNCTION cryo._history_counts(p_ids bigint[])
RETURNS TABLE (metric text, org text, project text, label text, label2 text, n bigint,
               total double precision)
LANGUAGE sql STABLE AS $$
    WITH h AS MATERIALIZED (
        SELECT h.run_id, h.org, h.project, h.kind, h.woke FROM cryo.history h
         WHERE h.id = ANY (p_ids)
           AND (h.kind IN ('submitted', 'claim_expired') OR cryo.is_terminal(h.kind)
                OR h.woke)
    ), r AS MATERIALIZED (
        SELECT h.org, h.project, h.kind AS event, cryo._metric_kind(r.kind, r.graph) AS kind,
               CASE WHEN r.kind = 'graph' THEN 'graph' ELSE 'job' END AS claim_kind,
               extract(epoch FROM r.started_at - r.created_at)::double precision AS waited,
               extract(epoch FROM r.finished_at - r.started_at)::double precision AS claimed
          FROM h JOIN cryo.runs r ON r.id = h.run_id
         WHERE h.kind = 'submitted' OR cryo.is_terminal(h.kind)
    )
    SELECT x.metric, x.org, x.project, x.label, x.label2, count(*), sum(x.total)
      FROM (SELECT 'runs_submitted' AS metric, r.org, r.project, r.kind AS label,
                   '' AS label2, 0::double precision AS total
              FROM r WHERE r.event = 'submitted'
            UNION ALL
            SELECT 'runs_finished', r.org, r.project, r.kind, r.event, 0
              FROM r WHERE r.event <> 'submitted'
            UNION ALL
            SELECT 'queue_wait_seconds', r.org, r.project, r.claim_kind,
                   cryo._metric_bucket(r.waited), greatest(r.waited, 0)
              FROM r WHERE r.event <> 'submitted' AND r.waited IS NOT NULL
            UNION ALL
            SELECT 'claim_seconds', r.org, r.project, r.claim_kind,
                   cryo._metric_bucket(r.claimed), greatest(r.claimed, 0)
              FROM r WHERE r.event <> 'submitted' AND r.claimed IS NOT NULL
            UNION ALL
            SELECT CASE WHEN h.kind = 'claim_expired' THEN 'claims_lapsed' ELSE 'wakes' END,
                   h.org, h.project, CASE WHEN h.kind = 'claim_expired' THEN '' ELSE h.kind END,
                   '', 0
              FROM h WHERE h.kind = 'claim_expired' OR h.woke) x
     GROUP BY 1, 2, 3, 4, 5
$$;

-- Adds counts to their series (in key order, so two writers never deadlock).
CREATE OR REPLACE FUNCTION cryo._add_counts(p_ids bigint[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
    SELECT x.metric, x.org, x.project, x.label, x.label2, x.n, x.total
      FROM cryo._history_counts(p_ids) x ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (metric, org, project, label, label2)
    DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total
$$;

-- Folds history into cryo.metric_counts, at most p_limit rows a call, from where the last
-- fold stopped (cryo.metric_fold); folds the artifact deltas; recounts the queue's depth
-- by state when the last recount is p_recount_after old (a read of the whole queue: with
-- 100,000 parked runs a fold cost ~200 ms recounting, ~8 ms not, on a loaded 2-core
-- machine; bounded so, a fold's cost is the history it folds). Every replica calls it on its tick: the one that locks the cursor
-- row does the work, the others return 0 at once. A fold is one transaction: killed, it
-- leaves nothing.
--
-- History ids are taken before their transaction commits, so a lower id can appear
-- after a higher one was seen. An id is folded only when no transaction that could hold
-- a lower one runs: a fold notes the highest id it sees (next_through); the next notes
-- the snapshot's xmax for it (seen_xmax) -- by then every holder of a lower id has
-- inserted its row, so has a transaction id below that xmax; a fold that finds the
-- oldest running transaction at or past seen_xmax folds up to seen_through. Counters so
-- trail the transitions by two ticks.
CREATE OR REPLACE FUNCTION cryo.fold_metrics(p_limit integer DEFAULT 20000,
                                             p_recount_after interval DEFAULT '10 seconds')
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_f cryo.metric_fold;
    v_snap pg_snapshot;
    v_ids bigint[];
    v_n integer := 0;
    v_recount boolean;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'fold_metrics needs a positive batch size, not %', p_limit
            USING ERRCODE = 'CR230';
    END IF;
    IF p_recount_after IS NULL OR p_recount_after < interval '0' THEN
        RAISE EXCEPTION 'fold_metrics needs a queue recount interval of 0 or more, not %',
            p_recount_after USING ERRCODE = 'CR231';
    END IF;
    SELECT * INTO v_f FROM cryo.metric_fold FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;  -- another replica is folding (or the migration made no row: nothing)
    END IF;
    -- The queue is recounted when its last count is p_recount_after old (or from the
    -- future: a test's fake clock went back).
    v_recount := v_f.queue_counted_at IS NULL OR v_f.queue_counted_at > cryo.now()
                 OR cryo.now() - v_f.queue_counted_at >= p_recount_after;
    v_snap := pg_current_snapshot();
    IF v_f.seen_xmax IS NOT NULL AND pg_snapshot_xmin(v_snap) >= v_f.seen_xmax THEN
        SELECT array_agg(b.id ORDER BY b.id) INTO v_ids
          FROM (SELECT h.id FROM cryo.history h
                 WHERE h.id > v_f.folded_through AND h.id <= v_f.seen_through
                 ORDER BY h.id LIMIT p_limit) b;
        PERFORM cryo._add_counts(v_ids);
        v_n := coalesce(cardinality(v_ids), 0);
        IF v_n < p_limit THEN  -- everything up to seen_through is in
            v_f.folded_through := greatest(v_f.folded_through, v_f.seen_through);
            v_f.seen_through := NULL;
            v_f.seen_xmax := NULL;
        ELSE
            v_f.folded_through := v_ids[v_n];
        END IF;
    END IF;
    IF v_f.seen_through IS NULL AND v_f.next_through IS NOT NULL THEN
        v_f.seen_through := v_f.next_through;
        v_f.seen_xmax := pg_snapshot_xmax(v_snap);
        v_f.next_through := NULL;
    END IF;
    IF v_f.next_through IS NULL THEN
        v_f.next_through := (SELECT max(h.id) FROM cryo.history h);
        IF v_f.next_through <= coalesce(v_f.seen_through, v_f.folded_through) THEN
            v_f.next_through := NULL;  -- nothing new
        END IF;
    END IF;
    UPDATE cryo.metric_fold
       SET folded_through = v_f.folded_through, seen_through = v_f.seen_through,
           seen_xmax = v_f.seen_xmax, next_through = v_f.next_through,
           folded_at = cryo.now(),
           queue_counted_at = CASE WHEN v_recount THEN cryo.now() ELSE v_f.queue_counted_at END;
    -- The artifact blobs' deltas.
    WITH gone AS (
        DELETE FROM cryo.metric_deltas RETURNING *
    ), summed AS (
        SELECT g.metric, g.org, g.project, g.label, g.label2, sum(g.n) AS n,
               sum(g.total) AS total
          FROM gone g GROUP BY 1, 2, 3, 4, 5
    )
    INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
    SELECT s.metric, s.org, s.project, s.label, s.label2, s.n, s.total FROM summed s
     ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT (metric, org, project, label, label2)
    DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total;
    -- The queue's depth, as this snapshot sees it (a series that emptied reads 0).
    IF v_recount THEN
        WITH fresh AS (
            SELECT q.org, q.project, q.state, count(*) AS n FROM cryo.queue q GROUP BY 1, 2, 3
        ), emptied AS (
            UPDATE cryo.metric_counts c SET n = 0
             WHERE c.metric = 'queue' AND c.n <> 0
               AND NOT EXISTS (SELECT 1 FROM fresh f
                                WHERE f.org = c.org AND f.project = c.project
                                  AND f.state = c.label)
        )
        INSERT INTO cryo.metric_counts AS c (metric, org, project, label, n)
        SELECT 'queue', f.org, f.project, f.state, f.n FROM fresh f ORDER BY 2, 3, 4
        ON CONFLICT (metric, org, project, label, label2)
        DO UPDATE SET n = excluded.n WHERE c.n <> excluded.n;
    END IF;
    -- A deleted project's series go with it (its runs' rows are gone too).
    DELETE FROM cryo.metric_counts c
     WHERE NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = c.org AND p.slug = c.project)
       AND c.project <> '';
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION cryo.fold_metrics(integer, interval) IS
    'Folds up to p_limit history rows past the cursor in cryo.metric_fold into cryo.metric_counts (runs submitted and finished, queue latencies, claims lapsed, wakes), folds the artifact deltas, recounts the queue''s depth by state when its last count (metric_fold.queue_counted_at) is p_recount_after old, and drops the series of deleted projects; one replica at a time (the others return 0 at once). Returns how many history rows it folded. Raises CR230 for a batch size below 1, CR231 for a NULL or negative recount interval.';

-- Counts the history of runs about to be deleted that the fold has not reached (it
-- would find those rows gone). Waits for a fold in progress, and holds the cursor until
-- the deleting transaction ends, so a row is counted here or by the fold, never both.
CREATE OR REPLACE FUNCTION cryo._count_history_of(p_run_ids text[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_through bigint;
BEGIN
    SELECT f.folded_through INTO v_through FROM cryo.metric_fold f FOR UPDATE;
    IF FOUND THEN
        PERFORM cryo._add_counts(ARRAY(SELECT h.id FROM cryo.history h
                                        WHERE h.run_id = ANY (p_run_ids) AND h.id > v_through));
    END IF;
END
$$;

-- Everything GET /metrics reports from the database, in one statement: the counted
-- series (as of the last fold), the age of each org's oldest pending run (its
-- queue_pending index answers it), agents by state and build and live agents by
-- capability (as cryo.list_agents sees them), the capabilities the oldest pending runs
-- of each org need (up to 1000 runs an org), and, with p_log_move_after (a log store is
-- set), how many finished runs' logs wait to move (up to 10000).
-- PL/pgSQL for its plan cache: planning this union costs ~10x executing it (1-11 ms
-- against ~0.2 ms), and a SQL function's body is planned again on every call; here each
-- pooled connection plans it once (a generic plan: the parameters are intervals compared
-- with times, never an index's key, so no value would choose a better plan).
CREATE OR REPLACE FUNCTION cryo.read_metrics(p_log_move_after interval DEFAULT NULL,
                                             p_gone_after interval DEFAULT '2 minutes')
RETURNS TABLE (metric text, org text, project text, label text, label2 text,
               value double precision, total double precision)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
        WITH agents AS MATERIALIZED (
            SELECT o.slug AS org, a.state, a.build, a.capabilities
              FROM cryo.orgs o CROSS JOIN LATERAL cryo.list_agents(o.slug, p_gone_after) a
        )
        SELECT m.metric, m.org, m.project, m.label, m.label2, sum(m.n)::double precision,
               sum(m.total)
          FROM (SELECT c.metric, c.org, c.project, c.label, c.label2, c.n, c.total
                  FROM cryo.metric_counts c
                UNION ALL
                SELECT d.metric, d.org, d.project, d.label, d.label2, d.n, d.total
                  FROM cryo.metric_deltas d) m
         GROUP BY 1, 2, 3, 4, 5
        UNION ALL
        SELECT 'queue_oldest_pending_seconds', o.slug, '', '', '',
               greatest(extract(epoch FROM cryo.now() - x.enqueued_at), 0)::double precision, 0
          FROM cryo.orgs o
          CROSS JOIN LATERAL (SELECT q.enqueued_at FROM cryo.queue q
                               WHERE q.org = o.slug AND q.state = 'pending'
                               ORDER BY q.enqueued_at LIMIT 1) x
        UNION ALL
        SELECT 'agents', a.org, '', a.state, coalesce(a.build, ''), count(*), 0
          FROM agents a
         GROUP BY a.org, a.state, a.build
        UNION ALL
        SELECT 'agent_capabilities', a.org, '', cap, '', count(*), 0
          FROM agents a
         CROSS JOIN LATERAL unnest(a.capabilities) cap
         WHERE a.state IN ('idle', 'busy')
         GROUP BY a.org, cap
        UNION ALL
        SELECT 'queue_pending_capability', o.slug, '', cap, '', count(*), 0
          FROM cryo.orgs o
          CROSS JOIN LATERAL (SELECT q.required_caps FROM cryo.queue q
                               WHERE q.org = o.slug AND q.state = 'pending'
                               ORDER BY q.enqueued_at LIMIT 1000) p
          CROSS JOIN LATERAL unnest(p.required_caps) cap
         WHERE cap <> 'graph'
         GROUP BY o.slug, cap;
    RETURN QUERY
    SELECT 'log_move_backlog'::text, ''::text, ''::text, ''::text, ''::text,
           count(*)::double precision, 0::double precision
      FROM cryo.logs_to_archive(p_log_move_after, 10000)
     WHERE p_log_move_after IS NOT NULL;
END
$$;
COMMENT ON FUNCTION cryo.read_metrics(interval, interval) IS
    'Returns every metric series the database holds as (metric, org, project, label, label2, value, total): counters and the queue depth as of the last cryo.fold_metrics, queue_oldest_pending_seconds per org, agents by state and build, agent_capabilities of live agents, queue_pending_capability (of up to 1000 oldest pending runs an org), and log_move_backlog (up to 10000; only with p_log_move_after). A read: changes nothing. Raises nothing.';

-- Records the trace a root run belongs to (the server that submitted it, when tracing is
-- on); its children inherit it as they are created. A run that has one keeps it.
CREATE OR REPLACE FUNCTION cryo.set_run_traceparent(p_run_id text, p_traceparent text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' THEN
        RAISE EXCEPTION 'not a W3C traceparent: %', left(p_traceparent, 80)
            USING ERRCODE = 'CR190';
    END IF;
    UPDATE cryo.runs SET traceparent = p_traceparent
     WHERE id = p_run_id AND traceparent IS NULL;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION cryo.set_run_traceparent(text, text) IS
    'Sets the W3C traceparent of a run that has none; returns false when the run is unknown or already has one. Raises CR190 for a malformed traceparent.';

-- The trace a run belongs to, for whoever continues it (a claim's grant, a graph turn,
-- the run page). NULL when it has none or is unknown.
CREATE OR REPLACE FUNCTION cryo.run_traceparent(p_run_id text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT r.traceparent FROM cryo.runs r WHERE r.id = p_run_id
$$;
COMMENT ON FUNCTION cryo.run_traceparent(text) IS
    'Returns the W3C traceparent stored on a run (NULL when none or no such run). Raises nothing.';
