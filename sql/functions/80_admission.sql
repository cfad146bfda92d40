-- Concurrency admission and leases. One lease table serves both a submit with a
-- concurrency group and a script's `cryopg lock`: a group has at most one holder (a
-- run, never an agent) and a FIFO of waiters. Whatever ends a holder's claim on a group
-- (release, or the run ending in any way) hands the group to the oldest waiter in the
-- same transaction; tick() reconciles groups a hook could have missed.

CREATE OR REPLACE FUNCTION cryo._lock_group(p_org text, p_project text, p_group text)
RETURNS void
LANGUAGE sql AS $$
    -- Serialises every acquire, enqueue and hand-over of one group.
    SELECT pg_advisory_xact_lock(hashtextextended('lease/' || p_org || '/' || p_project || '/' || p_group, 0))
$$;

-- The live holder of a group, or NULL. A holder that already ended counts as none.
CREATE OR REPLACE FUNCTION cryo._group_holder(p_org text, p_project text, p_group text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT l.holder_run_id FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
     WHERE l.org = p_org AND l.project = p_project AND l.grp = p_group
       AND r.status NOT IN ('succeeded', 'failed', 'cancelled', 'unreadable')
$$;

CREATE OR REPLACE FUNCTION cryo._take_lease(
    p_org text, p_project text, p_group text, p_run_id text, p_kind text, p_path text,
    p_scoped boolean)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.leases (org, project, grp, holder_run_id, kind, scoped, path, acquired_at)
    VALUES (p_org, p_project, p_group, p_run_id, p_kind, p_scoped, p_path, cryo.now())
    ON CONFLICT (org, project, grp) DO UPDATE
       SET holder_run_id = excluded.holder_run_id, kind = excluded.kind, scoped = excluded.scoped,
           path = excluded.path, acquired_at = excluded.acquired_at
$$;

-- Hands a free group to its oldest waiter: a queued submit becomes pending, a script
-- parked on `lock` wakes holding the lease.
CREATE OR REPLACE FUNCTION cryo._promote(p_org text, p_project text, p_group text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_w cryo.lease_waiters;
    v_q cryo.queue;
BEGIN
    IF cryo._group_holder(p_org, p_project, p_group) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    LOOP
        DELETE FROM cryo.lease_waiters WHERE id = (
            SELECT w.id FROM cryo.lease_waiters w
             WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
             ORDER BY w.id LIMIT 1)
        RETURNING * INTO v_w;
        IF NOT FOUND THEN
            DELETE FROM cryo.leases WHERE org = p_org AND project = p_project AND grp = p_group;
            RETURN NULL;
        END IF;
        PERFORM cryo._take_lease(p_org, p_project, p_group, v_w.run_id, v_w.kind, v_w.path, v_w.scoped);
        IF v_w.kind = 'admission' THEN
            UPDATE cryo.runs SET status = 'pending', updated_at = cryo.now()
             WHERE id = v_w.run_id AND status = 'queued';
            IF FOUND THEN
                INSERT INTO cryo.queue (run_id, org, project, state, required_caps, enqueued_at)
                SELECT r.id, r.org, r.project, 'pending', r.required_caps, cryo.now()
                  FROM cryo.runs r WHERE r.id = v_w.run_id;
                PERFORM cryo._history(v_w.run_id, p_org, p_project, 'admitted');
                PERFORM pg_notify('cryo_work', '');
                PERFORM cryo._notify_run(v_w.run_id);
                RETURN v_w.run_id;
            END IF;
        ELSE
            SELECT * INTO v_q FROM cryo.queue
             WHERE run_id = v_w.run_id AND state = 'parked' AND park_reason = 'awaiting-lease'
               FOR UPDATE;
            IF FOUND THEN
                PERFORM cryo._wake_parked(v_q, NULL, jsonb_build_object('group', p_group), 0,
                                          'lease_granted');
                RETURN v_w.run_id;
            END IF;
        END IF;
        -- That waiter is gone (ended meanwhile): try the next one.
    END LOOP;
END
$$;

-- Terminal hook: a run that ends, in any way, gives up every group it holds and its
-- places in every queue.
CREATE OR REPLACE FUNCTION cryo._release_leases(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_l record;
BEGIN
    DELETE FROM cryo.lease_waiters WHERE run_id = p_run_id;
    FOR v_l IN SELECT org, project, grp FROM cryo.leases WHERE holder_run_id = p_run_id LOOP
        PERFORM cryo._lock_group(v_l.org, v_l.project, v_l.grp);
        DELETE FROM cryo.leases
         WHERE org = v_l.org AND project = v_l.project AND grp = v_l.grp AND holder_run_id = p_run_id;
        PERFORM cryo._promote(v_l.org, v_l.project, v_l.grp);
    END LOOP;
END
$$;

-- Submit-time admission, called by submit_script with the group already locked and the
-- new run inserted as pending. Returns the run's status: 'pending' or 'queued'.
CREATE OR REPLACE FUNCTION cryo._admit(
    p_run_id text, p_org text, p_project text, p_group text, p_policy text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_holder text := cryo._group_holder(p_org, p_project, p_group);
    v_waiter record;
    v_limit integer;
BEGIN
    UPDATE cryo.runs SET concurrency_group = p_group WHERE id = p_run_id;
    IF v_holder IS NULL THEN
        PERFORM cryo._take_lease(p_org, p_project, p_group, p_run_id, 'admission', NULL, false);
        RETURN 'pending';
    END IF;
    IF p_policy = 'cancel-running' THEN
        -- Take the hold first, so the incumbent's ending hands nothing to its waiters.
        PERFORM cryo._take_lease(p_org, p_project, p_group, p_run_id, 'admission', NULL, false);
        PERFORM cryo.cancel_run(v_holder);
        RETURN 'pending';
    END IF;
    IF p_policy = 'cancel-queued' THEN
        FOR v_waiter IN SELECT w.run_id FROM cryo.lease_waiters w
                         WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
                         ORDER BY w.id LOOP
            PERFORM cryo.cancel_run(v_waiter.run_id);
        END LOOP;
    END IF;
    SELECT p.admission_queue_limit INTO v_limit FROM cryo.projects p
     WHERE p.org = p_org AND p.slug = p_project;
    IF (SELECT count(*) FROM cryo.lease_waiters w
         WHERE w.org = p_org AND w.project = p_project AND w.grp = p_group
           AND w.kind = 'admission') >= v_limit THEN
        RAISE EXCEPTION 'concurrency group % already has % queued runs (the limit); try later', p_group, v_limit
            USING ERRCODE = 'CR030';
    END IF;
    INSERT INTO cryo.lease_waiters (org, project, grp, run_id, kind, enqueued_at)
    VALUES (p_org, p_project, p_group, p_run_id, 'admission', cryo.now());
    UPDATE cryo.runs SET status = 'queued', updated_at = cryo.now() WHERE id = p_run_id;
    PERFORM cryo._history(p_run_id, p_org, p_project, 'queued');
    RETURN 'queued';
END
$$;

CREATE OR REPLACE FUNCTION cryo.set_admission_queue_limit(p_org text, p_project text, p_limit integer)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'the queue limit must be at least 1' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.projects SET admission_queue_limit = p_limit WHERE org = p_org AND slug = p_project;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.set_admission_queue_limit(text, text, integer) IS
    'Sets how many runs may queue per concurrency group in a project (default 100). Returns nothing. Raises CR004 for a limit below 1, CR005 for an unknown project.';

-- A script takes a lease: granted now when the group is free, else the run parks
-- (substate awaiting-lease) in the group's FIFO. Scoped leases are released by
-- release_lock; bare ones are held until the run ends.
CREATE OR REPLACE FUNCTION cryo.acquire_lock(
    p_run_id text, p_token uuid, p_path text, p_ordinal integer, p_group text, p_scoped boolean)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue;
    v_memo cryo.journal;
    v_holder text;
BEGIN
    PERFORM cryo._check_name('lock group', p_group);
    SELECT * INTO v_q FROM cryo.queue WHERE run_id = p_run_id;
    IF FOUND THEN
        -- The group lock comes before the row lock, the order every hand-over takes.
        PERFORM cryo._lock_group(v_q.org, v_q.project, p_group);
    END IF;
    v_q := cryo._claimed_row(p_run_id, p_token);
    v_memo := cryo._done_memo(p_run_id, p_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN true;
    END IF;
    v_holder := cryo._group_holder(v_q.org, v_q.project, p_group);
    IF v_holder = p_run_id THEN
        RAISE EXCEPTION 'run % already holds the lease on %', p_run_id, p_group USING ERRCODE = 'CR007';
    END IF;
    IF v_holder IS NULL THEN
        PERFORM cryo._take_lease(v_q.org, v_q.project, p_group, p_run_id, 'script', p_path, p_scoped);
        PERFORM cryo._add_answer(v_q, p_path, 'lock', p_group, p_ordinal, NULL,
                                 jsonb_build_object('group', p_group), 0);
        PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_granted', 'lock', p_group, p_ordinal);
        RETURN true;
    END IF;
    INSERT INTO cryo.lease_waiters (org, project, grp, run_id, kind, scoped, path, enqueued_at)
    VALUES (v_q.org, v_q.project, p_group, p_run_id, 'script', p_scoped, p_path, cryo.now());
    PERFORM cryo._add_marker(v_q, p_path, 'lock', p_group, p_ordinal, NULL);
    PERFORM cryo._park_claimed(p_run_id, 'awaiting-lease', p_path, p_group, NULL);
    RETURN false;
END
$$;
COMMENT ON FUNCTION cryo.acquire_lock(text, uuid, text, integer, text, boolean) IS
    'Takes the project lease on a group for the claimed run: true when granted (or already recorded at this path), false when the run parked in the group''s FIFO. Raises CR002 for a stale claim, CR007 when the run already holds the group, CR004 for a bad name.';

CREATE OR REPLACE FUNCTION cryo.release_lock(p_run_id text, p_token uuid, p_group text)
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
    DELETE FROM cryo.leases
     WHERE org = v_q.org AND project = v_q.project AND grp = p_group AND holder_run_id = p_run_id;
    IF NOT FOUND THEN
        RETURN false;  -- a replayed release: the lease went on the first pass
    END IF;
    PERFORM cryo._history(p_run_id, v_q.org, v_q.project, 'lease_released', 'lock', p_group);
    PERFORM cryo._promote(v_q.org, v_q.project, p_group);
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.release_lock(text, uuid, text) IS
    'Releases the claimed run''s lease on a group and hands it to the oldest waiter; returns false when the run did not hold it. Raises CR002 for a stale claim.';

-- The reconcile sweep: groups held by a run that already ended, and queues with no
-- holder, are handed on. Safe to race with the terminal hook: both take the group lock.
CREATE OR REPLACE FUNCTION cryo._reconcile_admission(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_g record;
    v_n integer := 0;
BEGIN
    FOR v_g IN
        SELECT l.org, l.project, l.grp FROM cryo.leases l JOIN cryo.runs r ON r.id = l.holder_run_id
         WHERE r.status IN ('succeeded', 'failed', 'cancelled', 'unreadable')
        UNION
        SELECT DISTINCT w.org, w.project, w.grp FROM cryo.lease_waiters w
         WHERE NOT EXISTS (SELECT 1 FROM cryo.leases l
                            WHERE l.org = w.org AND l.project = w.project AND l.grp = w.grp)
        LIMIT p_batch
    LOOP
        PERFORM cryo._lock_group(v_g.org, v_g.project, v_g.grp);
        IF cryo._promote(v_g.org, v_g.project, v_g.grp) IS NOT NULL THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END
$$;
