-- Waiting on the world: signals to one run, events on a project's bus, child runs and
-- fan-out activities, and run outputs. Every wait parks its run as one queue row and a
-- pending journal marker; whatever satisfies it completes the marker and re-pends the
-- row in the same transaction, so a wake is never half done.

-- The exit code a finished child reports to whoever collects it.
CREATE OR REPLACE FUNCTION cryo._outcome_code(p_status text, p_exit_code integer)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_status WHEN 'succeeded' THEN 0
                         WHEN 'cancelled' THEN 130
                         WHEN 'failed' THEN coalesce(nullif(p_exit_code, 0), 1)
                         ELSE 1 END
$$;

CREATE OR REPLACE FUNCTION cryo._check_name(p_what text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 200 OR p_name ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION '% name must be 1 to 200 printable characters', p_what USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo._check_timeout(p_timeout double precision)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_timeout IS NOT NULL AND (p_timeout < 0 OR p_timeout = 'infinity'::float8
                                  OR p_timeout = 'NaN'::float8) THEN
        RAISE EXCEPTION 'a timeout must be a finite number of seconds >= 0' USING ERRCODE = 'CR004';
    END IF;
END
$$;

-- A pending journal marker at the run's next position: the call this run is waiting on.
CREATE OR REPLACE FUNCTION cryo._add_marker(
    p_q cryo.queue, p_path text, p_family text, p_name text, p_ordinal integer,
    p_due timestamptz, p_ref_run_id text DEFAULT NULL)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, attempt, status, due_at, ref_run_id, created_at)
    SELECT p_q.run_id, p_q.org, p_q.project,
           cryo._next_seq(p_q.run_id),
           p_path, 'run', p_family, p_name, p_ordinal, r.attempt, 'pending', p_due, p_ref_run_id,
           cryo.now()
      FROM cryo.runs r WHERE r.id = p_q.run_id
    ON CONFLICT (run_id, path) DO NOTHING
$$;

-- A recorded answer at the run's next position, for a wait satisfied without parking.
CREATE OR REPLACE FUNCTION cryo._add_answer(
    p_q cryo.queue, p_path text, p_family text, p_name text, p_ordinal integer,
    p_result bytea, p_answer_clear jsonb, p_exit_code integer, p_ref_run_id text DEFAULT NULL)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.journal (run_id, org, project, seq, path, key_scope, key_family, key_name,
                              key_ordinal, attempt, status, result, answer_clear, exit_code,
                              ref_run_id, created_at, completed_at)
    SELECT p_q.run_id, p_q.org, p_q.project,
           cryo._next_seq(p_q.run_id),
           p_path, 'run', p_family, p_name, p_ordinal, r.attempt, 'done', p_result, p_answer_clear,
           p_exit_code, p_ref_run_id, cryo.now(), cryo.now()
      FROM cryo.runs r WHERE r.id = p_q.run_id
    ON CONFLICT (run_id, path) DO NOTHING
$$;

-- Parks a claimed run on a wait and ends its claim.
CREATE OR REPLACE FUNCTION cryo._park_claimed(
    p_run_id text, p_reason text, p_path text, p_name text, p_wake timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.queue
       SET state = 'parked', wake_at = p_wake, park_reason = p_reason, park_path = p_path,
           park_name = p_name, parked_at = cryo.now(), claim_token = NULL, agent_id = NULL,
           claimed_at = NULL, lease_expires_at = NULL
     WHERE run_id = p_run_id;
    UPDATE cryo.runs SET status = 'parked', substate = p_reason, updated_at = cryo.now()
     WHERE id = p_run_id;
    PERFORM cryo._notify_run(p_run_id);
END
$$;

-- Completes the marker a parked run waits on and makes the run claimable again.
CREATE OR REPLACE FUNCTION cryo._wake_parked(
    p_q cryo.queue, p_result bytea, p_answer_clear jsonb, p_exit_code integer, p_kind text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_marker cryo.journal;
BEGIN
    UPDATE cryo.journal SET status = 'done', result = p_result, answer_clear = p_answer_clear,
                            exit_code = p_exit_code, completed_at = cryo.now()
     WHERE run_id = p_q.run_id AND path = p_q.park_path
    RETURNING * INTO v_marker;
    UPDATE cryo.queue
       SET state = 'pending', wake_at = NULL, park_reason = NULL, park_path = NULL,
           park_name = NULL, parked_at = NULL, enqueued_at = cryo.now()
     WHERE run_id = p_q.run_id;
    UPDATE cryo.runs SET status = 'pending', substate = NULL, updated_at = cryo.now()
     WHERE id = p_q.run_id;
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, p_kind, v_marker.key_family,
                          v_marker.key_name, v_marker.key_ordinal);
    PERFORM pg_notify('cryo_work', '');
    PERFORM cryo._notify_run(p_q.run_id);
END
$$;

-- The recorded answer at a path, for a call retried within one claim.
CREATE OR REPLACE FUNCTION cryo._done_memo(p_run_id text, p_path text)
RETURNS cryo.journal
LANGUAGE sql STABLE AS $$
    SELECT * FROM cryo.journal WHERE run_id = p_run_id AND path = p_path AND status = 'done'
$$;

-- -- signals ----------------------------------------------------------------------------

-- Delivers a signal to a run. A run parked on that signal name wakes with it in this
-- transaction; otherwise it waits in the run's queue of signals for the next wait.
CREATE OR REPLACE FUNCTION cryo.send_signal(
    p_run_id text, p_name text, p_payload bytea DEFAULT NULL, p_payload_clear jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
    v_q cryo.queue;
    v_id bigint;
BEGIN
    PERFORM cryo._check_name('signal', p_name);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no run %', p_run_id USING ERRCODE = 'CR003';
    END IF;
    IF v_run.status IN ('succeeded', 'failed', 'cancelled', 'unreadable') THEN
        RAISE EXCEPTION 'run % already finished (%); it takes no signals', p_run_id, v_run.status
            USING ERRCODE = 'CR006';
    END IF;
    INSERT INTO cryo.signals (run_id, org, project, name, payload, payload_clear, sent_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_name, p_payload, p_payload_clear, cryo.now())
    RETURNING id INTO v_id;
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'signal_sent', 'signal', p_name);
    IF v_q.state = 'parked' AND v_q.park_reason = 'awaiting-signal' AND v_q.park_name = p_name THEN
        -- The waiter takes the oldest unconsumed signal of the name: this one.
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = v_q.park_path WHERE id = v_id;
        PERFORM cryo._wake_parked(v_q, p_payload, p_payload_clear, 0, 'signal_received');
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.send_signal(text, text, bytea, jsonb) IS
    'Sends a named signal (sealed payload, or a clear jsonb one) to a live run, waking it when it waits on that name; returns the signal id. Raises CR003 for an unknown run, CR006 for a finished one, CR004 for a bad name.';

CREATE OR REPLACE FUNCTION cryo.signal_run(p_run_id text, p_name text, p_payload jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT cryo.send_signal(p_run_id, p_name, NULL, coalesce(p_payload, 'null'::jsonb))
$$;
COMMENT ON FUNCTION cryo.signal_run(text, text, jsonb) IS
    'For applications: sends a signal with a jsonb payload (stored as sent, not sealed); returns the signal id. Raises as cryo.send_signal.';

-- A run waits on a signal name. A queued signal is taken at once (the oldest); with
-- none, the run parks until one arrives or the timeout passes (exit code 124).
CREATE OR REPLACE FUNCTION cryo.wait_signal(
    p_run_id text, p_token uuid, p_path text, p_name text, p_ordinal integer,
    p_timeout double precision DEFAULT NULL)
RETURNS TABLE (parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_sig cryo.signals;
BEGIN
    PERFORM cryo._check_name('signal', p_name);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    SELECT * INTO v_sig FROM cryo.signals s
     WHERE s.run_id = p_run_id AND s.name = p_name AND s.consumed_at IS NULL
     ORDER BY s.id LIMIT 1 FOR UPDATE;
    IF FOUND THEN
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = p_path WHERE id = v_sig.id;
        PERFORM cryo._add_answer(v_q, p_path, 'signal', p_name, p_ordinal, v_sig.payload,
                                 v_sig.payload_clear, 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'signal_received', 'signal', p_name, p_ordinal);
        RETURN QUERY SELECT false, v_sig.payload, v_sig.payload_clear, false;
        RETURN;
    END IF;
    IF p_timeout = 0 THEN
        PERFORM cryo._add_answer(v_q, p_path, 'signal', p_name, p_ordinal, NULL, NULL, 124);
        RETURN QUERY SELECT false, NULL::bytea, NULL::jsonb, true;
        RETURN;
    END IF;
    PERFORM cryo._add_marker(v_q, p_path, 'signal', p_name, p_ordinal,
                             cryo.now() + make_interval(secs => p_timeout));
    PERFORM cryo._park_claimed(p_run_id, 'awaiting-signal', p_path, p_name,
                               cryo.now() + make_interval(secs => p_timeout));
    RETURN QUERY SELECT true, NULL::bytea, NULL::jsonb, false;
END
$$;
COMMENT ON FUNCTION cryo.wait_signal(text, uuid, text, text, integer, double precision) IS
    'Takes the oldest queued signal of the name for the claimed run, or parks it until one arrives (or p_timeout seconds pass; a timeout records exit code 124); returns (parked, payload, payload_clear, timed_out). Raises CR002 for a stale claim, CR004 for a bad name or timeout.';

-- -- the event bus ----------------------------------------------------------------------

-- Publishes an event on a project's bus and wakes every run parked waiting on its name,
-- in one set-based statement over an index of pending event markers.
CREATE OR REPLACE FUNCTION cryo.publish_event(
    p_org text, p_project text, p_name text, p_payload bytea DEFAULT NULL,
    p_payload_clear jsonb DEFAULT NULL, p_run_id text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_now timestamptz := cryo.now();
    v_woken integer;
BEGIN
    PERFORM cryo._check_name('event', p_name);
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    -- Serialises with wait_event on this name: a waiter parks either before this event
    -- (and is woken by it) or after it (and waits for the next).
    PERFORM pg_advisory_xact_lock(hashtextextended(p_org || '/' || p_project || '/' || p_name, 7));
    INSERT INTO cryo.events (org, project, name, payload, payload_clear, emitted_by_run, created_at)
    VALUES (p_org, p_project, p_name, p_payload, p_payload_clear, p_run_id, v_now)
    RETURNING id INTO v_id;
    WITH woken AS (
        UPDATE cryo.journal j
           SET status = 'done', result = p_payload, answer_clear = p_payload_clear, exit_code = 0,
               completed_at = v_now
         WHERE j.org = p_org AND j.project = p_project AND j.key_family = 'event'
           AND j.key_name = p_name AND j.status = 'pending'
        RETURNING j.run_id, j.path, j.key_ordinal
    ), requeued AS (
        UPDATE cryo.queue q
           SET state = 'pending', wake_at = NULL, park_reason = NULL, park_path = NULL,
               park_name = NULL, parked_at = NULL, enqueued_at = v_now
          FROM woken WHERE q.run_id = woken.run_id AND q.park_path = woken.path
        RETURNING q.run_id
    ), runs_back AS (
        UPDATE cryo.runs r SET status = 'pending', substate = NULL, updated_at = v_now
          FROM requeued WHERE r.id = requeued.run_id
        RETURNING r.id
    )
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, created_at)
    SELECT woken.run_id, p_org, p_project, 'event_received', 'run', 'event', p_name,
           woken.key_ordinal, v_now
      FROM woken JOIN runs_back ON runs_back.id = woken.run_id;
    GET DIAGNOSTICS v_woken = ROW_COUNT;
    IF v_woken > 0 THEN
        PERFORM pg_notify('cryo_work', '');
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.publish_event(text, text, text, bytea, jsonb, text) IS
    'Appends an event (sealed payload, or a clear jsonb one) to the project bus and wakes every run parked on its name; returns the event id. Raises CR005 for an unknown project, CR004 for a bad name.';

CREATE OR REPLACE FUNCTION cryo.emit_event(p_org text, p_project text, p_name text, p_payload jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT cryo.publish_event(p_org, p_project, p_name, NULL, coalesce(p_payload, 'null'::jsonb))
$$;
COMMENT ON FUNCTION cryo.emit_event(text, text, text, jsonb) IS
    'For applications: publishes an event with a jsonb payload (stored as sent, not sealed); returns the event id. Raises as cryo.publish_event.';

-- A run's emit: memoized by call order, so a replay never publishes twice.
CREATE OR REPLACE FUNCTION cryo.emit_from_run(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer, p_name text, p_payload bytea)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_id bigint;
BEGIN
    IF v_memo.path IS NOT NULL THEN
        RETURN (v_memo.answer_clear ->> 'event_id')::bigint;
    END IF;
    v_id := cryo.publish_event(v_q.org, v_q.project, p_name, p_payload, NULL, p_run_id);
    PERFORM cryo._add_answer(v_q, p_path, 'emit', '', p_ordinal, NULL,
                             jsonb_build_object('event_id', v_id, 'name', p_name), 0);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'event_emitted', 'emit', '', p_ordinal);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.emit_from_run(text, uuid, text, integer, text, bytea) IS
    'Publishes an event from the claimed run and records that it did; a repeat at the same path returns the first event id. Raises CR002 for a stale claim, CR004 for a bad name.';

-- A run waits for the next event of a name published after the wait began.
CREATE OR REPLACE FUNCTION cryo.wait_event(
    p_run_id text, p_token uuid, p_path text, p_name text, p_ordinal integer,
    p_timeout double precision DEFAULT NULL)
RETURNS TABLE (parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_due timestamptz;
BEGIN
    PERFORM cryo._check_name('event', p_name);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    IF p_timeout = 0 THEN
        PERFORM cryo._add_answer(v_q, p_path, 'event', p_name, p_ordinal, NULL, NULL, 124);
        RETURN QUERY SELECT false, NULL::bytea, NULL::jsonb, true;
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(v_q.org || '/' || v_q.project || '/' || p_name, 7));
    v_due := cryo.now() + make_interval(secs => p_timeout);
    PERFORM cryo._add_marker(v_q, p_path, 'event', p_name, p_ordinal, v_due);
    PERFORM cryo._park_claimed(p_run_id, 'awaiting-event', p_path, p_name, v_due);
    RETURN QUERY SELECT true, NULL::bytea, NULL::jsonb, false;
END
$$;
COMMENT ON FUNCTION cryo.wait_event(text, uuid, text, text, integer, double precision) IS
    'Parks the claimed run until an event of the name is published (or p_timeout seconds pass; a timeout records exit code 124); returns (parked, payload, payload_clear, timed_out), answering from the memo when already recorded. Raises CR002 for a stale claim, CR004 for a bad name or timeout.';

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

-- Deletes bus events older than their project's retention, a batch at a time.
CREATE OR REPLACE FUNCTION cryo._purge_events(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.events e WHERE e.id IN (
        SELECT e2.id FROM cryo.events e2 JOIN cryo.projects p ON p.org = e2.org AND p.slug = e2.project
         WHERE e2.created_at < cryo.now() - p.event_retention
         ORDER BY e2.created_at LIMIT p_batch);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- -- children and activities --------------------------------------------------------------

-- Starts a child run from the claimed run; memoized by call order.
CREATE OR REPLACE FUNCTION cryo.spawn_run(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer, p_filename text,
    p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[])
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_child text;
BEGIN
    IF v_memo.path IS NOT NULL THEN
        RETURN v_memo.ref_run_id;
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, p_filename, p_interpreter, p_source, p_input, NULL,
        p_required_caps) s;
    UPDATE cryo.runs SET parent_run_id = p_run_id WHERE id = v_child;
    PERFORM cryo._add_answer(v_q, p_path, 'spawn', '', p_ordinal, NULL,
                             jsonb_build_object('run_id', v_child), 0, v_child);
    RETURN v_child;
END
$$;
COMMENT ON FUNCTION cryo.spawn_run(text, uuid, text, integer, text, text, bytea, bytea, text[]) IS
    'Submits a child run of the claimed run and records it; a repeat at the same path returns the same child id. Raises CR002 for a stale claim, CR004 for a missing source.';

-- Starts a named fan-out child (an activity) running a command, with its retry policy.
CREATE OR REPLACE FUNCTION cryo.submit_activity(
    p_run_id text, p_token uuid, p_path text, p_name text, p_source bytea,
    p_required_caps text[], p_retries integer DEFAULT 0, p_retry_backoff double precision DEFAULT 0,
    p_retry_on integer[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_child text;
BEGIN
    PERFORM cryo._check_name('activity', p_name);
    IF v_memo.path IS NOT NULL THEN
        RETURN v_memo.ref_run_id;
    END IF;
    IF coalesce(p_retries, 0) < 0 OR coalesce(p_retry_backoff, 0) < 0 THEN
        RAISE EXCEPTION 'retries and retry backoff must be >= 0' USING ERRCODE = 'CR004';
    END IF;
    IF EXISTS (SELECT 1 FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name) THEN
        RAISE EXCEPTION 'activity % was already submitted in run %', p_name, p_run_id
            USING ERRCODE = 'CR007';
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, 'activity.sh', NULL, p_source, NULL, NULL, p_required_caps) s;
    UPDATE cryo.runs SET parent_run_id = p_run_id, activity_name = p_name,
                         retries_left = coalesce(p_retries, 0),
                         retry_backoff = coalesce(p_retry_backoff, 0), retry_on = p_retry_on
     WHERE id = v_child;
    PERFORM cryo._add_answer(v_q, p_path, 'activity', p_name, 0, NULL,
                             jsonb_build_object('run_id', v_child), 0, v_child);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activity_scheduled', 'activity', p_name, 0);
    RETURN v_child;
END
$$;
COMMENT ON FUNCTION cryo.submit_activity(text, uuid, text, text, bytea, text[], integer, double precision, integer[]) IS
    'Submits a named child job of the claimed run (a name is unique per run) with a retry policy; returns its run id, the same one for a repeat at the same path. Raises CR002 for a stale claim, CR007 for a name already used, CR004 for a bad policy.';

-- Collects a named activity: its exit code at once when it has finished, else parks.
CREATE OR REPLACE FUNCTION cryo.collect_activity(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer, p_name text)
RETURNS TABLE (parked boolean, child_run_id text, exit_code integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_child cryo.runs;
BEGIN
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT false, v_memo.ref_run_id, v_memo.exit_code;
        RETURN;
    END IF;
    SELECT * INTO v_child FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no activity % was submitted in run %', p_name, p_run_id USING ERRCODE = 'CR005';
    END IF;
    IF v_child.status IN ('succeeded', 'failed', 'cancelled', 'unreadable') THEN
        PERFORM cryo._add_answer(v_q, p_path, 'activity.collect', p_name, p_ordinal, NULL, NULL,
                                 cryo._outcome_code(v_child.status, v_child.exit_code), v_child.id);
        RETURN QUERY SELECT false, v_child.id, cryo._outcome_code(v_child.status, v_child.exit_code);
        RETURN;
    END IF;
    PERFORM cryo._add_marker(v_q, p_path, 'activity.collect', p_name, p_ordinal, NULL, v_child.id);
    PERFORM cryo._park_claimed(p_run_id, 'awaiting-children', p_path, p_name, NULL);
    RETURN QUERY SELECT true, v_child.id, NULL::integer;
END
$$;
COMMENT ON FUNCTION cryo.collect_activity(text, uuid, text, integer, text) IS
    'Returns (parked false, child, exit code) for a finished activity of the claimed run, or parks the run until it finishes (parked true). Raises CR002 for a stale claim, CR005 when no activity has the name.';

-- Children submitted as activities that no earlier collect has taken.
CREATE OR REPLACE FUNCTION cryo._uncollected(p_run_id text)
RETURNS SETOF cryo.runs
LANGUAGE sql STABLE AS $$
    SELECT c.* FROM cryo.runs c
     WHERE c.parent_run_id = p_run_id AND c.activity_name IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM cryo.journal j
                        WHERE j.run_id = p_run_id AND j.key_family = 'activity.collect'
                          AND j.status = 'done' AND j.ref_run_id = c.id)
$$;

-- Waits for every uncollected activity; the answer is how many of them failed.
CREATE OR REPLACE FUNCTION cryo.wait_all_activities(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer)
RETURNS TABLE (parked boolean, failed integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._done_memo(p_run_id, p_path);
    v_failed integer;
BEGIN
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT false, (v_memo.answer_clear ->> 'failed')::integer;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo._uncollected(p_run_id) c
                WHERE c.status NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable')) THEN
        PERFORM cryo._add_marker(v_q, p_path, 'activity.wait-all', '', p_ordinal, NULL);
        PERFORM cryo._park_claimed(p_run_id, 'awaiting-children', p_path, NULL, NULL);
        RETURN QUERY SELECT true, NULL::integer;
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE c.status <> 'succeeded') INTO v_failed FROM cryo._uncollected(p_run_id) c;
    PERFORM cryo._add_answer(v_q, p_path, 'activity.wait-all', '', p_ordinal, NULL,
                             jsonb_build_object('failed', v_failed), 0);
    RETURN QUERY SELECT false, v_failed;
END
$$;
COMMENT ON FUNCTION cryo.wait_all_activities(text, uuid, text, integer) IS
    'Returns (parked false, failed count) when every uncollected activity of the claimed run has finished, else parks the run until they have. Raises CR002 for a stale claim.';

-- Terminal hook: a finished child may be what its parent waits on.
CREATE OR REPLACE FUNCTION cryo._wake_parent(p_child_id text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_child cryo.runs;
    v_q cryo.queue;
    v_marker cryo.journal;
    v_failed integer;
BEGIN
    SELECT * INTO v_child FROM cryo.runs WHERE id = p_child_id;
    IF v_child.parent_run_id IS NULL THEN
        RETURN;
    END IF;
    SELECT * INTO v_q FROM cryo.queue
     WHERE run_id = v_child.parent_run_id AND state = 'parked' AND park_reason = 'awaiting-children'
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_marker FROM cryo.journal WHERE run_id = v_q.run_id AND path = v_q.park_path;
    IF v_marker.key_family = 'activity.collect' AND v_marker.ref_run_id = p_child_id THEN
        PERFORM cryo._wake_parked(v_q, NULL, NULL,
                                  cryo._outcome_code(v_child.status, v_child.exit_code), 'activity_completed');
    ELSIF v_marker.key_family = 'activity.wait-all' AND NOT EXISTS (
            SELECT 1 FROM cryo._uncollected(v_q.run_id) c
             WHERE c.status NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable')) THEN
        SELECT count(*) FILTER (WHERE c.status <> 'succeeded') INTO v_failed
          FROM cryo._uncollected(v_q.run_id) c;
        PERFORM cryo._wake_parked(v_q, NULL, jsonb_build_object('failed', v_failed), 0,
                                  'activities_completed');
    END IF;
END
$$;

-- A failed activity with retries left goes back to the queue after its backoff.
CREATE OR REPLACE FUNCTION cryo._retry_if_allowed(p_run_id text, p_exit_code integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF v_run.retries_left <= 0 OR v_run.cancel_requested
       OR (v_run.retry_on IS NOT NULL AND NOT (coalesce(p_exit_code, 1) = ANY (v_run.retry_on))) THEN
        RETURN false;
    END IF;
    UPDATE cryo.runs SET retries_left = retries_left - 1, status = 'parked', substate = 'retry-backoff',
                         exit_code = p_exit_code, updated_at = cryo.now()
     WHERE id = p_run_id;
    UPDATE cryo.queue
       SET state = 'parked', wake_at = cryo.now() + make_interval(secs => v_run.retry_backoff),
           park_reason = 'retry-backoff', park_path = NULL, park_name = NULL, parked_at = cryo.now(),
           claim_token = NULL, agent_id = NULL, claimed_at = NULL, lease_expires_at = NULL
     WHERE run_id = p_run_id;
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'retry_scheduled', p_attempt => v_run.attempt);
    PERFORM cryo._notify_run(p_run_id);
    RETURN true;
END
$$;

-- -- outputs --------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION cryo.set_output(p_run_id text, p_token uuid, p_key text, p_value bytea)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    PERFORM cryo._check_name('output', p_key);
    INSERT INTO cryo.run_outputs (run_id, org, project, key, value, updated_at)
    VALUES (p_run_id, v_q.org, v_q.project, p_key, p_value, cryo.now())
    ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;
END
$$;
COMMENT ON FUNCTION cryo.set_output(text, uuid, text, bytea) IS
    'Sets (or replaces) a sealed output of the claimed run. Returns nothing. Raises CR002 for a stale claim, CR004 for a bad key.';

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
