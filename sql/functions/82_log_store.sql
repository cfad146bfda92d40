-- Logs in object storage. With CRYOPG_LOGS_S3_* set, server replicas move each finished
-- run's log out of cryo.logs into the store (sealed and compressed in Python; SQL never
-- sees a byte of it) and record where it went in cryo.log_archives. cryo.logs then holds
-- only the hot tier: live runs and finished ones not moved yet.
--
-- One mover per log (issue 36). A replica claims a run's log with cryo.claim_log_moves:
-- a lease in cryo.log_moves naming the attempt, the key only that attempt writes, and
-- when the lease lapses. The mover renews it while it streams, verifies what the store
-- holds, then cryo.archive_run_log records the object and drops the chunks in one
-- transaction, for the live lease's attempt only. A lease whose replica died lapses and
-- the next claim takes it over, queueing the dead attempt's key for deletion; a failed
-- attempt gives its lease back with cryo.abandon_log_move, queueing its key. So no two
-- replicas move one log at once, no attempt writes over another's object, and no object
-- is left behind that no row names.

-- Finished runs (for at least p_older_than, so whatever reads a job's output as it ends
-- reads it from the database) whose log still has chunks in cryo.logs, oldest end first.
-- Driven from cryo.logs, not cryo.runs: a skip scan of logs_run visits each run with
-- chunks in the hot tier once (live runs and finished ones not moved yet), so a round
-- costs the same however many finished runs have moved or logged nothing.
CREATE OR REPLACE FUNCTION cryo.logs_to_archive(p_older_than interval, p_limit integer)
RETURNS TABLE (run_id text, org text, project text, bytes bigint, last_chunk_id bigint)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE hot(run_id) AS (
        (SELECT l.run_id FROM cryo.logs l ORDER BY l.run_id LIMIT 1)
        UNION ALL
        SELECT (SELECT l.run_id FROM cryo.logs l WHERE l.run_id > h.run_id
                 ORDER BY l.run_id LIMIT 1)
          FROM hot h WHERE h.run_id IS NOT NULL
    ), due AS (
        SELECT r.id, r.org, r.project, r.finished_at
          FROM hot h JOIN cryo.runs r ON r.id = h.run_id
         WHERE r.finished_at <= cryo.now() - p_older_than
         ORDER BY r.finished_at, r.id
         LIMIT p_limit
    )
    SELECT d.id, d.org, d.project, s.bytes, s.last_id
      FROM due d
      CROSS JOIN LATERAL (SELECT sum(length(l.data))::bigint AS bytes, max(l.id) AS last_id
                            FROM cryo.logs l WHERE l.run_id = d.id) s
     WHERE s.last_id IS NOT NULL
     ORDER BY d.finished_at, d.id
$$;
COMMENT ON FUNCTION cryo.logs_to_archive(interval, integer) IS
    'Returns up to p_limit runs finished at least p_older_than ago whose log has chunks in cryo.logs: run, org, project, sealed bytes held and last chunk id. Raises nothing.';

-- A replica's claim on up to p_limit logs to move: finished runs (p_older_than ago) with
-- chunks in the hot tier, not moved yet and with no live lease, oldest end first. Each
-- run's row is locked FOR NO KEY UPDATE SKIP LOCKED while its lease is written, so two
-- replicas claiming at once take different runs; a lease committed after this statement's
-- snapshot is seen under the lock and the run skipped. A lapsed lease is taken over: the
-- attempt that held it may have written its object, so its key is queued for deletion,
-- not before p_lease from now (a slow holder's last part lands within its own lease).
-- The attempt's key is p_prefix || org/project/run-.../attempt: no other attempt writes it.
CREATE OR REPLACE FUNCTION cryo.claim_log_moves(p_holder text, p_prefix text,
                                                p_older_than interval, p_lease interval,
                                                p_limit integer)
RETURNS TABLE (run_id text, org text, project text, attempt_id text, object_key text,
               last_chunk_id bigint, bytes bigint, attempts integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_run record;
    v_old cryo.log_moves%ROWTYPE;
    v_last bigint;
    v_bytes bigint;
    v_attempt text;
    v_key text;
    v_attempts integer;
BEGIN
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'a log move needs a positive lease and limit' USING ERRCODE = 'CR004';
    END IF;
    FOR v_run IN
        WITH RECURSIVE hot(run_id) AS (
            (SELECT l.run_id FROM cryo.logs l ORDER BY l.run_id LIMIT 1)
            UNION ALL
            SELECT (SELECT l.run_id FROM cryo.logs l WHERE l.run_id > h.run_id
                     ORDER BY l.run_id LIMIT 1)
              FROM hot h WHERE h.run_id IS NOT NULL
        )
        SELECT r.id, r.org, r.project
          FROM hot h JOIN cryo.runs r ON r.id = h.run_id
         WHERE r.finished_at <= v_now - p_older_than
           AND NOT EXISTS (SELECT 1 FROM cryo.log_moves m
                            WHERE m.run_id = r.id AND m.lease_expires_at > v_now)
           AND NOT EXISTS (SELECT 1 FROM cryo.log_archives a WHERE a.run_id = r.id)
         ORDER BY r.finished_at, r.id
         LIMIT p_limit
           FOR NO KEY UPDATE OF r SKIP LOCKED
    LOOP
        SELECT max(l.id), sum(length(l.data))::bigint INTO v_last, v_bytes
          FROM cryo.logs l WHERE l.run_id = v_run.id;
        CONTINUE WHEN v_last IS NULL;
        v_attempt := replace(gen_random_uuid()::text, '-', '');
        v_key := p_prefix || v_run.org || '/' || v_run.project || '/'
                 || substr(v_run.id, length(v_run.org) + length(v_run.project) + 3)
                 || '/' || v_attempt;
        SELECT * INTO v_old FROM cryo.log_moves m WHERE m.run_id = v_run.id FOR UPDATE;
        IF FOUND THEN
            CONTINUE WHEN v_old.lease_expires_at > v_now;  -- claimed since our snapshot
            IF v_old.object_key IS NOT NULL THEN  -- lapsed, not given back
                INSERT INTO cryo.log_objects_to_delete (object_key, queued_at, not_before)
                VALUES (v_old.object_key, v_now, v_now + p_lease);
            END IF;
            v_attempts := v_old.attempts + 1;
            UPDATE cryo.log_moves m
               SET attempt_id = v_attempt, holder = p_holder, object_key = v_key,
                   last_chunk_id = v_last, attempts = v_attempts, claimed_at = v_now,
                   lease_expires_at = v_now + p_lease
             WHERE m.run_id = v_run.id;
        ELSE
            v_attempts := 1;
            INSERT INTO cryo.log_moves AS m (run_id, org, project, attempt_id, holder,
                                             object_key, last_chunk_id, attempts,
                                             claimed_at, lease_expires_at)
            VALUES (v_run.id, v_run.org, v_run.project, v_attempt, p_holder, v_key, v_last,
                    1, v_now, v_now + p_lease)
            ON CONFLICT ON CONSTRAINT log_moves_pkey DO NOTHING;
            CONTINUE WHEN NOT FOUND;  -- another replica's claim committed meanwhile
        END IF;
        run_id := v_run.id;
        org := v_run.org;
        project := v_run.project;
        attempt_id := v_attempt;
        object_key := v_key;
        last_chunk_id := v_last;
        bytes := v_bytes;
        attempts := v_attempts;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION cryo.claim_log_moves(text, text, interval, interval, integer) IS
    'Leases up to p_limit finished runs'' logs (ended at least p_older_than ago, chunks in cryo.logs, not moved, no live lease) to holder p_holder for p_lease: run, org, project, attempt id, the object key only this attempt writes (under p_prefix), the last chunk id and sealed bytes it covers, and the run''s attempt count. A lapsed lease taken over queues its attempt''s key for deletion. Raises CR004 for a lease or limit not positive.';

-- The mover renews its lease as it streams; a lease lost (lapsed and taken over, given
-- back, or the run collected) stops the attempt before it writes more.
CREATE OR REPLACE FUNCTION cryo.renew_log_move(p_run_id text, p_attempt_id text,
                                               p_lease interval)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_until timestamptz;
BEGIN
    UPDATE cryo.log_moves m SET lease_expires_at = cryo.now() + p_lease
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now()
    RETURNING m.lease_expires_at INTO v_until;
    IF v_until IS NULL THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    RETURN v_until;
END
$$;
COMMENT ON FUNCTION cryo.renew_log_move(text, text, interval) IS
    'Extends attempt p_attempt_id''s lease on run p_run_id''s log move to p_lease from now; returns when it lapses. Raises CR100 when that attempt does not hold a live lease.';

-- One page of the chunks a mover streams: after p_after, up to p_upto, stopping once
-- p_max_bytes (sealed) are in it (at least one chunk), so a page's memory is bounded
-- however large the chunks.
CREATE OR REPLACE FUNCTION cryo.read_log_page(p_run_id text, p_after bigint, p_upto bigint,
                                              p_max_bytes integer)
RETURNS TABLE (id bigint, data bytea)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_total bigint := 0;
BEGIN
    FOR id, data IN
        SELECT l.id, l.data FROM cryo.logs l
         WHERE l.run_id = p_run_id AND l.id > p_after AND l.id <= p_upto
         ORDER BY l.id
    LOOP
        RETURN NEXT;
        v_total := v_total + length(data);
        EXIT WHEN v_total >= p_max_bytes;
    END LOOP;
END
$$;
COMMENT ON FUNCTION cryo.read_log_page(text, bigint, bigint, integer) IS
    'Returns a run''s sealed log chunks after chunk id p_after up to p_upto, in order, stopping after the chunk that brings the page to p_max_bytes. Raises nothing.';

-- Records that a run's log, up to the chunk its lease covers, is in the store under the
-- attempt's key (verified by the mover: its size and SHA-256 as read back), and drops
-- those chunks and the lease, in one transaction. Only the attempt holding the live lease
-- may: any other is refused and deletes its own object. The run's key-share lock orders
-- this against its collection: a run collected first (or meanwhile) is gone, and the
-- object just written is queued for deletion instead.
CREATE OR REPLACE FUNCTION cryo.archive_run_log(p_run_id text, p_attempt_id text,
                                                p_object_key text, p_bytes bigint,
                                                p_object_bytes bigint, p_sha256 bytea)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs%ROWTYPE;
    v_move cryo.log_moves%ROWTYPE;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id FOR KEY SHARE;
    IF NOT FOUND THEN
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
        RETURN false;
    END IF;
    IF v_run.finished_at IS NULL THEN
        RAISE EXCEPTION 'run % has not finished; its log stays in the database', p_run_id
            USING ERRCODE = 'CR004';
    END IF;
    IF p_object_bytes IS NULL OR p_object_bytes < 1 OR p_bytes IS NULL OR p_bytes < 0
       OR length(p_sha256) IS DISTINCT FROM 32 THEN
        RAISE EXCEPTION 'a moved log is recorded with its size and SHA-256 as verified'
            USING ERRCODE = 'CR004';
    END IF;
    SELECT * INTO v_move FROM cryo.log_moves m WHERE m.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR v_move.attempt_id <> p_attempt_id
       OR v_move.lease_expires_at <= cryo.now() THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    IF v_move.object_key <> p_object_key THEN
        RAISE EXCEPTION 'attempt % writes %, not %', p_attempt_id, v_move.object_key,
            p_object_key USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.log_moves m WHERE m.run_id = p_run_id;
    INSERT INTO cryo.log_archives (run_id, org, project, object_key, last_chunk_id, bytes,
                                   archived_at, attempt_id, object_bytes, sha256, attempts)
    VALUES (p_run_id, v_run.org, v_run.project, p_object_key, v_move.last_chunk_id, p_bytes,
            cryo.now(), p_attempt_id, p_object_bytes, p_sha256, v_move.attempts)
    ON CONFLICT (run_id) DO NOTHING;
    IF NOT FOUND THEN  -- moved before (claims skip moved logs; an archive from psql)
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
        RETURN false;
    END IF;
    DELETE FROM cryo.logs WHERE run_id = p_run_id AND id <= v_move.last_chunk_id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.archive_run_log(text, text, text, bigint, bigint, bytea) IS
    'Records a finished run''s log as moved by attempt p_attempt_id to p_object_key (p_bytes of log, an object of p_object_bytes with SHA-256 p_sha256, as verified) up to the chunk its lease covers, deletes those chunks from cryo.logs and ends the lease; returns false when the run is gone or was moved before (the key is queued for deletion). Raises CR100 when that attempt does not hold a live lease, CR004 for a run not finished, a key not the attempt''s or a size or hash missing.';

-- A failed attempt gives its lease back (lapsed now, so the next round of any replica
-- claims the log again, the run's attempts still counted) and queues the key it may have
-- written (a put that failed may still have landed), so no object is left behind. A lease
-- lost meanwhile is left to its holder.
CREATE OR REPLACE FUNCTION cryo.abandon_log_move(p_run_id text, p_attempt_id text,
                                                 p_object_key text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_object_key IS NOT NULL THEN
        INSERT INTO cryo.log_objects_to_delete (object_key, queued_at)
        VALUES (p_object_key, cryo.now());
    END IF;
    UPDATE cryo.log_moves m SET lease_expires_at = least(m.lease_expires_at, cryo.now()),
                                object_key = NULL
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now();
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n > 0;
END
$$;
COMMENT ON FUNCTION cryo.abandon_log_move(text, text, text) IS
    'Ends attempt p_attempt_id''s lease on run p_run_id''s log move now (when it still holds it; the row stays, counting the run''s attempts, until the log moves) and queues p_object_key, if given, for deletion from the store; returns whether the lease was ended. Raises nothing.';

-- The movers' other half: objects to delete (of collected runs, failed attempts and
-- taken-over leases), oldest first, once due. Several replicas may list the same rows;
-- deleting an object twice is harmless.
CREATE OR REPLACE FUNCTION cryo.log_objects_to_delete(p_limit integer)
RETURNS TABLE (id bigint, object_key text)
LANGUAGE sql STABLE AS $$
    SELECT d.id, d.object_key FROM cryo.log_objects_to_delete d
     WHERE d.not_before IS NULL OR d.not_before <= cryo.now()
     ORDER BY d.id LIMIT p_limit
$$;
COMMENT ON FUNCTION cryo.log_objects_to_delete(integer) IS
    'Returns up to p_limit queued (id, object key) of objects to delete from the log store (collected runs, failed or taken-over move attempts) whose deletion is due, oldest first. Raises nothing.';

-- Once the store has deleted the objects, their rows go (by id: a key queued again since
-- it was listed stays queued).
CREATE OR REPLACE FUNCTION cryo.forget_log_objects(p_ids bigint[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    DELETE FROM cryo.log_objects_to_delete WHERE id = ANY (p_ids);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION cryo.forget_log_objects(bigint[]) IS
    'Deletes the queued rows p_ids once their objects are deleted from the store; returns how many went (0 when another replica forgot them first). Raises nothing.';

-- Where a run's moved log is, if it moved.
CREATE OR REPLACE FUNCTION cryo.read_log_archive(p_run_id text)
RETURNS TABLE (object_key text, last_chunk_id bigint, bytes bigint)
LANGUAGE sql STABLE AS $$
    SELECT a.object_key, a.last_chunk_id, a.bytes FROM cryo.log_archives a
     WHERE a.run_id = p_run_id
$$;
COMMENT ON FUNCTION cryo.read_log_archive(text) IS
    'Returns the object key, last chunk id and size of a run''s log moved to the object store; no row when it has not moved. Raises nothing.';

-- While the store has been down past the grace period a finished run's log waits in
-- cryo.logs, bounded. The newest chunk that must go for the rest to fit p_keep_bytes
-- (sealed sizes): the mover reads the chunks up to it to count the bytes it drops.
CREATE OR REPLACE FUNCTION cryo.log_trim_point(p_run_id text, p_keep_bytes bigint)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT max(s.id) FROM (
        SELECT l.id, sum(length(l.data)) OVER (ORDER BY l.id DESC) AS from_end
          FROM cryo.logs l WHERE l.run_id = p_run_id) s
     WHERE s.from_end > greatest(p_keep_bytes, 0)
$$;
COMMENT ON FUNCTION cryo.log_trim_point(text, bigint) IS
    'Returns the id of the newest log chunk of a run that must be dropped for the rest to hold at most p_keep_bytes (sealed sizes); NULL when it fits already. Raises nothing.';

-- Drops a run's log chunks up to p_upto and puts the sealed marker p_marker (made by the
-- mover: how many bytes went) in the last one's place, so a reader sees where the gap is
-- and how big. Only under the attempt's live lease: no other replica is reading those
-- chunks into an object meanwhile.
CREATE OR REPLACE FUNCTION cryo.trim_run_log(p_run_id text, p_attempt_id text,
                                             p_upto bigint, p_marker bytea)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_dropped bigint;
    v_last bigint;
BEGIN
    PERFORM 1 FROM cryo.log_moves m
     WHERE m.run_id = p_run_id AND m.attempt_id = p_attempt_id
       AND m.lease_expires_at > cryo.now()
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt % no longer holds the move of run %''s log', p_attempt_id,
            p_run_id USING ERRCODE = 'CR100';
    END IF;
    WITH gone AS (
        DELETE FROM cryo.logs l WHERE l.run_id = p_run_id AND l.id <= p_upto
        RETURNING l.id, length(l.data) AS n
    )
    SELECT coalesce(sum(n), 0), max(id) INTO v_dropped, v_last FROM gone;
    IF v_last IS NOT NULL THEN
        INSERT INTO cryo.logs (id, run_id, org, project, attempt, data, created_at)
        SELECT v_last, r.id, r.org, r.project, r.attempt, p_marker, cryo.now()
          FROM cryo.runs r WHERE r.id = p_run_id;
    END IF;
    RETURN v_dropped;
END
$$;
COMMENT ON FUNCTION cryo.trim_run_log(text, text, bigint, bytea) IS
    'Drops a run''s log chunks up to id p_upto and puts the sealed marker p_marker in the last one''s place, under attempt p_attempt_id''s live lease; returns the sealed bytes dropped (0: nothing changed). Raises CR100 when that attempt does not hold a live lease.';
