-- Reads: what the server shows users and what DBAs query. Nothing here writes.

CREATE OR REPLACE FUNCTION cryo.get_run(p_run_id text)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, activity_name text, kind text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
               r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
               r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
               CASE WHEN r.status = 'queued' THEN cryo.queue_position(r.id) END,
               cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind
          FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
         WHERE r.id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_run(text) IS
    'Returns one run with its queue facts (wake time, agent), whether it finished, and its parent run and activity name when it is a child. Raises CR003 for an unknown run.';

CREATE OR REPLACE FUNCTION cryo.list_runs(p_org text, p_project text, p_limit integer DEFAULT 50)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, activity_name text, kind text)
LANGUAGE sql STABLE AS $$
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo.queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
     ORDER BY r.created_at DESC, r.id
     LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.list_runs(text, text, integer) IS
    'Returns a project''s newest runs first, at most p_limit. Raises nothing.';

-- The run's history for the run view: kinds and identities in the clear, payloads sealed,
-- and the label the call was given (`cryopg step NAME --label L`), from its journal row.
CREATE OR REPLACE FUNCTION cryo.read_history(p_run_id text)
RETURNS TABLE (id bigint, kind text, family text, name text, ordinal integer, attempt integer,
               payload bytea, created_at timestamptz, label text)
LANGUAGE sql STABLE AS $$
    SELECT h.id, h.kind, h.key_family, h.key_name, h.key_ordinal, h.attempt, h.payload,
           h.created_at, j.label
      FROM cryo.history h
      LEFT JOIN cryo.journal j
        ON h.key_family IS NOT NULL AND h.key_ordinal IS NOT NULL AND j.run_id = h.run_id
       AND j.path = h.key_family || '/' || replace(replace(h.key_name, '%', '%25'), '/', '%2F')
                    || '/' || h.key_ordinal
     WHERE h.run_id = p_run_id ORDER BY h.id
$$;
COMMENT ON FUNCTION cryo.read_history(text) IS
    'Returns a run''s history events in order (payloads sealed), each with the label of its durable call when it has one. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_logs(p_run_id text, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
RETURNS TABLE (id bigint, data bytea)
LANGUAGE sql STABLE AS $$
    SELECT l.id, l.data FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id > p_after
     ORDER BY l.id LIMIT p_limit
$$;
COMMENT ON FUNCTION cryo.read_logs(text, bigint, integer) IS
    'Returns up to p_limit sealed log chunks of a run after chunk id p_after, in order. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_events(
    p_org text, p_project text, p_name text DEFAULT NULL, p_limit integer DEFAULT 50)
RETURNS TABLE (id bigint, name text, payload bytea, payload_clear jsonb, emitted_by_run text,
               created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.name, e.payload, e.payload_clear, e.emitted_by_run, e.created_at
      FROM cryo.events e
     WHERE e.org = p_org AND e.project = p_project AND (p_name IS NULL OR e.name = p_name)
     ORDER BY e.id DESC LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.list_events(text, text, text, integer) IS
    'Returns a project''s newest bus events first (payloads sealed unless sent in the clear from SQL). Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_outputs(p_run_id text)
RETURNS TABLE (key text, value bytea)
LANGUAGE sql STABLE AS $$
    SELECT o.key, o.value FROM cryo.run_outputs o WHERE o.run_id = p_run_id ORDER BY o.key
$$;
COMMENT ON FUNCTION cryo.read_outputs(text) IS 'Returns a run''s outputs (values sealed) by key. Raises nothing.';

-- The log of a run's latest attempt: what collecting an activity prints.
CREATE OR REPLACE FUNCTION cryo.read_last_attempt_log(p_run_id text)
RETURNS TABLE (id bigint, data bytea)
LANGUAGE sql STABLE AS $$
    SELECT l.id, l.data FROM cryo.logs l JOIN cryo.runs r ON r.id = l.run_id
     WHERE l.run_id = p_run_id AND l.attempt = r.attempt ORDER BY l.id
$$;
COMMENT ON FUNCTION cryo.read_last_attempt_log(text) IS
    'Returns the sealed log chunks of a run''s latest attempt, in order. Raises nothing.';

-- Views for DBAs: ids, statuses, names and times; payloads stay sealed.

CREATE OR REPLACE VIEW cryo.run_overview AS
SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
       r.exit_code, r.error, r.created_at, r.started_at, r.finished_at,
       cryo.now() - r.created_at AS age,
       coalesce(r.finished_at, cryo.now()) - r.started_at AS run_time,
       q.wake_at, q.agent_id
  FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id;
COMMENT ON VIEW cryo.run_overview IS 'One row per run: status, substate, attempt, ages, and its live queue facts.';

CREATE OR REPLACE VIEW cryo.parked_runs AS
SELECT q.run_id, q.org, q.project, q.park_reason AS reason, q.park_path AS waiting_on,
       q.park_name AS waiting_for_name,
       q.parked_at, q.wake_at, q.wake_at - cryo.now() AS wakes_in,
       cryo.now() - q.parked_at AS parked_for
  FROM cryo.queue q WHERE q.state = 'parked';
COMMENT ON VIEW cryo.parked_runs IS 'Runs suspended in the queue: why (reason, the call they wait on) and until when.';

CREATE OR REPLACE VIEW cryo.live_claims AS
SELECT q.run_id, q.org, q.project, q.agent_id, q.claimed_at, q.claim_expires_at,
       q.claim_expires_at - cryo.now() AS expires_in, r.attempt
  FROM cryo.queue q JOIN cryo.runs r ON r.id = q.run_id
 WHERE q.state = 'claimed';
COMMENT ON VIEW cryo.live_claims IS 'Claims held right now: which agent, since when, and when the claim expires unless renewed.';

CREATE OR REPLACE VIEW cryo.pending_runs AS
SELECT q.run_id, q.org, q.project, q.required_caps, q.enqueued_at, cryo.now() - q.enqueued_at AS waiting_for
  FROM cryo.queue q WHERE q.state = 'pending';
COMMENT ON VIEW cryo.pending_runs IS 'Runs waiting for an agent, oldest first by enqueued_at.';

CREATE OR REPLACE VIEW cryo.lease_holders AS
SELECT l.org, l.project, l.grp AS concurrency_group, l.holder_run_id, l.kind, l.scoped,
       l.acquired_at, cryo.now() - l.acquired_at AS held_for, r.status AS holder_status,
       (SELECT count(*) FROM cryo.lease_waiters w
         WHERE w.org = l.org AND w.project = l.project AND w.grp = l.grp) AS waiting
  FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id;
COMMENT ON VIEW cryo.lease_holders IS 'One row per held concurrency group lease (a submit''s group or a script''s lock): the holding run, since when, and how many wait.';

CREATE OR REPLACE VIEW cryo.lease_queues AS
SELECT w.org, w.project, w.grp AS concurrency_group, w.run_id, w.kind,
       row_number() OVER (PARTITION BY w.org, w.project, w.grp ORDER BY w.id) AS position,
       w.enqueued_at, cryo.now() - w.enqueued_at AS waiting_for
  FROM cryo.lease_waiters w;
COMMENT ON VIEW cryo.lease_queues IS 'Runs waiting for a concurrency group''s lease, with their FIFO position (1 is next).';

CREATE OR REPLACE FUNCTION cryo.read_event(p_id bigint)
RETURNS TABLE (name text, payload bytea, payload_clear jsonb)
LANGUAGE sql STABLE AS $$
    SELECT e.name, e.payload, e.payload_clear FROM cryo.events e WHERE e.id = p_id
$$;
COMMENT ON FUNCTION cryo.read_event(bigint) IS
    'Returns one bus event''s name and payload (sealed, or clear from SQL); no row when it is gone. Raises nothing.';
