-- Log chunks. Each append also renews the lease, so a chatty script never lapses.

CREATE OR REPLACE FUNCTION cryo.append_log(
    p_run_id text, p_token uuid, p_data bytea, p_lease_seconds double precision)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_cancel boolean := cryo.renew_lease(p_run_id, p_token, p_lease_seconds);
BEGIN
    IF p_data IS NOT NULL AND length(p_data) > 0 THEN
        INSERT INTO cryo.logs (run_id, org, project, attempt, data, created_at)
        SELECT r.id, r.org, r.project, r.attempt, p_data, cryo.now()
          FROM cryo.runs r WHERE r.id = p_run_id;
        PERFORM cryo._notify_run(p_run_id);
    END IF;
    RETURN v_cancel;
END
$$;
COMMENT ON FUNCTION cryo.append_log(text, uuid, bytea, double precision) IS
    'Appends a sealed log chunk (none when empty) and renews the lease; returns true when the run was asked to cancel. Raises CR002 for a stale claim token.';

CREATE OR REPLACE FUNCTION cryo.read_logs(p_run_id text, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
RETURNS TABLE (id bigint, data bytea)
LANGUAGE sql STABLE AS $$
    SELECT l.id, l.data FROM cryo.logs l
     WHERE l.run_id = p_run_id AND l.id > p_after
     ORDER BY l.id LIMIT p_limit
$$;
COMMENT ON FUNCTION cryo.read_logs(text, bigint, integer) IS
    'Returns up to p_limit sealed log chunks of a run after chunk id p_after, in order. Raises nothing.';
