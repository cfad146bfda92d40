-- Logs in object storage. With CRYOPG_LOGS_S3_* set, server replicas move each finished
-- run's log out of cryo.logs into the store (sealed and compressed in Python; SQL never
-- sees a byte of it) and record where it went in cryo.log_archives. cryo.logs then holds
-- only the hot tier: live runs and finished ones not moved yet. Several replicas may move
-- the same run at once; the first record wins and the rest change nothing.

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

-- Records that a run's log up to chunk p_last_chunk_id is in the store under
-- p_object_key, and drops those chunks from the hot tier, in one transaction. The run's
-- key-share lock orders this against its collection: a run collected first (or meanwhile)
-- is gone, and the object just written is queued for deletion instead.
CREATE OR REPLACE FUNCTION cryo.archive_run_log(p_run_id text, p_object_key text,
                                                p_last_chunk_id bigint, p_bytes bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs%ROWTYPE;
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
    INSERT INTO cryo.log_archives (run_id, org, project, object_key, last_chunk_id, bytes,
                                   archived_at)
    VALUES (p_run_id, v_run.org, v_run.project, p_object_key, p_last_chunk_id, p_bytes,
            cryo.now())
    ON CONFLICT (run_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;  -- another replica moved it first
    END IF;
    DELETE FROM cryo.logs WHERE run_id = p_run_id AND id <= p_last_chunk_id;
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.archive_run_log(text, text, bigint, bigint) IS
    'Records a finished run''s log as moved to the object store (key, last chunk id, bytes) and deletes those chunks from cryo.logs; returns false when it was recorded already (nothing changes) or the run is gone (the key is queued for deletion). Raises CR004 for a run not finished.';

-- The movers' other half: objects of collected runs to delete, oldest first. Several
-- replicas may list the same rows; deleting an object twice is harmless.
CREATE OR REPLACE FUNCTION cryo.log_objects_to_delete(p_limit integer)
RETURNS TABLE (id bigint, object_key text)
LANGUAGE sql STABLE AS $$
    SELECT d.id, d.object_key FROM cryo.log_objects_to_delete d ORDER BY d.id LIMIT p_limit
$$;
COMMENT ON FUNCTION cryo.log_objects_to_delete(integer) IS
    'Returns up to p_limit queued (id, object key) of moved logs whose runs were collected, oldest first. Raises nothing.';

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

-- While the store is down a finished run's log waits in cryo.logs; past a bound the
-- oldest chunks go, and one sealed marker chunk (p_marker, made by the server) takes the
-- place of the last chunk dropped, so a reader sees where the gap is.
CREATE OR REPLACE FUNCTION cryo.trim_run_log(p_run_id text, p_keep_bytes bigint, p_marker bytea)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_dropped bigint;
    v_last bigint;
BEGIN
    WITH sized AS (
        SELECT l.id, length(l.data) AS n,
               sum(length(l.data)) OVER (ORDER BY l.id DESC) AS from_end
          FROM cryo.logs l WHERE l.run_id = p_run_id
    ), gone AS (
        DELETE FROM cryo.logs l USING sized s
         WHERE l.id = s.id AND s.from_end > p_keep_bytes
        RETURNING l.id, s.n
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
COMMENT ON FUNCTION cryo.trim_run_log(text, bigint, bytea) IS
    'Drops the oldest log chunks of a run beyond its newest p_keep_bytes (sealed sizes) and puts the sealed marker p_marker where the last dropped chunk was; returns the sealed bytes dropped (0: nothing changed). Raises nothing.';
