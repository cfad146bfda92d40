-- Metrics (issue 40). What every replica must report alike is counted here, in the
-- database: runs submitted and finished, the queue's depth by state, the time a run
-- waits between enqueue and claim and between claim and finish, claims lapsed, wakes by
-- cause, and the bytes of stored artifacts. Triggers on the tables the transitions
-- write append one delta row per change to cryo.metric_deltas (an insert, so counting
-- never makes one transition wait for another's commit); every replica's tick folds the
-- deltas into cryo.metric_counts (cryo.fold_metrics); cryo.read_metrics reads it all in
-- one statement whose cost depends on the number of series, orgs and agents, never on
-- the number of runs. The triggers count; they change no engine state.

-- Histogram bounds, in seconds, shared by the queue's two latencies.
CREATE OR REPLACE FUNCTION cryo._metric_bucket(p_seconds double precision)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((SELECT b::text FROM unnest(ARRAY[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1, 2.5, 5, 10, 30, 60, 300, 900, 3600]::numeric[]) b
                      WHERE b >= p_seconds ORDER BY b LIMIT 1), '+Inf')
$$;

-- The kind a run is counted as: script, graph, or pipeline (a graph compiled from YAML).
CREATE OR REPLACE FUNCTION cryo._metric_kind(p_kind text, p_graph jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_kind = 'graph' AND p_graph ? 'pipeline' THEN 'pipeline' ELSE p_kind END
$$;

-- runs: a run created is submitted; a status turning terminal is a finish by outcome.
CREATE OR REPLACE FUNCTION cryo._count_runs()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cryo.metric_deltas (metric, org, project, label, n)
        VALUES ('runs_submitted', NEW.org, NEW.project, cryo._metric_kind(NEW.kind, NEW.graph), 1);
    ELSE
        INSERT INTO cryo.metric_deltas (metric, org, project, label, label2, n)
        VALUES ('runs_finished', NEW.org, NEW.project, cryo._metric_kind(NEW.kind, NEW.graph),
                NEW.status, 1);
    END IF;
    RETURN NULL;
END
$$;

-- queue: depth by state; a claim observes how long the run waited since it was (re)queued,
-- a claimed row leaving the queue (its run ended) how long the claim lasted.
CREATE OR REPLACE FUNCTION cryo._count_queue()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO cryo.metric_deltas (metric, org, project, label, n)
        VALUES ('queue', NEW.org, NEW.project, NEW.state, 1);
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO cryo.metric_deltas (metric, org, project, label, label2, n, total)
        SELECT 'queue', OLD.org, OLD.project, OLD.state, '', -1, 0
        UNION ALL
        SELECT 'claim_seconds', OLD.org, OLD.project,
               CASE WHEN OLD.required_caps = '{graph}' THEN 'graph' ELSE 'job' END,
               cryo._metric_bucket(extract(epoch FROM v_now - OLD.claimed_at)), 1,
               greatest(extract(epoch FROM v_now - OLD.claimed_at), 0)
         WHERE OLD.state = 'claimed' AND OLD.claimed_at IS NOT NULL;
    ELSE
        INSERT INTO cryo.metric_deltas (metric, org, project, label, label2, n, total)
        VALUES ('queue', NEW.org, NEW.project, OLD.state, '', -1, 0),
               ('queue', NEW.org, NEW.project, NEW.state, '', 1, 0);
        IF NEW.state = 'claimed' AND OLD.state = 'pending' THEN
            INSERT INTO cryo.metric_deltas (metric, org, project, label, label2, n, total)
            VALUES ('queue_wait_seconds', NEW.org, NEW.project,
                    CASE WHEN NEW.required_caps = '{graph}' THEN 'graph' ELSE 'job' END,
                    cryo._metric_bucket(extract(epoch FROM v_now - OLD.enqueued_at)), 1,
                    greatest(extract(epoch FROM v_now - OLD.enqueued_at), 0));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- history: a lapsed claim (claim_expired) and each wake, by the cause _wake records.
CREATE OR REPLACE FUNCTION cryo._count_history()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cryo.metric_deltas (metric, org, project, label, n)
    VALUES (CASE WHEN NEW.kind = 'claim_expired' THEN 'claims_lapsed' ELSE 'wakes' END,
            NEW.org, NEW.project,
            CASE WHEN NEW.kind = 'claim_expired' THEN '' ELSE NEW.kind END, 1);
    RETURN NULL;
END
$$;

-- The history kinds cryo._wake is given: what woke a parked run.
CREATE OR REPLACE FUNCTION cryo._wake_causes()
RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['timer_fired', 'retry_due', 'wait_timed_out', 'node_job_ended',
                 'signal_received', 'event_received', 'activity_completed',
                 'activities_completed', 'graph_call_completed', 'turn_yielded']
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
CREATE OR REPLACE TRIGGER runs_submitted_count AFTER INSERT ON cryo.runs
    FOR EACH ROW EXECUTE FUNCTION cryo._count_runs();
CREATE OR REPLACE TRIGGER runs_finished_count AFTER UPDATE OF status ON cryo.runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND cryo.is_terminal(NEW.status))
    EXECUTE FUNCTION cryo._count_runs();
CREATE OR REPLACE TRIGGER runs_inherit_traceparent BEFORE INSERT ON cryo.runs
    FOR EACH ROW WHEN (NEW.parent_run_id IS NOT NULL AND NEW.traceparent IS NULL)
    EXECUTE FUNCTION cryo._inherit_traceparent();
CREATE OR REPLACE TRIGGER queue_count_insert AFTER INSERT ON cryo.queue
    FOR EACH ROW EXECUTE FUNCTION cryo._count_queue();
CREATE OR REPLACE TRIGGER queue_count_delete AFTER DELETE ON cryo.queue
    FOR EACH ROW EXECUTE FUNCTION cryo._count_queue();
CREATE OR REPLACE TRIGGER queue_count_state AFTER UPDATE OF state ON cryo.queue
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION cryo._count_queue();
CREATE OR REPLACE TRIGGER history_count AFTER INSERT ON cryo.history
    FOR EACH ROW WHEN (NEW.kind = 'claim_expired' OR NEW.kind = ANY (cryo._wake_causes()))
    EXECUTE FUNCTION cryo._count_history();
CREATE OR REPLACE TRIGGER artifact_blobs_count AFTER INSERT OR DELETE ON cryo.artifact_blobs
    FOR EACH ROW EXECUTE FUNCTION cryo._count_blobs();

-- The gauges counted from changes (queue depth, artifact bytes) start from what the
-- tables hold. Run with every rebuild of the functions, in its transaction: the triggers
-- were dropped and re-created in it, and the locks taken here hold writers off until it
-- commits, so no change falls between the count and the triggers.
CREATE OR REPLACE FUNCTION cryo._reseed_metric_gauges()
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE cryo.queue, cryo.artifact_blobs IN SHARE MODE;
    LOCK TABLE cryo.metric_counts, cryo.metric_deltas IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM cryo.metric_deltas WHERE metric IN ('queue', 'artifact_bytes');
    DELETE FROM cryo.metric_counts WHERE metric IN ('queue', 'artifact_bytes');
    INSERT INTO cryo.metric_counts (metric, org, project, label, n)
    SELECT 'queue', q.org, q.project, q.state, count(*) FROM cryo.queue q
     GROUP BY q.org, q.project, q.state;
    INSERT INTO cryo.metric_counts (metric, org, project, n)
    SELECT 'artifact_bytes', b.org, b.project, sum(b.size) FROM cryo.artifact_blobs b
     GROUP BY b.org, b.project;
END
$$;
SELECT cryo._reseed_metric_gauges();

-- Folds the deltas into one row per series. Every replica calls it on its tick; one at a
-- time does the work (the others return 0 at once). Returns how many deltas it folded.
CREATE OR REPLACE FUNCTION cryo.fold_metrics()
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('cryopg-fold-metrics')) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM cryo.metric_deltas RETURNING *
    ), summed AS (
        SELECT g.metric, g.org, g.project, g.label, g.label2, sum(g.n) AS n,
               sum(g.total) AS total, count(*) AS rows
          FROM gone g GROUP BY 1, 2, 3, 4, 5
    ), folded AS (
        INSERT INTO cryo.metric_counts AS c (metric, org, project, label, label2, n, total)
        SELECT s.metric, s.org, s.project, s.label, s.label2, s.n, s.total FROM summed s
         ORDER BY 1, 2, 3, 4, 5
        ON CONFLICT (metric, org, project, label, label2)
        DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total
    )
    SELECT coalesce(sum(rows), 0) INTO v_n FROM summed;
    -- A deleted project's series go with it (its runs' rows are gone too).
    DELETE FROM cryo.metric_counts c
     WHERE NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = c.org AND p.slug = c.project)
       AND c.project <> '';
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION cryo.fold_metrics() IS
    'Folds cryo.metric_deltas into cryo.metric_counts (one replica at a time; the others return 0) and drops the series of deleted projects. Returns how many deltas it folded. Raises nothing.';

-- Everything GET /metrics reports from the database, in one statement: the counted
-- series (folded and not yet folded), the age of each org's oldest pending run (its
-- queue_pending index answers it), agents by state and build and live agents by
-- capability (as cryo.list_agents sees them), the capabilities the oldest pending runs
-- of each org need (up to 1000 runs an org), and, with p_log_move_after (a log store is
-- set), how many finished runs' logs wait to move (up to 10000).
CREATE OR REPLACE FUNCTION cryo.read_metrics(p_log_move_after interval DEFAULT NULL,
                                             p_gone_after interval DEFAULT '2 minutes')
RETURNS TABLE (metric text, org text, project text, label text, label2 text,
               value double precision, total double precision)
LANGUAGE sql STABLE AS $$
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
     GROUP BY o.slug, cap
    UNION ALL
    SELECT 'log_move_backlog', '', '', '', '', count(*), 0
      FROM cryo.logs_to_archive(p_log_move_after, 10000)
     WHERE p_log_move_after IS NOT NULL
$$;
COMMENT ON FUNCTION cryo.read_metrics(interval, interval) IS
    'Returns every metric series the database holds as (metric, org, project, label, label2, value, total): counters and gauges counted by the metrics triggers, queue_oldest_pending_seconds per org, agents by state and build, agent_capabilities of live agents, queue_pending_capability (of up to 1000 oldest pending runs an org), and log_move_backlog (up to 10000; only with p_log_move_after). A read: changes nothing. Raises nothing.';

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
