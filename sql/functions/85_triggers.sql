-- Triggers: schedules, webhooks and event handlers, the ways a run starts without a
-- person typing submit. Each starts a stored workflow through submit_script (so through
-- cryo._create_run), in the transaction that fired it: a schedule's tick claim, a
-- webhook's dedup row, an event's publish. A graph workflow's top-level `if` is decided
-- in that transaction too, over the trigger, before any run exists.
--
-- What SQL cannot do, Python does and hands over: cron arithmetic (the server computes
-- each schedule's next fire time with a cron library and passes it in), HMAC checks of
-- webhook bodies, sealing inputs, and sending commit statuses (outside any engine
-- transaction; status_posts is the outbox).
--
-- A triggered run says what started it: runs.trigger_kind (schedule, webhook, event),
-- trigger_name (the schedule, webhook or handler) and, for a handler run, trigger_depth;
-- and its history holds a 'triggered' entry naming the same.

CREATE OR REPLACE FUNCTION cryo._check_trigger_name(p_what text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    -- No ':' in a name given by hand: names a workflow's `on:` registers are W:n.
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
        RAISE EXCEPTION '% name % must be letters, digits, _ . - (up to 128)', p_what,
            coalesce(p_name, '') USING ERRCODE = 'CR004';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo._require_workflow(p_org text, p_project text, p_workflow text)
RETURNS cryo.workflows
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_wf cryo.workflows;
BEGIN
    SELECT * INTO v_wf FROM cryo.workflows
     WHERE org = p_org AND project = p_project AND name = p_workflow;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', coalesce(p_workflow, ''), p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    RETURN v_wf;
END
$$;

-- Starts a stored workflow for a trigger, or decides not to. p_scope ({trigger, input},
-- in the clear, never stored) is what the graph's `if` and `concurrency` read. The input
-- is stored as given: sealed (p_input), in the clear (p_input_clear), or both, which
-- means a handler run of a sealed event: the clear input is {trigger: {..., payload:
-- null}} and p_input is the event's sealed payload ({"answer": value}), which the server
-- puts in as trigger.payload when it opens the input (see cryopg/server/render.py).
-- Returns the run id, or NULL when the `if` was false.
CREATE OR REPLACE FUNCTION cryo._start_triggered(
    p_org text, p_project text, p_workflow text, p_input bytea, p_input_clear jsonb,
    p_scope jsonb, p_untrusted boolean, p_idempotency_key text, p_kind text, p_name text,
    p_depth integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_wf cryo.workflows := cryo._require_workflow(p_org, p_project, p_workflow);
    v_group text;
    v_id text;
    v_created boolean;
BEGIN
    IF coalesce(v_wf.graph ? 'if', false) THEN  -- a script workflow has no graph
        IF NOT cryo._truthy(cryo._eval(v_wf.graph -> 'if', p_scope)) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF coalesce(v_wf.graph ? 'concurrency', false) THEN
        v_group := nullif(cryo._eval(v_wf.graph -> 'concurrency', p_scope) #>> '{}', '');
    END IF;
    SELECT s.run_id, s.created INTO v_id, v_created FROM cryo.submit_script(
        p_org, p_project, v_wf.filename, v_wf.interpreter, v_wf.source, p_input,
        p_idempotency_key, NULL, p_workflow, p_input_clear,
        v_group, NULL, coalesce(p_untrusted, false),
        -- An untrusted run gets no directory of the project's: it runs in scratch.
        p_workdir => CASE WHEN coalesce(p_untrusted, false) THEN NULL ELSE v_wf.workdir END,
        p_graph => v_wf.graph) s;
    IF v_created THEN
        UPDATE cryo.runs SET trigger_kind = p_kind, trigger_name = p_name, trigger_depth = p_depth
         WHERE id = v_id;
        PERFORM cryo._history(v_id, p_org, p_project, 'triggered', p_kind, p_name, 0);
    END IF;
    RETURN v_id;
END
$$;

-- -- schedules -------------------------------------------------------------------------
--
-- A schedule's next_fire_at is the tick it has not fired yet. Every server's scheduler
-- calls claim_schedules, which locks the due rows with SKIP LOCKED, and for each one
-- either fire_schedule (start the run of one tick, move next_fire_at to the tick after
-- it) or plan_schedule (a schedule with no next fire yet), all in that one transaction.
-- A round that comes late calls fire_schedule once per missed tick, oldest first, up to
-- a bound the server keeps (cron.MAX_LATE_TICKS); beyond it the server was down, and one
-- call fires the oldest tick as a catch-up run and moves next_fire_at past now. A row is
-- held by one scheduler at a time and fire_schedule refuses a tick that is no longer the
-- row's next one, so however many servers run, a tick starts one run, and none is
-- dropped: a tick stays due until a transaction that fired it commits.

CREATE OR REPLACE FUNCTION cryo.create_schedule(
    p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text,
    p_every_seconds double precision, p_input bytea, p_next_fire_at timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('schedule', p_name);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    IF (p_cron IS NULL) = (p_every_seconds IS NULL) THEN
        RAISE EXCEPTION 'a schedule needs either a cron expression or an interval' USING ERRCODE = 'CR004';
    END IF;
    IF p_every_seconds IS NOT NULL AND NOT (p_every_seconds >= 1 AND p_every_seconds < 'infinity') THEN
        RAISE EXCEPTION 'a schedule''s interval must be at least 1 second' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.schedules (org, project, name, workflow, cron, timezone, every_seconds, input,
                                next_fire_at, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_workflow, p_cron, coalesce(p_timezone, 'UTC'),
            p_every_seconds, p_input, p_next_fire_at, cryo.now(), cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.create_schedule(text, text, text, text, text, text, double precision, bytea, timestamptz) IS
    'Creates a schedule that starts a stored workflow on a cron expression (in p_timezone) or every p_every_seconds, first at p_next_fire_at (the server computes it; NULL: on the scheduler''s next round); p_input is sealed. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad name, both or neither of cron and interval, an interval under 1 s, or a name already taken.';

CREATE OR REPLACE FUNCTION cryo.list_schedules(p_org text, p_project text)
RETURNS TABLE (name text, workflow text, cron text, timezone text, every_seconds double precision,
               paused boolean, source_workflow text, next_fire_at timestamptz,
               last_fire_at timestamptz, last_run_id text, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.name, s.workflow, s.cron, s.timezone, s.every_seconds, s.paused, s.source_workflow,
           s.next_fire_at, s.last_fire_at, s.last_run_id, s.created_at
      FROM cryo.schedules s WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;
COMMENT ON FUNCTION cryo.list_schedules(text, text) IS
    'Returns a project''s schedules by name with their last and next fire times. Raises nothing.';

-- Pausing skips ticks (they are not caught up later); resuming plans the next tick
-- after the moment of resuming.
CREATE OR REPLACE FUNCTION cryo.pause_schedule(p_org text, p_project text, p_name text, p_paused boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.schedules
       SET paused = p_paused, updated_at = cryo.now(),
           next_fire_at = CASE WHEN p_paused OR NOT paused THEN next_fire_at END
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.pause_schedule(text, text, text, boolean) IS
    'Pauses (p_paused true) or resumes a schedule; a resumed schedule fires next at its first tick after now, with no catch-up for the ticks it skipped. Returns nothing. Raises CR005 for an unknown schedule.';

CREATE OR REPLACE FUNCTION cryo.delete_schedule(p_org text, p_project text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cryo.schedules WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.delete_schedule(text, text, text) IS
    'Deletes a schedule (runs it started stay). Returns nothing. Raises CR005 for an unknown schedule.';

-- Changes what a schedule starts and when: its workflow, cron (with time zone) or
-- interval, and (unless p_keep_input) its sealed input. The server computes p_next from
-- the new timing; a paused schedule stays paused and is planned when resumed.
CREATE OR REPLACE FUNCTION cryo.update_schedule(
    p_org text, p_project text, p_name text, p_workflow text, p_cron text, p_timezone text,
    p_every_seconds double precision, p_input bytea, p_keep_input boolean,
    p_next_fire_at timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_s cryo.schedules;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_not_owned('schedule', p_name, v_s.source_workflow);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    IF (p_cron IS NULL) = (p_every_seconds IS NULL) THEN
        RAISE EXCEPTION 'a schedule needs either a cron expression or an interval' USING ERRCODE = 'CR004';
    END IF;
    IF p_every_seconds IS NOT NULL AND NOT (p_every_seconds >= 1 AND p_every_seconds < 'infinity') THEN
        RAISE EXCEPTION 'a schedule''s interval must be at least 1 second' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.schedules
       SET workflow = p_workflow, cron = p_cron, timezone = coalesce(p_timezone, 'UTC'),
           every_seconds = p_every_seconds,
           input = CASE WHEN p_keep_input THEN input ELSE p_input END,
           next_fire_at = CASE WHEN paused THEN NULL ELSE p_next_fire_at END,
           updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;
COMMENT ON FUNCTION cryo.update_schedule(text, text, text, text, text, text, double precision, bytea, boolean, timestamptz) IS
    'Changes a schedule''s workflow, cron expression (in p_timezone) or interval and, unless p_keep_input, its sealed input; it fires next at p_next_fire_at (the server computes it; a paused schedule is planned when resumed). Returns nothing. Raises CR005 for an unknown schedule or workflow, CR004 for both or neither of cron and interval or an interval under 1 s, CR242 for a schedule a workflow''s on: registered.';

-- A schedule's sealed input, which the server opens to start a run now.
CREATE OR REPLACE FUNCTION cryo.read_schedule_input(p_org text, p_project text, p_name text)
RETURNS bytea
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_input bytea;
BEGIN
    SELECT s.input INTO v_input FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN v_input;
END
$$;
COMMENT ON FUNCTION cryo.read_schedule_input(text, text, text) IS
    'Returns a schedule''s sealed input (NULL when it has none). Raises CR005 for an unknown schedule.';

-- "Run now": one run of a schedule's workflow outside its ticks (paused or not), marked
-- as started by the schedule; its ticks stay as they were. p_input is the sealed input
-- with its trigger ({kind: schedule, name, manual: true, by}), p_scope the clear
-- {trigger, input} a graph's if and concurrency read.
CREATE OR REPLACE FUNCTION cryo.run_schedule_now(
    p_org text, p_project text, p_name text, p_input bytea, p_scope jsonb)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_s cryo.schedules;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN cryo._start_triggered(p_org, p_project, v_s.workflow, p_input, NULL, p_scope, false,
                                 NULL, 'schedule', p_name);
END
$$;
COMMENT ON FUNCTION cryo.run_schedule_now(text, text, text, bytea, jsonb) IS
    'Starts one run of a schedule''s workflow now with the sealed p_input, marked as started by the schedule, leaving its ticks as they were; returns the run id, NULL when the workflow''s if was false. Raises CR005 for an unknown schedule or a workflow gone, CR030 when its concurrency group''s queue is full.';

-- The scheduler's first call in its transaction: up to p_limit schedules, of any
-- project, whose tick is due or that have no next fire time yet, locked for this
-- transaction (SKIP LOCKED: another server takes the others). Also returns the engine's
-- time, from which the server computes next fire times.
CREATE OR REPLACE FUNCTION cryo.claim_schedules(p_limit integer DEFAULT 100)
RETURNS TABLE (org text, project text, name text, workflow text, cron text, timezone text,
               every_seconds double precision, input bytea, next_fire_at timestamptz,
               now timestamptz)
LANGUAGE sql AS $$
    SELECT s.org, s.project, s.name, s.workflow, s.cron, s.timezone, s.every_seconds, s.input,
           s.next_fire_at, cryo.now()
      FROM cryo.schedules s
     WHERE NOT s.paused AND (s.next_fire_at IS NULL OR s.next_fire_at <= cryo.now())
     ORDER BY s.next_fire_at NULLS FIRST
     LIMIT p_limit
       FOR UPDATE SKIP LOCKED
$$;
COMMENT ON FUNCTION cryo.claim_schedules(integer) IS
    'Locks and returns up to p_limit unpaused schedules whose next tick is due or not yet planned, with the engine time; call fire_schedule or plan_schedule for each in the same transaction. Raises nothing.';

-- Sets the first fire time of a schedule that has none (just resumed, or registered
-- from SQL by a workflow's on.schedule); a NULL p_next (its cron would not parse) pauses it.
CREATE OR REPLACE FUNCTION cryo.plan_schedule(
    p_org text, p_project text, p_name text, p_next timestamptz)
RETURNS void
LANGUAGE sql AS $$
    UPDATE cryo.schedules
       SET next_fire_at = p_next, paused = p_next IS NULL, updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name AND next_fire_at IS NULL
$$;
COMMENT ON FUNCTION cryo.plan_schedule(text, text, text, timestamptz) IS
    'Sets the next fire time of a schedule that has none; NULL pauses it (an expression the server could not read). Returns nothing. Raises nothing.';

-- Fires the due tick p_scheduled_at of a schedule claimed by claim_schedules: starts one
-- run and moves the schedule to p_next (the tick after it, which may be due too: the
-- round then fires that one next; or, for a catch-up run, the first tick after now).
-- p_input is the sealed input with its trigger; p_scope the clear
-- {trigger, input} a graph's if and concurrency read. Returns the run id, NULL when the
-- graph's if was false or the tick is no longer the schedule's next one.
CREATE OR REPLACE FUNCTION cryo.fire_schedule(
    p_org text, p_project text, p_name text, p_scheduled_at timestamptz, p_next timestamptz,
    p_input bytea, p_scope jsonb, p_refused text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_s cryo.schedules;
    v_id text;
BEGIN
    SELECT * INTO v_s FROM cryo.schedules s
     WHERE s.org = p_org AND s.project = p_project AND s.name = p_name FOR UPDATE;
    IF NOT FOUND OR v_s.paused OR v_s.next_fire_at IS DISTINCT FROM p_scheduled_at
       OR p_scheduled_at > cryo.now() THEN
        RETURN NULL;
    END IF;
    IF p_next IS NULL OR p_next <= p_scheduled_at THEN
        RAISE EXCEPTION 'a schedule''s next fire time must come after the tick it fires' USING ERRCODE = 'CR004';
    END IF;
    IF p_refused IS NOT NULL THEN
        -- The tick's input failed the workflow's input_schema: it says why and fires nothing.
        UPDATE cryo.schedules
           SET next_fire_at = p_next, last_refusal = left(p_refused, 1000), updated_at = cryo.now()
         WHERE org = p_org AND project = p_project AND name = p_name;
        RETURN NULL;
    END IF;
    v_id := cryo._start_triggered(
        p_org, p_project, v_s.workflow, p_input, NULL, p_scope, false,
        'schedule:' || p_name || ':' || to_char(p_scheduled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'schedule', p_name);
    UPDATE cryo.schedules
       SET next_fire_at = p_next, last_fire_at = p_scheduled_at, last_refusal = NULL,
           last_run_id = coalesce(v_id, last_run_id), updated_at = cryo.now()
     WHERE org = p_org AND project = p_project AND name = p_name;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.fire_schedule(text, text, text, timestamptz, timestamptz, bytea, jsonb, text) IS
    'Starts the run of a due schedule tick (claimed by claim_schedules) with the sealed p_input (with p_refused, the reason its input failed the workflow''s input_schema: records it as last_refusal and starts nothing) and moves the schedule to p_next (the next tick, possibly due as well, so a late round calls it once per missed tick); returns the run id, NULL when the workflow''s if was false or the tick is not the schedule''s due next one (another server fired it). Raises CR004 when p_next is not after the tick, CR005 when the workflow is gone.';

-- -- a workflow's own triggers (on: schedule / event) ---------------------------------------

-- Called by put_workflow: the schedules and handlers the workflow's `on` names replace
-- the ones its earlier version registered (W:1, W:2, ... and W:<event>); a schedule
-- whose cron text stays keeps its next fire time. Removing `on` removes them.
CREATE OR REPLACE FUNCTION cryo._register_workflow_triggers(
    p_org text, p_project text, p_workflow text, p_graph jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_crons text[] := ARRAY(SELECT jsonb_array_elements_text(coalesce(p_graph #> '{on,schedule}', '[]')));
    v_events text[] := ARRAY(SELECT DISTINCT jsonb_array_elements_text(coalesce(p_graph #> '{on,event}', '[]')));
    v_i integer;
BEGIN
    DELETE FROM cryo.schedules
     WHERE org = p_org AND project = p_project AND source_workflow = p_workflow
       AND name NOT IN (SELECT p_workflow || ':' || i FROM generate_series(1, cardinality(v_crons)) i);
    FOR v_i IN 1 .. coalesce(cardinality(v_crons), 0) LOOP
        INSERT INTO cryo.schedules AS s (org, project, name, workflow, cron, timezone, source_workflow,
                                         created_at, updated_at)
        VALUES (p_org, p_project, p_workflow || ':' || v_i, p_workflow, v_crons[v_i], 'UTC',
                p_workflow, cryo.now(), cryo.now())
        ON CONFLICT (org, project, name) DO UPDATE
           SET cron = excluded.cron, timezone = 'UTC', every_seconds = NULL,
               next_fire_at = CASE WHEN s.cron IS NOT DISTINCT FROM excluded.cron THEN s.next_fire_at END,
               updated_at = excluded.updated_at;
    END LOOP;
    DELETE FROM cryo.event_handlers
     WHERE org = p_org AND project = p_project AND source_workflow = p_workflow
       AND NOT event = ANY (v_events);
    INSERT INTO cryo.event_handlers (org, project, name, event, workflow, source_workflow, created_at)
    SELECT p_org, p_project, p_workflow || ':' || e, e, p_workflow, p_workflow, cryo.now()
      FROM unnest(v_events) e
    ON CONFLICT (org, project, name) DO NOTHING;
END
$$;

-- -- webhooks ----------------------------------------------------------------------------
--
-- The rule for where a delivery goes: a webhook bound to a workflow starts that
-- workflow and publishes nothing; a webhook without one publishes the delivery on the
-- project bus as event webhook.<event>, where handlers pick it up. So a delivery starts
-- the workflow directly or reaches handlers, never both. A workflow whose `on.webhook`
-- lists events starts only for those; other deliveries are accepted without a run.

CREATE OR REPLACE FUNCTION cryo.create_webhook(
    p_org text, p_project text, p_name text, p_workflow text, p_secret bytea, p_status_url text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('webhook', p_name);
    IF p_workflow IS NOT NULL THEN
        PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    END IF;
    IF p_secret IS NULL THEN
        RAISE EXCEPTION 'a webhook needs a signing secret' USING ERRCODE = 'CR004';
    END IF;
    IF p_status_url IS NOT NULL AND p_workflow IS NULL THEN
        RAISE EXCEPTION 'a commit status URL needs a workflow whose run it reports' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.webhooks (org, project, name, workflow, secret, status_url, created_at)
    VALUES (p_org, p_project, p_name, p_workflow, p_secret, p_status_url, cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'webhook % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.create_webhook(text, text, text, text, bytea, text) IS
    'Creates a webhook with its sealed signing secret; with p_workflow a delivery starts that workflow, without one it is published as event webhook.<event>; p_status_url receives the run''s outcome. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad or taken name, a missing secret, or a status URL without a workflow.';

CREATE OR REPLACE FUNCTION cryo.get_webhook(p_org text, p_project text, p_name text)
RETURNS TABLE (workflow text, secret bytea, status_url text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT w.workflow, w.secret, w.status_url FROM cryo.webhooks w
                  WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook %/%/%', p_org, p_project, p_name USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_webhook(text, text, text) IS
    'Returns a webhook''s workflow, sealed secret and status URL. Raises CR005 for an unknown webhook.';

CREATE OR REPLACE FUNCTION cryo.list_webhooks(p_org text, p_project text)
RETURNS TABLE (name text, workflow text, status_url text, created_at timestamptz,
               deliveries bigint, last_delivery_at timestamptz, paused boolean)
LANGUAGE sql STABLE AS $$
    SELECT w.name, w.workflow, w.status_url, w.created_at,
           (SELECT count(*) FROM cryo.webhook_deliveries d
             WHERE d.org = w.org AND d.project = w.project AND d.webhook = w.name),
           (SELECT max(d.created_at) FROM cryo.webhook_deliveries d
             WHERE d.org = w.org AND d.project = w.project AND d.webhook = w.name),
           w.paused
      FROM cryo.webhooks w WHERE w.org = p_org AND w.project = p_project ORDER BY w.name
$$;
COMMENT ON FUNCTION cryo.list_webhooks(text, text) IS
    'Returns a project''s webhooks by name (never their secrets) with how many deliveries each accepted and whether it is paused. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.delete_webhook(p_org text, p_project text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cryo.webhooks WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.delete_webhook(text, text, text) IS
    'Deletes a webhook and its delivery records (runs it started stay). Returns nothing. Raises CR005 for an unknown webhook.';

-- Where one delivery goes (deliver_webhook and redeliver_webhook): a paused webhook
-- starts nothing (the delivery can be delivered again later); one bound to a workflow
-- starts it unless its on.webhook leaves the event out or its `if` is false; one without
-- publishes webhook.<event> on the bus. Returns (outcome, run_id, event_id).
CREATE OR REPLACE FUNCTION cryo._route_delivery(
    p_hook cryo.webhooks, p_event text, p_trigger jsonb, p_input bytea, p_payload bytea,
    p_untrusted boolean, p_refused text, OUT outcome text, OUT run_id text, OUT event_id bigint)
RETURNS record
LANGUAGE plpgsql AS $$
DECLARE
    v_wf cryo.workflows;
BEGIN
    IF p_hook.paused THEN
        outcome := 'paused';
    ELSIF p_hook.workflow IS NULL THEN
        event_id := cryo._publish_event(p_hook.org, p_hook.project, 'webhook.' || p_event,
                                        p_payload, NULL, NULL, p_untrusted);
        outcome := 'published';
    ELSE
        v_wf := cryo._require_workflow(p_hook.org, p_hook.project, p_hook.workflow);
        IF v_wf.graph #> '{on,webhook}' IS NOT NULL AND NOT (v_wf.graph #> '{on,webhook}') ? p_event THEN
            outcome := 'ignored';
        ELSIF p_refused IS NOT NULL THEN
            outcome := 'refused';  -- its input failed the workflow's input_schema (the server's check)
        ELSE
            run_id := cryo._start_triggered(
                p_hook.org, p_hook.project, p_hook.workflow, p_input, NULL,
                jsonb_build_object('trigger', p_trigger, 'input', jsonb_build_object('trigger', p_trigger)),
                p_untrusted, NULL, 'webhook', p_hook.name);
            outcome := CASE WHEN run_id IS NULL THEN 'skipped' ELSE 'started' END;
            IF run_id IS NOT NULL AND p_hook.status_url IS NOT NULL THEN
                INSERT INTO cryo.status_posts (run_id, org, project, webhook, url, sha, created_at)
                VALUES (run_id, p_hook.org, p_hook.project, p_hook.name, p_hook.status_url,
                        p_trigger ->> 'sha', cryo.now());
            END IF;
        END IF;
    END IF;
END
$$;

-- One signed delivery, after the server checked its signature. p_trigger is the clear
-- trigger ({kind, event, ref, sha, payload}) the `if` reads, never stored; p_input the
-- sealed run input ({trigger}), kept on the delivery so it can be delivered again;
-- p_payload the sealed bus payload ({"answer": trigger}).
-- A body already delivered answers what its first delivery did, with duplicate true.
CREATE OR REPLACE FUNCTION cryo.deliver_webhook(
    p_org text, p_project text, p_name text, p_body_hash bytea, p_event text, p_trigger jsonb,
    p_input bytea, p_payload bytea, p_untrusted boolean, p_refused text DEFAULT NULL)
RETURNS TABLE (outcome text, run_id text, event_id bigint, duplicate boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_hook cryo.webhooks;
    v_id bigint;
    v_route record;
BEGIN
    SELECT * INTO v_hook FROM cryo.webhooks w
     WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook %/%/%', p_org, p_project, p_name USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_name('webhook event', p_event);
    -- A concurrent redelivery waits here for the first one to commit, then finds it.
    INSERT INTO cryo.webhook_deliveries (org, project, webhook, body_hash, event, input,
                                         untrusted, created_at)
    VALUES (p_org, p_project, p_name, p_body_hash, p_event, p_input,
            coalesce(p_untrusted, false), cryo.now())
    ON CONFLICT DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN QUERY SELECT d.outcome, d.run_id, d.event_id, true FROM cryo.webhook_deliveries d
                      WHERE d.org = p_org AND d.project = p_project AND d.webhook = p_name
                        AND d.body_hash = p_body_hash AND d.redelivery_of IS NULL;
        RETURN;
    END IF;
    v_route := cryo._route_delivery(v_hook, p_event, p_trigger, p_input, p_payload, p_untrusted,
                                    p_refused);
    UPDATE cryo.webhook_deliveries d
       SET outcome = v_route.outcome, run_id = v_route.run_id, event_id = v_route.event_id
     WHERE d.org = p_org AND d.project = p_project AND d.id = v_id;
    RETURN QUERY SELECT v_route.outcome, v_route.run_id, v_route.event_id, false;
END
$$;
COMMENT ON FUNCTION cryo.deliver_webhook(text, text, text, bytea, text, jsonb, bytea, bytea, boolean, text) IS
    'Records a signed delivery (by its body hash, with its sealed input) and, in the same transaction, starts the webhook''s workflow (unless the webhook is paused, its if is false, its on.webhook leaves the event out, or p_refused says why its input failed the workflow''s input_schema) or, for a webhook without a workflow, publishes webhook.<event> on the bus; returns (outcome started | skipped | ignored | refused | published | paused, run_id, event_id, duplicate), a redelivery of the same body answering what the first did. Raises CR005 for an unknown webhook or a workflow gone, CR004 for a bad event name.';

-- What the server needs to deliver a stored delivery again: its webhook, event, sealed
-- input and whether it came untrusted.
CREATE OR REPLACE FUNCTION cryo.read_webhook_delivery(p_org text, p_project text, p_id bigint)
RETURNS TABLE (webhook text, event text, input bytea, untrusted boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_d cryo.webhook_deliveries;
BEGIN
    SELECT * INTO v_d FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project AND d.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook delivery % in %/%', p_id, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF v_d.input IS NULL THEN
        RAISE EXCEPTION 'webhook delivery % was stored before deliveries kept their input: it cannot be delivered again', p_id
            USING ERRCODE = 'CR241';
    END IF;
    RETURN QUERY SELECT v_d.webhook, v_d.event, v_d.input, v_d.untrusted;
END
$$;
COMMENT ON FUNCTION cryo.read_webhook_delivery(text, text, bigint) IS
    'Returns a stored delivery''s webhook, event, sealed input and untrusted flag, for a redelivery. Raises CR005 for an unknown delivery, CR241 for one stored without its input.';

-- Delivers a stored delivery again, as a new delivery row (redelivery_of names the
-- first) routed by the webhook as it is now: a run started, an event published, or
-- nothing (paused, skipped, ignored). p_trigger, p_input and p_payload are what the
-- server opened from the stored input and sealed again; p_by is who asked.
CREATE OR REPLACE FUNCTION cryo.redeliver_webhook(
    p_org text, p_project text, p_id bigint, p_trigger jsonb, p_input bytea, p_payload bytea,
    p_by text, p_refused text DEFAULT NULL)
RETURNS TABLE (id bigint, outcome text, run_id text, event_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_d cryo.webhook_deliveries;
    v_hook cryo.webhooks;
    v_id bigint;
    v_route record;
BEGIN
    SELECT * INTO v_d FROM cryo.webhook_deliveries d
     WHERE d.org = p_org AND d.project = p_project AND d.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook delivery % in %/%', p_id, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    IF v_d.input IS NULL OR p_input IS NULL THEN
        RAISE EXCEPTION 'webhook delivery % was stored before deliveries kept their input: it cannot be delivered again', p_id
            USING ERRCODE = 'CR241';
    END IF;
    SELECT * INTO v_hook FROM cryo.webhooks w
     WHERE w.org = p_org AND w.project = p_project AND w.name = v_d.webhook;
    INSERT INTO cryo.webhook_deliveries (org, project, webhook, body_hash, event, input, untrusted,
                                         redelivery_of, redelivered_by, created_at)
    VALUES (p_org, p_project, v_d.webhook, v_d.body_hash, v_d.event, p_input, v_d.untrusted,
            coalesce(v_d.redelivery_of, v_d.id), p_by, cryo.now())
    RETURNING webhook_deliveries.id INTO v_id;
    v_route := cryo._route_delivery(v_hook, v_d.event, p_trigger, p_input, p_payload, v_d.untrusted,
                                    p_refused);
    UPDATE cryo.webhook_deliveries d
       SET outcome = v_route.outcome, run_id = v_route.run_id, event_id = v_route.event_id
     WHERE d.org = p_org AND d.project = p_project AND d.id = v_id;
    RETURN QUERY SELECT v_id, v_route.outcome, v_route.run_id, v_route.event_id;
END
$$;
COMMENT ON FUNCTION cryo.redeliver_webhook(text, text, bigint, jsonb, bytea, bytea, text, text) IS
    'Delivers a stored webhook delivery again as a new delivery (redelivery_of the first, redelivered_by p_by), routed as deliver_webhook routes one (p_refused: why its input fails the workflow''s input_schema now), without the body-hash dedup; returns (id, outcome, run_id, event_id). Raises CR005 for an unknown delivery or a workflow gone, CR241 for a delivery stored without its input.';

-- Changes where a webhook's deliveries go (its workflow, or none: the bus) and its
-- commit status URL; the secret stays.
CREATE OR REPLACE FUNCTION cryo.update_webhook(
    p_org text, p_project text, p_name text, p_workflow text, p_status_url text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_workflow IS NOT NULL THEN
        PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    END IF;
    IF p_status_url IS NOT NULL AND p_workflow IS NULL THEN
        RAISE EXCEPTION 'a commit status URL needs a workflow whose run it reports' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.webhooks SET workflow = p_workflow, status_url = p_status_url
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.update_webhook(text, text, text, text, text) IS
    'Points a webhook at another workflow (NULL: deliveries go to the bus) and sets its status URL; the signing secret is kept. Returns nothing. Raises CR005 for an unknown webhook or workflow, CR004 for a status URL without a workflow.';

CREATE OR REPLACE FUNCTION cryo.pause_webhook(p_org text, p_project text, p_name text, p_paused boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.webhooks SET paused = p_paused
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no webhook % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.pause_webhook(text, text, text, boolean) IS
    'Pauses (p_paused true) or resumes a webhook: while paused each signed delivery is recorded with outcome paused and starts nothing (deliver it again once resumed). Returns nothing. Raises CR005 for an unknown webhook.';

-- The commit-status outbox. A server takes posts whose run has ended (a post taken by
-- a server that died is taken again after five minutes), sends them outside any engine
-- transaction, and reports how it went.
CREATE OR REPLACE FUNCTION cryo.take_status_posts(p_limit integer DEFAULT 20)
RETURNS TABLE (run_id text, org text, project text, webhook text, url text, sha text,
               status text, exit_code integer, error text)
LANGUAGE sql AS $$
    WITH picked AS (
        SELECT p.run_id FROM cryo.status_posts p JOIN cryo.runs r ON r.id = p.run_id
         WHERE (p.state = 'waiting' OR (p.state = 'sending' AND p.taken_at < cryo.now() - interval '5 minutes'))
           AND cryo.is_terminal(r.status)
         ORDER BY p.created_at
         LIMIT p_limit
           FOR UPDATE OF p SKIP LOCKED
    ), taken AS (
        UPDATE cryo.status_posts p SET state = 'sending', taken_at = cryo.now(), attempts = p.attempts + 1
          FROM picked WHERE p.run_id = picked.run_id
        RETURNING p.run_id, p.org, p.project, p.webhook, p.url, p.sha
    )
    SELECT t.run_id, t.org, t.project, t.webhook, t.url, t.sha, r.status, r.exit_code, r.error
      FROM taken t JOIN cryo.runs r ON r.id = t.run_id
$$;
COMMENT ON FUNCTION cryo.take_status_posts(integer) IS
    'Takes up to p_limit commit statuses whose run has ended, for this server to send; returns each with the run''s status, exit code and error. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.finish_status_post(p_run_id text, p_error text)
RETURNS void
LANGUAGE sql AS $$
    UPDATE cryo.status_posts
       SET state = CASE WHEN p_error IS NULL THEN 'sent' ELSE 'failed' END, last_error = p_error
     WHERE run_id = p_run_id
$$;
COMMENT ON FUNCTION cryo.finish_status_post(text, text) IS
    'Records that a commit status was sent (p_error NULL) or refused or failed (p_error says why; it is not retried). Returns nothing. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.read_status_post(p_run_id text)
RETURNS TABLE (webhook text, url text, state text, attempts integer, last_error text)
LANGUAGE sql STABLE AS $$
    SELECT p.webhook, p.url, p.state, p.attempts, p.last_error FROM cryo.status_posts p
     WHERE p.run_id = p_run_id
$$;
COMMENT ON FUNCTION cryo.read_status_post(text) IS
    'Returns the commit status of a webhook run: where it goes, whether it was sent, and why not. Raises nothing.';

-- -- event handlers --------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION cryo.create_handler(
    p_org text, p_project text, p_name text, p_event text, p_workflow text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    PERFORM cryo._check_trigger_name('handler', p_name);
    PERFORM cryo._check_name('event', p_event);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    INSERT INTO cryo.event_handlers (org, project, name, event, workflow, created_at)
    VALUES (p_org, p_project, p_name, p_event, p_workflow, cryo.now())
    ON CONFLICT (org, project, name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'handler % already exists in %/% (delete it first)', p_name, p_org, p_project
            USING ERRCODE = 'CR004';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.create_handler(text, text, text, text, text) IS
    'Creates an event handler: each event p_event published on the project bus starts one run of p_workflow. Returns nothing. Raises CR005 for an unknown project or workflow, CR004 for a bad or taken name or a bad event name.';

CREATE OR REPLACE FUNCTION cryo.list_handlers(p_org text, p_project text)
RETURNS TABLE (name text, event text, workflow text, source_workflow text, created_at timestamptz,
               paused boolean)
LANGUAGE sql STABLE AS $$
    SELECT h.name, h.event, h.workflow, h.source_workflow, h.created_at, h.paused
      FROM cryo.event_handlers h
     WHERE h.org = p_org AND h.project = p_project ORDER BY h.name
$$;
COMMENT ON FUNCTION cryo.list_handlers(text, text) IS
    'Returns a project''s event handlers by name, with whether each is paused. Raises nothing.';

-- A trigger a workflow's own `on:` registered is that workflow's: it is changed by
-- putting the workflow again, never behind its back.
CREATE OR REPLACE FUNCTION cryo._check_not_owned(p_what text, p_name text, p_source text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_source IS NOT NULL THEN
        RAISE EXCEPTION '% % is registered by workflow %''s on:; change that workflow instead',
            p_what, p_name, p_source USING ERRCODE = 'CR242';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo.update_handler(
    p_org text, p_project text, p_name text, p_event text, p_workflow text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_h cryo.event_handlers;
BEGIN
    SELECT * INTO v_h FROM cryo.event_handlers h
     WHERE h.org = p_org AND h.project = p_project AND h.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._check_not_owned('handler', p_name, v_h.source_workflow);
    PERFORM cryo._check_name('event', p_event);
    PERFORM cryo._require_workflow(p_org, p_project, p_workflow);
    UPDATE cryo.event_handlers SET event = p_event, workflow = p_workflow
     WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;
COMMENT ON FUNCTION cryo.update_handler(text, text, text, text, text) IS
    'Changes the event an event handler listens for and the workflow it starts. Returns nothing. Raises CR005 for an unknown handler or workflow, CR004 for a bad event name, CR242 for a handler a workflow''s on: registered.';

CREATE OR REPLACE FUNCTION cryo.pause_handler(p_org text, p_project text, p_name text, p_paused boolean)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.event_handlers SET paused = p_paused
     WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.pause_handler(text, text, text, boolean) IS
    'Pauses (p_paused true) or resumes an event handler: while paused, events of its name start no run of it (and are not caught up). Returns nothing. Raises CR005 for an unknown handler.';

CREATE OR REPLACE FUNCTION cryo.delete_handler(p_org text, p_project text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cryo.event_handlers WHERE org = p_org AND project = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no handler % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.delete_handler(text, text, text) IS
    'Deletes an event handler (runs it started stay). Returns nothing. Raises CR005 for an unknown handler.';

-- How deep a chain of handlers may go: an event at this depth starts no handler run.
CREATE OR REPLACE FUNCTION cryo._handler_depth_limit()
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT 5
$$;

-- What a published event sets off, in the publishing transaction (called by
-- cryo._publish_event): live graph runs of the project whose cancel_on names it and
-- that started before it are cancelled; then each handler of the name starts one run,
-- unless the event is at the depth limit, which is written on the event and in the
-- emitting run's history instead. A tainted event (p_untrusted) cancels only untrusted
-- graph runs and trusted ones whose cancel_on opted in (`tainted: true`), and the
-- handler runs it starts are untrusted (docs/security/trust.md).
CREATE OR REPLACE FUNCTION cryo._on_event(
    p_org text, p_project text, p_name text, p_event_id bigint, p_sealed bytea, p_clear jsonb,
    p_depth integer, p_untrusted boolean, p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_run record;
    v_h cryo.event_handlers;
    v_trigger jsonb;
BEGIN
    FOR v_run IN
        SELECT r.id FROM cryo.runs r
         WHERE r.org = p_org AND r.project = p_project AND r.finished_at IS NULL
           AND r.graph ? 'cancel_on' AND (r.graph #>> '{cancel_on,event}') = p_name
           AND r.created_at <= cryo.now() AND NOT cryo.is_terminal(r.status)
           AND (NOT p_untrusted OR r.untrusted OR (r.graph #> '{cancel_on,tainted}') = 'true')
         ORDER BY r.id
    LOOP
        BEGIN
            PERFORM cryo._history(v_run.id, p_org, p_project, 'cancel_on', 'event', p_name, 0);
            PERFORM cryo.cancel_run(v_run.id);
        EXCEPTION WHEN SQLSTATE 'CR006' THEN
            NULL;  -- it ended meanwhile: nothing to cancel
        END;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM cryo.event_handlers h
                    WHERE h.org = p_org AND h.project = p_project AND h.event = p_name
                      AND NOT h.paused) THEN
        RETURN;
    END IF;
    IF p_depth >= cryo._handler_depth_limit() THEN
        UPDATE cryo.events
           SET refused = format('no handler run started: the event is at handler depth %s (the limit)', p_depth)
         WHERE id = p_event_id;
        IF p_run_id IS NOT NULL THEN
            PERFORM cryo._history(p_run_id, p_org, p_project, 'handler_refused', 'event', p_name, p_depth);
        END IF;
        RETURN;
    END IF;
    FOR v_h IN SELECT * FROM cryo.event_handlers h
                WHERE h.org = p_org AND h.project = p_project AND h.event = p_name
                  AND NOT h.paused ORDER BY h.name
    LOOP
        v_trigger := jsonb_build_object('kind', 'event', 'name', p_name, 'payload', p_clear,
                                        'depth', p_depth, 'event_id', p_event_id, 'handler', v_h.name);
        BEGIN
            PERFORM cryo._start_triggered(
                p_org, p_project, v_h.workflow, p_sealed, jsonb_build_object('trigger', v_trigger),
                jsonb_build_object('trigger', v_trigger, 'input', jsonb_build_object('trigger', v_trigger)),
                p_untrusted, 'event:' || p_event_id || ':' || v_h.name, 'event', v_h.name, p_depth);
        EXCEPTION WHEN SQLSTATE 'CR030' THEN
            -- The workflow's concurrency group is full: the publish stands, the run does not.
            UPDATE cryo.events
               SET refused = concat_ws('; ', refused, format('handler %s: %s', v_h.name, SQLERRM))
             WHERE id = p_event_id;
        END;
    END LOOP;
END
$$;
