-- Reads: what the server shows users and what DBAs query. Nothing here writes.

CREATE OR REPLACE FUNCTION cryo.get_run(p_run_id text)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, activity_name text, kind text, outcome_code integer)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM cryo._app_run_check(p_run_id);
    RETURN QUERY
        SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
               r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
               r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
               CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
               cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind,
               CASE WHEN cryo.is_terminal(r.status) THEN cryo._outcome_code(r.status, r.exit_code) END
          FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
         WHERE r.id = p_run_id;
    IF NOT FOUND THEN
        PERFORM cryo._no_run(p_run_id);
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_run(text) IS
    'Returns one run with its queue facts (wake time, agent), whether it finished (and then the exit code it reports, outcome_code), and its parent run and activity name when it is a child. Raises CR003 for an unknown run, CR021 when the caller is an application role of another tenant (or of none).';

CREATE OR REPLACE FUNCTION cryo.list_runs(p_org text, p_project text, p_limit integer DEFAULT 50)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, activity_name text, kind text)
LANGUAGE sql STABLE AS $$
    SELECT cryo._app_tenant_check(p_org, p_project);
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id, r.activity_name, r.kind
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
     ORDER BY r.created_at DESC, r.id
     LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.list_runs(text, text, integer) IS
    'Returns a project''s newest runs first, at most p_limit. Raises CR021 when the caller is an application role of another tenant (or of none).';

-- One page of a project's runs for the runs list, newest first: filtered by status and
-- workflow, either top-level runs (p_parent NULL) or one run's children, after a cursor
-- (the last run id of the previous page). Each row says what started the run (a parent,
-- else manual) and how many children it has, so a page is one bounded read.
CREATE OR REPLACE FUNCTION cryo.list_runs_page(
    p_org text, p_project text, p_status text DEFAULT NULL, p_workflow text DEFAULT NULL,
    p_parent text DEFAULT NULL, p_before text DEFAULT NULL, p_limit integer DEFAULT 50)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, trig text, children bigint)
LANGUAGE sql STABLE AS $$
    WITH cursor_row AS (
        SELECT c.created_at, c.id FROM cryo.runs c
         WHERE c.id = p_before AND c.org = p_org AND c.project = p_project
    )
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id,
           CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                WHEN r.trigger_kind IS NOT NULL THEN r.trigger_kind ELSE 'manual' END,
           (SELECT count(*) FROM cryo.runs k WHERE k.parent_run_id = r.id)
      FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
     WHERE r.org = p_org AND r.project = p_project
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) = p_workflow)
       AND (CASE WHEN p_parent IS NULL THEN r.parent_run_id IS NULL
                 ELSE r.parent_run_id = p_parent END)
       AND (p_before IS NULL OR (r.created_at, r.id) < (SELECT c.created_at, c.id FROM cursor_row c))
     ORDER BY r.created_at DESC, r.id DESC
     LIMIT least(greatest(p_limit, 0), 200)
$$;
COMMENT ON FUNCTION cryo.list_runs_page(text, text, text, text, text, text, integer) IS
    'Returns one page (at most 200) of a project''s runs newest first, top-level or one parent''s children, filtered by status and workflow, after the cursor run p_before; with each run''s trigger (parent, schedule, webhook, event or manual) and child count. Raises nothing.';

-- The runs list's orders: a text key per run that sorts as the column does (bytewise,
-- COLLATE "C"), so one (key, id) cursor pages through any of them. A run not finished
-- sorts after every end (its end is later); a duration ticks for a run still going.
CREATE OR REPLACE FUNCTION cryo._run_sort_key(p_order text, p_created timestamptz,
    p_started timestamptz, p_finished timestamptz, p_status text, p_name text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE ltrim(p_order, '-')
        WHEN 'started' THEN to_char(coalesce(p_started, p_created) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
        WHEN 'ended' THEN coalesce(to_char(p_finished AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), '~')
        WHEN 'duration' THEN CASE WHEN p_started IS NULL THEN ''
            ELSE lpad(floor(extract(epoch FROM coalesce(p_finished, now()) - p_started) * 1000)::bigint::text, 15, '0') END
        WHEN 'status' THEN p_status
        WHEN 'workflow' THEN lower(coalesce(p_name, ''))
    END
$$;
COMMENT ON FUNCTION cryo._run_sort_key(text, timestamptz, timestamptz, timestamptz, text, text) IS
    'Returns the text a run sorts by under a runs-list order (started, ended, duration, status, workflow; a leading - is ignored), compared bytewise; NULL for no order. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo._check_run_order(p_order text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_order IS NOT NULL AND ltrim(p_order, '-') NOT IN ('started', 'ended', 'duration', 'status', 'workflow')
       OR p_order LIKE '--%' THEN
        RAISE EXCEPTION 'unknown runs order %: use started, ended, duration, status or workflow, with a leading - for descending', p_order
            USING ERRCODE = 'CR236';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo._check_run_order(text) IS
    'Checks a runs-list order. Raises CR236 unless it is NULL or one of started, ended, duration, status, workflow with an optional leading -.';

-- The runs search of the web UI: any run of the project (children too, or with p_top
-- top-level runs only) whose id or workflow/file name holds p_text, or whose clear input
-- or a step label does, or (p_input_hash, a keyed hash the server made of the search
-- text) one of whose sealed input's scalar values hashes the same, by status, trigger
-- kind and a created_at range; newest first, or in p_order (cryo._run_sort_key), after
-- the cursor run p_before. Same columns as list_runs_page.
CREATE OR REPLACE FUNCTION cryo.search_runs(
    p_org text, p_project text, p_text text DEFAULT NULL, p_status text DEFAULT NULL,
    p_workflow text DEFAULT NULL, p_trigger text DEFAULT NULL, p_since timestamptz DEFAULT NULL,
    p_until timestamptz DEFAULT NULL, p_before text DEFAULT NULL, p_limit integer DEFAULT 50,
    p_order text DEFAULT NULL, p_top boolean DEFAULT false, p_input_hash bytea DEFAULT NULL)
RETURNS TABLE (id text, org text, project text, workflow text, filename text, status text,
               substate text, attempt integer, exit_code integer, error text,
               idempotency_key text, created_at timestamptz, started_at timestamptz,
               finished_at timestamptz, wake_at timestamptz, agent_id text,
               concurrency_group text, queue_position integer, finished boolean,
               parent_run_id text, trig text, children bigint)
LANGUAGE sql STABLE AS $$
    SELECT cryo._check_run_order(p_order);
    WITH cursor_row AS (
        SELECT c.created_at, c.id,
               cryo._run_sort_key(p_order, c.created_at, c.started_at, c.finished_at, c.status,
                                  coalesce(c.workflow, c.filename)) COLLATE "C" AS key
          FROM cryo.runs c
         WHERE c.id = p_before AND c.org = p_org AND c.project = p_project
    ), pat AS (
        SELECT '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS t,
               '%' || replace(replace(replace(p_workflow, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS w,
               left(p_order, 1) = '-' AS down
    )
    SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
           r.exit_code, r.error, r.idempotency_key, r.created_at, r.started_at,
           r.finished_at, q.wake_at, q.agent_id, r.concurrency_group,
           CASE WHEN r.status = 'queued' THEN cryo._queue_position(r.id) END,
           cryo.is_terminal(r.status), r.parent_run_id,
           CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                WHEN r.trigger_kind IS NOT NULL THEN r.trigger_kind ELSE 'manual' END,
           (SELECT count(*) FROM cryo.runs k WHERE k.parent_run_id = r.id)
      FROM pat, cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
           CROSS JOIN LATERAL (SELECT cryo._run_sort_key(p_order, r.created_at, r.started_at,
                r.finished_at, r.status, coalesce(r.workflow, r.filename)) COLLATE "C" AS key) s
     WHERE r.org = p_org AND r.project = p_project
       AND (NOT p_top OR r.parent_run_id IS NULL)
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) ILIKE pat.w)
       AND (p_trigger IS NULL OR CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                                      ELSE coalesce(r.trigger_kind, 'manual') END = p_trigger)
       AND (p_since IS NULL OR r.created_at >= p_since)
       AND (p_until IS NULL OR r.created_at < p_until)
       AND (p_text IS NULL OR r.id ILIKE pat.t OR coalesce(r.workflow, r.filename) ILIKE pat.t
            OR r.input_clear::text ILIKE pat.t
            OR (p_input_hash IS NOT NULL AND p_input_hash = ANY (r.input_hashes))
            OR EXISTS (SELECT 1 FROM cryo.journal j WHERE j.run_id = r.id AND j.label ILIKE pat.t))
       AND (p_before IS NULL OR CASE
              WHEN p_order IS NULL THEN (r.created_at, r.id) < (SELECT c.created_at, c.id FROM cursor_row c)
              WHEN pat.down THEN (s.key, r.id) < (SELECT c.key, c.id FROM cursor_row c)
              ELSE (s.key, r.id) > (SELECT c.key, c.id FROM cursor_row c) END)
     ORDER BY CASE WHEN p_order IS NULL THEN r.created_at END DESC,
              CASE WHEN pat.down THEN s.key END DESC,
              CASE WHEN NOT pat.down THEN s.key END ASC,
              CASE WHEN NOT pat.down THEN r.id END ASC,
              r.id DESC
     LIMIT least(greatest(p_limit, 0), 200)
$$;
COMMENT ON FUNCTION cryo.search_runs(text, text, text, text, text, text, timestamptz, timestamptz, text, integer, text, boolean, bytea) IS
    'Returns one page (at most 200) of a project''s runs, children included (p_top: top-level runs only), newest first or in p_order (started, ended, duration, status or workflow; a leading - for descending) after the cursor run p_before, whose id, workflow or file name, clear input or a step label contains p_text (case-insensitive), or one of whose input''s scalar values has the keyed hash p_input_hash, filtered by status, workflow substring, trigger kind (manual, parent, schedule, webhook, event) and created_at in [p_since, p_until). Raises CR236 for an unknown p_order.';

-- What the run page shows beside get_run: the sealed input (or the clear one an
-- application passed from SQL), the parent or trigger that started the run, and its trust.
CREATE OR REPLACE FUNCTION cryo.read_run_detail(p_run_id text)
RETURNS TABLE (input bytea, input_clear jsonb, parent_run_id text, trigger_kind text,
               trigger_name text, trigger_depth integer, untrusted boolean)
LANGUAGE sql STABLE AS $$
    SELECT r.input, r.input_clear, r.parent_run_id, r.trigger_kind, r.trigger_name, r.trigger_depth,
           r.untrusted
      FROM cryo.runs r WHERE r.id = p_run_id
$$;
COMMENT ON FUNCTION cryo.read_run_detail(text) IS
    'Returns a run''s input (sealed, or in the clear until its first claim seals it; both for a handler run of a sealed event, see _start_triggered), its parent run id, the trigger (kind, name, handler depth) that started it and whether it runs untrusted; no row for an unknown run. Raises nothing.';

-- The entity cells a run touched, for the run page's State section: those it created or
-- wrote last (a cell remembers no other writer). Values stay sealed.
CREATE OR REPLACE FUNCTION cryo.run_entity_cells(p_run_id text, p_limit integer DEFAULT 200)
RETURNS TABLE (entity text, key text, value bytea, version bigint, created_by_run text,
               updated_by_run text, updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.entity, c.key, c.value, c.version, c.created_by_run, c.updated_by_run, c.updated_at
      FROM cryo.runs r
      JOIN cryo.state_cells c ON c.org = r.org AND c.project = r.project
     WHERE r.id = p_run_id AND c.entity IS NOT NULL
       AND (c.created_by_run = p_run_id OR c.updated_by_run = p_run_id)
     ORDER BY c.entity, c.key LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.run_entity_cells(text, integer) IS
    'Returns up to p_limit entity cells of the run''s project that the run created or wrote last, with versions (values sealed). Raises nothing.';

-- The run's history for the run view: kinds and identities in the clear, payloads sealed,
-- and the label the call was given (`cryopg step NAME --label L`), from its journal row.
CREATE OR REPLACE FUNCTION cryo.read_history(p_run_id text)
RETURNS TABLE (id bigint, kind text, family text, name text, ordinal integer, attempt integer,
               payload bytea, created_at timestamptz, label text)
LANGUAGE sql STABLE AS $$
    SELECT cryo._app_run_check(p_run_id);
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
    'Returns a run''s history events in order (payloads sealed), each with the label of its durable call when it has one. Raises CR021 when the caller is an application role of another tenant (or of none).';

-- A run's checkpoints for the run page: its journal entries in position order, names
-- and times in the clear and no payload. A pending step is a step running now; a
-- pending entry of another family is the call the run is parked on.
CREATE OR REPLACE FUNCTION cryo.read_checkpoints(p_run_id text, p_limit integer DEFAULT 1000)
RETURNS TABLE (seq integer, family text, name text, ordinal integer, label text,
               attempt integer, status text, exit_code integer, due_at timestamptz,
               created_at timestamptz, completed_at timestamptz, ref_run_id text)
LANGUAGE sql STABLE AS $$
    SELECT j.seq, j.key_family, j.key_name, j.key_ordinal, j.label, j.attempt, j.status,
           j.exit_code, j.due_at, j.created_at, j.completed_at, j.ref_run_id
      FROM cryo.journal j WHERE j.run_id = p_run_id
     ORDER BY j.seq LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.read_checkpoints(text, integer) IS
    'Returns up to p_limit of a run''s journal entries in position order, without payloads (status pending: running now, or waited on). Raises nothing.';

-- The last chunks of a run's log, for a tail window: chunk ids after which the newest
-- p_bytes (at least one chunk) begin. Returns the id to read from (0: the whole log).
CREATE OR REPLACE FUNCTION cryo.log_tail_start(p_run_id text, p_bytes bigint)
RETURNS TABLE (after_id bigint, skipped_bytes bigint, total_bytes bigint)
LANGUAGE sql STABLE AS $$
    WITH sized AS (
        SELECT l.id, octet_length(l.data) AS n,
               sum(octet_length(l.data)) OVER (ORDER BY l.id DESC) AS from_end
          FROM cryo.logs l WHERE l.run_id = p_run_id
    ), cut AS (
        SELECT min(id) AS first_kept FROM sized WHERE from_end - n < p_bytes
    )
    SELECT coalesce((SELECT max(s.id) FROM sized s, cut WHERE s.id < cut.first_kept), 0),
           coalesce((SELECT sum(s.n) FROM sized s, cut WHERE s.id < cut.first_kept), 0)::bigint,
           coalesce((SELECT sum(s.n) FROM sized s), 0)::bigint
$$;
COMMENT ON FUNCTION cryo.log_tail_start(text, bigint) IS
    'Returns where a tail window of about p_bytes of a run''s log starts: the chunk id to read after, how many (sealed) bytes come before it, and the log''s total. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_logs(p_run_id text, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
RETURNS TABLE (id bigint, data bytea, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT l.id, l.data, l.created_at FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id > p_after
     ORDER BY l.id LIMIT p_limit
$$;
COMMENT ON FUNCTION cryo.read_logs(text, bigint, integer) IS
    'Returns up to p_limit sealed log chunks of a run after chunk id p_after, in order, each with the time it was stored. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_events(
    p_org text, p_project text, p_name text DEFAULT NULL, p_limit integer DEFAULT 50)
RETURNS TABLE (id bigint, name text, payload bytea, payload_clear jsonb, emitted_by_run text,
               created_at timestamptz, depth integer, untrusted boolean, refused text)
LANGUAGE sql STABLE AS $$
    SELECT e.id, e.name, e.payload, e.payload_clear, e.emitted_by_run, e.created_at, e.depth,
           e.untrusted, e.refused
      FROM cryo.events e
     WHERE e.org = p_org AND e.project = p_project AND (p_name IS NULL OR e.name = p_name)
     ORDER BY e.id DESC LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.list_events(text, text, text, integer) IS
    'Returns a project''s newest bus events first (payloads sealed unless sent in the clear from SQL), each with its depth in a chain of handler runs, whether it is untrusted, and why no handler run started (refused), if so. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_outputs(p_run_id text)
RETURNS TABLE (key text, value bytea, value_clear jsonb)
LANGUAGE sql STABLE AS $$
    SELECT o.key, o.value, o.value_clear FROM cryo.run_outputs o WHERE o.run_id = p_run_id ORDER BY o.key
$$;
COMMENT ON FUNCTION cryo.read_outputs(text) IS 'Returns a run''s outputs by key: sealed, or (value NULL) value_clear, an answer holding no user data as {"answer": v}. Raises nothing.';

-- The log of a run's latest attempt: what collecting an activity prints.
-- (PL/pgSQL, so its plan is kept: a graph's driver reads this for every shell node.)
CREATE OR REPLACE FUNCTION cryo.read_last_attempt_log(p_run_id text)
RETURNS TABLE (id bigint, data bytea, created_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT l.id, l.data, l.created_at FROM cryo.logs l JOIN cryo.runs r ON r.id = l.run_id
     WHERE l.run_id = p_run_id AND l.attempt = r.attempt ORDER BY l.id;
END
$$;
COMMENT ON FUNCTION cryo.read_last_attempt_log(text) IS
    'Returns the sealed log chunks of a run''s latest attempt, in order. Raises nothing.';

-- Views for DBAs: ids, statuses, names and times; payloads stay sealed. An application
-- role (cryo_app) reads them too, and sees only its tenant's rows: every view keeps the
-- rows whose 'org:project:' matches cryo._app_tenant() (one initplan per query; '%' for
-- DBAs and the engine). security_barrier, so no function in the reader's own WHERE
-- sees a row before that filter has dropped it.

CREATE OR REPLACE VIEW cryo.run_overview WITH (security_barrier) AS
SELECT r.id, r.org, r.project, r.workflow, r.filename, r.status, r.substate, r.attempt,
       r.exit_code, r.error, r.created_at, r.started_at, r.finished_at,
       cryo.now() - r.created_at AS age,
       coalesce(r.finished_at, cryo.now()) - r.started_at AS run_time,
       q.wake_at, q.agent_id
  FROM cryo.runs r LEFT JOIN cryo.queue q ON q.run_id = r.id
 WHERE r.org || ':' || r.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.run_overview IS 'One row per run: status, substate, attempt, ages, and its live queue facts.';

CREATE OR REPLACE VIEW cryo.parked_runs WITH (security_barrier) AS
SELECT q.run_id, q.org, q.project, q.park_reason AS reason, q.park_path AS waiting_on,
       q.park_name AS waiting_for_name,
       q.parked_at, q.wake_at, q.wake_at - cryo.now() AS wakes_in,
       cryo.now() - q.parked_at AS parked_for
  FROM cryo.queue q WHERE q.state = 'parked' AND q.org || ':' || q.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.parked_runs IS 'Runs suspended in the queue: why (reason, the call they wait on) and until when.';

CREATE OR REPLACE VIEW cryo.live_claims WITH (security_barrier) AS
SELECT q.run_id, q.org, q.project, q.agent_id, q.claimed_at, q.claim_expires_at,
       q.claim_expires_at - cryo.now() AS expires_in, r.attempt
  FROM cryo.queue q JOIN cryo.runs r ON r.id = q.run_id
 WHERE q.state = 'claimed' AND q.org || ':' || q.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.live_claims IS 'Claims held right now: which agent, since when, and when the claim expires unless renewed.';

CREATE OR REPLACE VIEW cryo.pending_runs WITH (security_barrier) AS
SELECT q.run_id, q.org, q.project, q.required_caps, q.enqueued_at, cryo.now() - q.enqueued_at AS waiting_for
  FROM cryo.queue q WHERE q.state = 'pending' AND q.org || ':' || q.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.pending_runs IS 'Runs waiting for an agent, oldest first by enqueued_at.';

CREATE OR REPLACE VIEW cryo.lease_holders WITH (security_barrier) AS
SELECT l.org, l.project, l.grp AS concurrency_group, l.holder_run_id, l.kind, l.scoped,
       l.acquired_at, cryo.now() - l.acquired_at AS held_for, r.status AS holder_status,
       (SELECT count(*) FROM cryo.lease_waiters w
         WHERE w.org = l.org AND w.project = l.project AND w.grp = l.grp) AS waiting
  FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
 WHERE l.org || ':' || l.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.lease_holders IS 'One row per held concurrency group lease (a submit''s group or a script''s lock): the holding run, since when, and how many wait.';

CREATE OR REPLACE VIEW cryo.lease_queues WITH (security_barrier) AS
SELECT w.org, w.project, w.grp AS concurrency_group, w.run_id, w.kind,
       row_number() OVER (PARTITION BY w.org, w.project, w.grp ORDER BY w.id) AS position,
       w.enqueued_at, cryo.now() - w.enqueued_at AS waiting_for
  FROM cryo.lease_waiters w
 WHERE w.org || ':' || w.project || ':' LIKE (SELECT cryo._app_tenant());
COMMENT ON VIEW cryo.lease_queues IS 'Runs waiting for a concurrency group''s lease, with their FIFO position (1 is next).';

CREATE OR REPLACE FUNCTION cryo.read_event(p_id bigint)
RETURNS TABLE (name text, payload bytea, payload_clear jsonb)
LANGUAGE sql STABLE AS $$
    SELECT e.name, e.payload, e.payload_clear FROM cryo.events e WHERE e.id = p_id
$$;
COMMENT ON FUNCTION cryo.read_event(bigint) IS
    'Returns one bus event''s name and payload (sealed, or clear from SQL); no row when it is gone. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_webhook_deliveries(p_org text, p_project text,
                                                         p_limit integer DEFAULT 20)
RETURNS TABLE (webhook text, event text, outcome text, run_id text, event_id bigint,
               created_at timestamptz, id bigint, redelivery_of bigint, redelivered_by text,
               redeliverable boolean)
LANGUAGE sql STABLE AS $$
    SELECT d.webhook, d.event, d.outcome, d.run_id, d.event_id, d.created_at, d.id,
           d.redelivery_of, d.redelivered_by, d.input IS NOT NULL
      FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project
     ORDER BY d.created_at DESC LIMIT least(greatest(p_limit, 0), 200)
$$;
COMMENT ON FUNCTION cryo.list_webhook_deliveries(text, text, integer) IS
    'Returns a project''s latest accepted webhook deliveries, newest first (at most 200): the webhook, the event, the outcome (started | skipped | ignored | published | paused), the run started or event published, the delivery''s id, the first delivery a redelivery repeats and who asked for it, and whether it can be delivered again. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_logs_before(p_run_id text, p_before bigint, p_limit integer DEFAULT 64)
RETURNS TABLE (id bigint, data bytea, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT l.id, l.data, l.created_at FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id < p_before
     ORDER BY l.id DESC LIMIT greatest(p_limit, 0)
$$;
COMMENT ON FUNCTION cryo.read_logs_before(text, bigint, integer) IS
    'Returns up to p_limit sealed log chunks of a run before chunk id p_before, newest first, each with the time it was stored (a log viewer reading backwards). Raises nothing.';
