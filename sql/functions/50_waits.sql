-- Parking and waking. A run that waits -- on a timer, a signal, an event, a lease, a
-- child -- records a pending marker at its position and parks (cryo._park), which ends
-- its claim and frees its agent. Whatever satisfies the wait completes the marker and
-- re-pends the run in the same transaction (cryo._wake), so a wake is never half done.
-- A wait satisfied at once records its answer without parking.
--
-- Every durable call here takes the agent's position (p_position) and its identity;
-- the journal path is derived from the identity (cryo.call_path), and a p_path sent
-- along must agree with it.

-- -- sleep --------------------------------------------------------------------------------

-- Pins the deadline in a pending marker and parks; tick() wakes the run when it passes.
CREATE OR REPLACE FUNCTION cryo.park_sleep(
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer,
    p_seconds double precision, p_path text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text := cryo.call_path('sleep', '', p_ordinal, p_path);
    v_wake timestamptz;
BEGIN
    IF p_seconds IS NULL OR p_seconds < 0 OR p_seconds = 'infinity'::float8 OR p_seconds = 'NaN'::float8 THEN
        RAISE EXCEPTION 'sleep needs a finite duration of zero or more seconds, not %', p_seconds
            USING ERRCODE = 'CR004';
    END IF;
    -- A deadline pinned by an earlier pass stands (_park_on).
    v_wake := cryo._park_on(v_q, p_position, v_path, 'sleep', '', p_ordinal, 'sleeping', NULL,
                            cryo.now() + make_interval(secs => p_seconds));
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'timer_scheduled', 'sleep', '', p_ordinal);
    RETURN v_wake;
END
$$;
COMMENT ON FUNCTION cryo.park_sleep(text, uuid, integer, integer, double precision, text) IS
    'Parks the claimed run until now + p_seconds (or the deadline an earlier pass pinned) and ends the claim; returns the wake time. Raises CR002 for a stale claim token, CR004 for a bad duration or identity, CR009 for a disagreeing path.';

-- -- signals ------------------------------------------------------------------------------

-- Delivers a signal to a run: a jsonb payload from an application (stored as sent), or
-- a sealed one from the server. A run parked on that name wakes with it in this
-- transaction; otherwise it waits in the run's queue of signals for the next wait.
CREATE OR REPLACE FUNCTION cryo.send_signal(
    p_run_id text, p_name text, p_payload jsonb DEFAULT NULL, p_sealed bytea DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
    v_q cryo.queue;
    v_clear jsonb := CASE WHEN p_sealed IS NULL THEN coalesce(p_payload, 'null'::jsonb) END;
    v_id bigint;
BEGIN
    PERFORM cryo._app_run_check(p_run_id);
    PERFORM cryo._check_name('signal', p_name);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id FOR UPDATE;
    v_run := cryo._run_row(p_run_id, true, p_why => 'it takes no signals');
    INSERT INTO cryo.signals (run_id, org, project, name, payload, payload_clear, sent_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_name, p_sealed, v_clear, cryo.now())
    RETURNING id INTO v_id;
    PERFORM cryo._history(p_run_id, v_run.org, v_run.project, 'signal_sent', 'signal', p_name);
    IF v_run.kind = 'graph' THEN  -- its driver hands the signal to a node waiting for it
        IF EXISTS (SELECT 1 FROM cryo.node_instances i WHERE i.run_id = p_run_id
                      AND i.status = 'waiting' AND i.wait_kind = 'signal' AND i.wait_name = p_name) THEN
            PERFORM cryo._graph_poke(p_run_id, 'signal_received');
        END IF;
    ELSIF v_q.state = 'parked' AND v_q.park_reason = 'awaiting-signal' AND v_q.park_name = p_name THEN
        -- The waiter takes the oldest unconsumed signal of the name: this one.
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = v_q.park_path WHERE id = v_id;
        PERFORM cryo._wake(ARRAY[p_run_id], 'signal_received', p_sealed, v_clear, 0);
    END IF;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.send_signal(text, text, jsonb, bytea) IS
    'Sends a named signal to a live run -- p_payload as jsonb (applications; stored as sent, not sealed) or p_sealed (the server''s sealed payload) -- waking it when it waits on that name; returns the signal id. Raises CR003 for an unknown run, CR006 for a finished one, CR004 for a bad name, CR021 when the caller is an application role of another tenant (or of none).';

-- The tail wait_signal and wait_event share, once nothing can answer at once: a zero
-- timeout records exit code 124 now; any other parks the run on the call (a NULL
-- timeout waits for ever). Returns (parked, payload, payload_clear, timed_out).
CREATE OR REPLACE FUNCTION cryo._wait_or_time_out(
    p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text,
    p_ordinal integer, p_timeout double precision, p_reason text)
RETURNS TABLE (parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_timeout = 0 THEN
        PERFORM cryo._record(p_q, p_position, p_path, p_family, p_name, p_ordinal, NULL, NULL, 124);
        RETURN QUERY SELECT false, NULL::bytea, NULL::jsonb, true;
        RETURN;
    END IF;
    PERFORM cryo._park_on(p_q, p_position, p_path, p_family, p_name, p_ordinal, p_reason, p_name,
                          cryo.now() + make_interval(secs => p_timeout));
    RETURN QUERY SELECT true, NULL::bytea, NULL::jsonb, false;
END
$$;

-- A run waits on a signal name. A queued signal is taken at once (the oldest); with
-- none, the run parks until one arrives or the timeout passes (exit code 124).
CREATE OR REPLACE FUNCTION cryo.wait_signal(
    p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer,
    p_timeout double precision DEFAULT NULL, p_path text DEFAULT NULL)
RETURNS TABLE (parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal;
    v_path text;
    v_sig cryo.signals;
BEGIN
    PERFORM cryo._check_name('signal', p_name);
    v_memo := cryo._replay(p_run_id, 'signal', p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    SELECT * INTO v_sig FROM cryo.signals s
     WHERE s.run_id = p_run_id AND s.name = p_name AND s.consumed_at IS NULL
     ORDER BY s.id LIMIT 1 FOR UPDATE;
    IF FOUND THEN
        UPDATE cryo.signals SET consumed_at = cryo.now(), consumed_path = v_path WHERE id = v_sig.id;
        PERFORM cryo._record(v_q, p_position, v_path, 'signal', p_name, p_ordinal, v_sig.payload,
                             v_sig.payload_clear, 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'signal_received', 'signal', p_name, p_ordinal);
        RETURN QUERY SELECT false, v_sig.payload, v_sig.payload_clear, false;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM cryo._wait_or_time_out(v_q, p_position, v_path, 'signal', p_name,
                                                     p_ordinal, p_timeout, 'awaiting-signal');
END
$$;
COMMENT ON FUNCTION cryo.wait_signal(text, uuid, integer, text, integer, double precision, text) IS
    'Takes the oldest queued signal of the name for the claimed run, or parks it until one arrives (or p_timeout seconds pass; a timeout records exit code 124); returns (parked, payload, payload_clear, timed_out). Raises CR002 for a stale claim, CR004 for a bad name, timeout or identity, CR009 for a disagreeing path.';

-- -- the event bus ------------------------------------------------------------------------

-- Appends an event to a project's bus, wakes every run parked waiting on its name, and
-- sets off what it triggers (cancel_on, handlers: cryo._on_event). An event emitted by a
-- handler run is one deeper in its chain than the event that started that run, and an
-- event from an untrusted run (or delivery, p_untrusted) is untrusted: tainted.
--
-- Who hears it (docs/security/trust.md): a trusted waiter hears trusted events, and
-- tainted ones too only when it opted in by name (wait-event --tainted, journalled as
-- family event.tainted); an untrusted waiter hears tainted events and the trusted ones
-- their emitter published (p_public, which an untrusted emitter cannot set).
CREATE OR REPLACE FUNCTION cryo._publish_event(
    p_org text, p_project text, p_name text, p_sealed bytea, p_clear jsonb, p_run_id text,
    p_untrusted boolean DEFAULT false, p_public boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_waiters text[];
    v_depth integer := 0;
    v_untrusted boolean := coalesce(p_untrusted, false);
    v_published boolean;
BEGIN
    IF p_run_id IS NOT NULL THEN
        -- A node job of a graph handler run emits on behalf of its graph run.
        SELECT coalesce(r.trigger_depth + 1, g.trigger_depth + 1, 0), v_untrusted OR r.untrusted
          INTO v_depth, v_untrusted
          FROM cryo.runs r LEFT JOIN cryo.runs g ON g.id = r.parent_run_id
         WHERE r.id = p_run_id;
    END IF;
    v_untrusted := coalesce(v_untrusted, false);
    v_published := coalesce(p_public, false) AND NOT v_untrusted;
    PERFORM cryo._check_name('event', p_name);
    PERFORM cryo._require_project(p_org, p_project);
    -- Serialises with wait_event on this name: a waiter parks either before this event
    -- (and is woken by it) or after it (and waits for the next).
    PERFORM pg_advisory_xact_lock(hashtextextended(p_org || '/' || p_project || '/' || p_name, 7));
    INSERT INTO cryo.events (org, project, name, payload, payload_clear, emitted_by_run, depth,
                             untrusted, published, created_at)
    VALUES (p_org, p_project, p_name, p_sealed, p_clear, p_run_id, coalesce(v_depth, 0),
            v_untrusted, v_published, cryo.now())
    RETURNING id INTO v_id;
    SELECT array_agg(j.run_id) INTO v_waiters
      FROM cryo.journal j JOIN cryo.queue q ON q.run_id = j.run_id AND q.park_path = j.path
      JOIN cryo.runs r ON r.id = j.run_id
     WHERE j.org = p_org AND j.project = p_project AND j.key_family IN ('event', 'event.tainted')
       AND j.key_name = p_name AND j.status = 'pending' AND q.state = 'parked'
       AND CASE WHEN r.untrusted THEN v_untrusted OR v_published
                WHEN j.key_family = 'event.tainted' THEN true
                ELSE NOT v_untrusted END;
    IF v_waiters IS NOT NULL THEN
        PERFORM cryo._wake(v_waiters, 'event_received', p_sealed, p_clear, 0);
    END IF;
    -- Graph nodes waiting for it: their runs' drivers hand it over.
    PERFORM cryo._graph_poke(w.run_id, 'event_received')
       FROM (SELECT DISTINCT i.run_id FROM cryo.node_instances i
              WHERE i.org = p_org AND i.project = p_project AND i.wait_name = p_name
                AND i.status = 'waiting' AND i.wait_kind = 'event' ORDER BY 1) w;
    PERFORM cryo._on_event(p_org, p_project, p_name, v_id, p_sealed, p_clear, coalesce(v_depth, 0),
                           v_untrusted, p_run_id);
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION cryo.publish_event(
    p_org text, p_project text, p_name text, p_payload jsonb DEFAULT NULL,
    p_sealed bytea DEFAULT NULL, p_public boolean DEFAULT false)
RETURNS bigint
LANGUAGE sql AS $$
    SELECT cryo._app_tenant_check(p_org, p_project);
    SELECT cryo._publish_event(p_org, p_project, p_name, p_sealed,
                               CASE WHEN p_sealed IS NULL THEN coalesce(p_payload, 'null'::jsonb) END,
                               NULL, false, p_public)
$$;
COMMENT ON FUNCTION cryo.publish_event(text, text, text, jsonb, bytea, boolean) IS
    'Publishes a trusted event on the project bus -- p_payload as jsonb (applications; stored as sent, not sealed) or p_sealed (the server''s sealed payload) -- and wakes every trusted run parked on its name (with p_public, untrusted runs waiting on it too); returns the event id. Raises CR005 for an unknown project, CR004 for a bad name, CR021 when the caller is an application role of another tenant (or of none).';

-- A run's emit: a durable call, so a replay never publishes twice.
CREATE OR REPLACE FUNCTION cryo.emit_from_run(
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text,
    p_payload bytea, p_path text DEFAULT NULL, p_public boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'emit', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_id bigint;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN (v_memo.answer_clear ->> 'event_id')::bigint;
    END IF;
    v_id := cryo._publish_event(v_q.org, v_q.project, p_name, p_payload, NULL, p_run_id,
                                p_public => p_public);
    PERFORM cryo._record(v_q, p_position, v_path, 'emit', '', p_ordinal, NULL,
                         jsonb_build_object('event_id', v_id, 'name', p_name), 0);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'event_emitted', 'emit', '', p_ordinal);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.emit_from_run(text, uuid, integer, integer, text, bytea, text, boolean) IS
    'Publishes an event from the claimed run and records that it did; a repeat at the same path returns the first event id. An untrusted run''s event is tainted (trusted runs hear it only when they opt in); a trusted run''s p_public lets untrusted runs hear it too. Raises CR002 for a stale claim, CR004 for a bad name or identity, CR009 for a disagreeing path.';

-- A run waits for the next event of a name published after the wait began, of the
-- namespaces it hears (see _publish_event); p_tainted is a trusted run's opt-in to
-- tainted events of the name, a call of its own (family event.tainted).
CREATE OR REPLACE FUNCTION cryo.wait_event(
    p_run_id text, p_token uuid, p_position integer, p_name text, p_ordinal integer,
    p_timeout double precision DEFAULT NULL, p_path text DEFAULT NULL,
    p_tainted boolean DEFAULT false)
RETURNS TABLE (parked boolean, payload bytea, payload_clear jsonb, timed_out boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_family text := CASE WHEN p_tainted THEN 'event.tainted' ELSE 'event' END;
    v_memo cryo.journal;
    v_path text;
BEGIN
    PERFORM cryo._check_name('event', p_name);
    v_memo := cryo._replay(p_run_id, v_family, p_name, p_ordinal, p_path);
    v_path := v_memo.path;
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.result, v_memo.answer_clear, v_memo.exit_code = 124;
        RETURN;
    END IF;
    PERFORM cryo._check_timeout(p_timeout);
    IF p_timeout IS DISTINCT FROM 0 THEN
        -- Serialises with _publish_event on this name (see there).
        PERFORM pg_advisory_xact_lock(hashtextextended(v_q.org || '/' || v_q.project || '/' || p_name, 7));
    END IF;
    RETURN QUERY SELECT * FROM cryo._wait_or_time_out(v_q, p_position, v_path, v_family, p_name,
                                                     p_ordinal, p_timeout, 'awaiting-event');
END
$$;
COMMENT ON FUNCTION cryo.wait_event(text, uuid, integer, text, integer, double precision, text, boolean) IS
    'Parks the claimed run until an event of the name that it may hear is published (or p_timeout seconds pass; a timeout records exit code 124): a trusted run hears trusted events, with p_tainted tainted ones as well (journalled under family event.tainted); an untrusted run hears tainted events and published trusted ones. Returns (parked, payload, payload_clear, timed_out), answering from the memo when already recorded. Raises CR002 for a stale claim, CR004 for a bad name, timeout or identity, CR009 for a disagreeing path.';

-- -- leases on concurrency groups -----------------------------------------------------------

-- A script takes a group's lease: granted now when the group is free, else the run
-- parks (awaiting-lease) in the group's FIFO. A scoped lease is given back by
-- release_lease; a bare one is held until the run ends.
CREATE OR REPLACE FUNCTION cryo.acquire_lease(
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_group text,
    p_scoped boolean, p_path text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue;
    v_path text;
BEGIN
    PERFORM cryo._check_name('lease group', p_group);
    v_path := cryo.call_path('lock', p_group, p_ordinal, p_path);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id;
    IF FOUND THEN
        -- The group lock comes before the row lock, the order every hand-over takes.
        PERFORM cryo._lock_group(v_q.org, v_q.project, p_group);
    END IF;
    v_q := cryo._claimed_row(p_run_id, p_token);
    IF (cryo._done_memo(p_run_id, v_path)).path IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = v_q.org AND l.project = v_q.project
                  AND l.grp = p_group AND l.holder_run_id = p_run_id) THEN
        RAISE EXCEPTION 'run % already holds the lease on %', p_run_id, p_group USING ERRCODE = 'CR031';
    END IF;
    IF NOT cryo._group_full(v_q.org, v_q.project, p_group) THEN
        PERFORM cryo._take_lease(v_q.org, v_q.project, p_group, p_run_id, 'script', v_path, p_scoped);
        PERFORM cryo._record(v_q, p_position, v_path, 'lock', p_group, p_ordinal, NULL,
                             jsonb_build_object('group', p_group), 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_granted', 'lock', p_group, p_ordinal);
        RETURN true;
    END IF;
    PERFORM cryo._queue_for_lease(v_q.org, v_q.project, p_group, p_run_id, 'script', v_path, p_scoped);
    PERFORM cryo._park_on(v_q, p_position, v_path, 'lock', p_group, p_ordinal, 'awaiting-lease',
                          p_group, NULL);
    RETURN false;
END
$$;
COMMENT ON FUNCTION cryo.acquire_lease(text, uuid, integer, integer, text, boolean, text) IS
    'Takes the project lease on a concurrency group for the claimed run: true when granted (or already recorded at this path), false when the run parked in the group''s FIFO. Raises CR002 for a stale claim, CR031 when the run already holds the group, CR004 for a bad name or identity, CR009 for a disagreeing path.';

CREATE OR REPLACE FUNCTION cryo.release_lease(p_run_id text, p_token uuid, p_group text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue;
BEGIN
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id;
    IF FOUND THEN
        PERFORM cryo._lock_group(v_q.org, v_q.project, p_group);
    END IF;
    v_q := cryo._claimed_row(p_run_id, p_token);
    IF NOT EXISTS (SELECT 1 FROM cryo.leases l WHERE l.org = v_q.org AND l.project = v_q.project
                      AND l.grp = p_group AND l.holder_run_id = p_run_id) THEN
        RETURN false;  -- a replayed release: the lease went on the first pass
    END IF;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_released', 'lock', p_group);
    RETURN cryo._release_lease(v_q.org, v_q.project, p_group, p_run_id);
END
$$;
COMMENT ON FUNCTION cryo.release_lease(text, uuid, text) IS
    'Gives back the claimed run''s lease on a concurrency group and hands it to the oldest waiter; returns false when the run did not hold it. Raises CR002 for a stale claim.';

-- -- children and activities --------------------------------------------------------------

-- Starts a child run from the claimed run; a durable call, so a replay starts none.
CREATE OR REPLACE FUNCTION cryo.spawn_run(
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_filename text,
    p_interpreter text, p_source bytea, p_input bytea, p_required_caps text[],
    p_path text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'spawn', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_child text;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN v_memo.ref_run_id;
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, p_filename, p_interpreter, p_source, p_input, NULL,
        p_required_caps, p_parent_run_id => p_run_id) s;
    PERFORM cryo._record(v_q, p_position, v_path, 'spawn', '', p_ordinal, NULL,
                         jsonb_build_object('run_id', v_child), 0, v_child);
    RETURN v_child;
END
$$;
COMMENT ON FUNCTION cryo.spawn_run(text, uuid, integer, integer, text, text, bytea, bytea, text[], text) IS
    'Submits a child run of the claimed run and records it; a repeat at the same path returns the same child id. Raises CR002 for a stale claim, CR004 for a missing source or bad identity, CR009 for a disagreeing path.';

-- Starts a named fan-out child (an activity) running a command, with its retry policy.
-- A name is unique per run, so its identity is (activity, name, 0).
CREATE OR REPLACE FUNCTION cryo.submit_activity(
    p_run_id text, p_token uuid, p_position integer, p_name text, p_source bytea,
    p_required_caps text[], p_retries integer DEFAULT 0, p_retry_backoff double precision DEFAULT 0,
    p_retry_on integer[] DEFAULT NULL, p_path text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_path text;
    v_memo cryo.journal;
    v_child text;
BEGIN
    PERFORM cryo._check_name('activity', p_name);
    v_memo := cryo._replay(p_run_id, 'activity', p_name, 0);
    v_path := v_memo.path;
    IF v_memo.status = 'done' AND coalesce(p_path, v_path) = v_path THEN
        RETURN v_memo.ref_run_id;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name) THEN
        RAISE EXCEPTION 'activity % was already submitted in run %', p_name, p_run_id
            USING ERRCODE = 'CR007';
    END IF;
    PERFORM cryo.call_path('activity', p_name, 0, p_path);
    IF coalesce(p_retries, 0) < 0 OR coalesce(p_retry_backoff, 0) < 0 THEN
        RAISE EXCEPTION 'retries and retry backoff must be >= 0' USING ERRCODE = 'CR004';
    END IF;
    SELECT s.run_id INTO v_child FROM cryo.submit_script(
        v_q.org, v_q.project, 'activity.sh', NULL, p_source, NULL, NULL, p_required_caps,
        p_parent_run_id => p_run_id) s;
    UPDATE cryo.runs SET activity_name = p_name, retries_left = coalesce(p_retries, 0),
                         retry_backoff = coalesce(p_retry_backoff, 0), retry_on = p_retry_on
     WHERE id = v_child;
    PERFORM cryo._record(v_q, p_position, v_path, 'activity', p_name, 0, NULL,
                         jsonb_build_object('run_id', v_child), 0, v_child);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activity_scheduled', 'activity', p_name, 0);
    RETURN v_child;
END
$$;
COMMENT ON FUNCTION cryo.submit_activity(text, uuid, integer, text, bytea, text[], integer, double precision, integer[], text) IS
    'Submits a named child job of the claimed run (a name is unique per run) with a retry policy; returns its run id, the same one for a repeat at the same path. Raises CR002 for a stale claim, CR007 for a name already used, CR004 for a bad policy or name, CR009 for a disagreeing path.';

-- Collects a named activity: its exit code at once when it has finished, else parks.
CREATE OR REPLACE FUNCTION cryo.collect_activity(
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_name text,
    p_path text DEFAULT NULL)
RETURNS TABLE (parked boolean, child_run_id text, exit_code integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'activity.collect', p_name, p_ordinal, p_path);
    v_path text := v_memo.path;
    v_child cryo.runs;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, v_memo.ref_run_id, v_memo.exit_code;
        RETURN;
    END IF;
    SELECT * INTO v_child FROM cryo.runs WHERE parent_run_id = p_run_id AND activity_name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no activity % was submitted in run %', p_name, p_run_id USING ERRCODE = 'CR005';
    END IF;
    IF cryo.is_terminal(v_child.status) THEN
        PERFORM cryo._record(v_q, p_position, v_path, 'activity.collect', p_name, p_ordinal, NULL, NULL,
                             cryo._outcome_code(v_child.status, v_child.exit_code), v_child.id);
        -- collected at once (the activity had already ended): say so, as a wake would
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activity_completed',
                              'activity.collect', p_name, p_ordinal);
        RETURN QUERY SELECT false, v_child.id, cryo._outcome_code(v_child.status, v_child.exit_code);
        RETURN;
    END IF;
    PERFORM cryo._park_on(v_q, p_position, v_path, 'activity.collect', p_name, p_ordinal,
                          'awaiting-children', p_name, NULL, v_child.id);
    RETURN QUERY SELECT true, v_child.id, NULL::integer;
END
$$;
COMMENT ON FUNCTION cryo.collect_activity(text, uuid, integer, integer, text, text) IS
    'Returns (parked false, child, exit code) for a finished activity of the claimed run, or parks the run until it finishes (parked true). Raises CR002 for a stale claim, CR005 when no activity has the name, CR009 for a disagreeing path.';

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
    p_run_id text, p_token uuid, p_position integer, p_ordinal integer, p_path text DEFAULT NULL)
RETURNS TABLE (parked boolean, failed integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_memo cryo.journal := cryo._replay(p_run_id, 'activity.wait-all', '', p_ordinal, p_path);
    v_path text := v_memo.path;
    v_failed integer;
BEGIN
    IF v_memo.status = 'done' THEN
        RETURN QUERY SELECT false, (v_memo.answer_clear ->> 'failed')::integer;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM cryo._uncollected(p_run_id) c WHERE NOT cryo.is_terminal(c.status)) THEN
        PERFORM cryo._park_on(v_q, p_position, v_path, 'activity.wait-all', '', p_ordinal,
                              'awaiting-children', NULL, NULL);
        RETURN QUERY SELECT true, NULL::integer;
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE c.status <> 'succeeded') INTO v_failed FROM cryo._uncollected(p_run_id) c;
    PERFORM cryo._record(v_q, p_position, v_path, 'activity.wait-all', '', p_ordinal, NULL,
                         jsonb_build_object('failed', v_failed), 0);
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'activities_completed',
                          'activity.wait-all', '', p_ordinal);
    RETURN QUERY SELECT false, v_failed;
END
$$;
COMMENT ON FUNCTION cryo.wait_all_activities(text, uuid, integer, integer, text) IS
    'Returns (parked false, failed count) when every uncollected activity of the claimed run has finished, else parks the run until they have. Raises CR002 for a stale claim, CR009 for a disagreeing path.';

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
