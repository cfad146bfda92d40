-- Artifacts: the index of named files whose bytes live in a directory or an S3 bucket,
-- addressed by SHA-256 under their project. A name lives in a scope: its run (the run
-- id, so it is collected with the run) or a cache key of the project
-- ({org}:{project}:key:{key}, kept for the artifact retention the server passes in).
-- Both scopes start with {org}:{project}:, the prefix every run id has.
-- Python moves the bytes and calls these; SQL never sees them.
--
-- Trust (docs/security/trust.md): an artifact an untrusted run put is tainted, and
-- `tainted` is part of the key, so its put of a cache key lands beside the trusted
-- artifact of that (key, name) and never replaces it. A run reads its own artifacts;
-- besides, a trusted run reads trusted ones (tainted ones when it asks, p_tainted), an
-- untrusted run tainted ones and, where it has none of a name, trusted ones published
-- by their put. The reader's trust comes from runs.untrusted (cryo._run_untrusted).
--
-- Blobs are shared by content address, so for an untrusted run a blob exists only when
-- untrusted runs may know it (artifact_blobs.untrusted_known: an untrusted run uploaded
-- its bytes through the server, which hashed them, or a published artifact named it).
-- Otherwise its prepare answers "not there" (and its room check counts the blob as
-- new), and its put is refused until it uploaded the bytes: no guess of a trusted
-- artifact's content is confirmed, and no trusted blob is named by its digest alone.

-- The scope a name lives in: a run's own, or a cache key's.
CREATE OR REPLACE FUNCTION cryo.artifact_scope(
    p_org text, p_project text, p_run_id text, p_key text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_key IS NOT NULL THEN
        PERFORM cryo._check_name('cache key', p_key);
        RETURN p_org || ':' || p_project || ':key:' || p_key;
    END IF;
    IF NOT cryo._run_in_project(p_run_id, p_org, p_project) THEN
        RAISE EXCEPTION 'an artifact belongs to a run of project %/% or to a cache key',
            p_org, p_project USING ERRCODE = 'CR004';
    END IF;
    RETURN p_run_id;
END
$$;
COMMENT ON FUNCTION cryo.artifact_scope(text, text, text, text) IS
    'Returns the scope an artifact name lives in: {org}:{project}:key:{key} with a cache key, else the run id. Raises CR004 for a bad key or a run of another project.';

CREATE OR REPLACE FUNCTION cryo._check_sha256(p_sha256 text, p_size bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_sha256 IS NULL OR p_sha256 !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'sha256 must be 64 lower-case hex digits' USING ERRCODE = 'CR004';
    END IF;
    IF p_size IS NULL OR p_size < 0 THEN
        RAISE EXCEPTION 'size must be a non-negative number of bytes' USING ERRCODE = 'CR004';
    END IF;
END
$$;

-- The bytes a project's artifacts hold, each distinct blob counted once. Blobs no name
-- points at any more are not counted: they are on their way out.
CREATE OR REPLACE FUNCTION cryo.artifact_usage(p_org text, p_project text)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN (SELECT coalesce(sum(b.size), 0)::bigint FROM cryo.artifact_blobs b
             WHERE b.org = p_org AND b.project = p_project
               AND EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256));
END
$$;
COMMENT ON FUNCTION cryo.artifact_usage(text, text) IS
    'Returns the bytes of a project''s artifacts, each distinct blob (SHA-256) counted once. Raises CR021 for an application role of another tenant.';

-- Refuses a new blob that would take the project past p_max_bytes (NULL: no bound).
-- For an untrusted caller a blob it may not know of counts as new, so the refusal tells
-- nothing about it.
CREATE OR REPLACE FUNCTION cryo._check_artifact_room(
    p_org text, p_project text, p_sha256 text, p_size bigint, p_max_bytes bigint,
    p_untrusted boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_used bigint;
BEGIN
    IF p_max_bytes IS NULL OR EXISTS (
        SELECT 1 FROM cryo.artifacts a
         WHERE a.org = p_org AND a.project = p_project AND a.sha256 = p_sha256
           AND (NOT p_untrusted OR EXISTS (
                SELECT 1 FROM cryo.artifact_blobs b
                 WHERE b.org = a.org AND b.project = a.project AND b.sha256 = a.sha256
                   AND b.untrusted_known))) THEN
        RETURN;
    END IF;
    v_used := cryo.artifact_usage(p_org, p_project);
    IF v_used + p_size > p_max_bytes THEN
        RAISE EXCEPTION 'project %/% would hold % bytes of artifacts, over its bound of % (CRYOPG_ARTIFACTS_MAX_BYTES); % bytes are in use',
            p_org, p_project, v_used + p_size, p_max_bytes, v_used USING ERRCODE = 'CR075';
    END IF;
END
$$;

-- Before an upload: whether the store already holds the blob (a put then sends no bytes),
-- and a refusal now rather than after the bytes moved when it would not fit.
CREATE OR REPLACE FUNCTION cryo.prepare_artifact(
    p_org text, p_project text, p_sha256 text, p_size bigint, p_max_bytes bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM cryo._check_artifact_room(p_org, p_project, p_sha256, p_size, p_max_bytes);
    RETURN EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                    WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
                      AND b.size = p_size);
END
$$;
COMMENT ON FUNCTION cryo.prepare_artifact(text, text, text, bigint, bigint) IS
    'Returns true when the project already holds a blob with that SHA-256 and size (no upload needed). Raises CR004 for a malformed digest or size, CR075 when a new blob of that size would take the project past p_max_bytes.';

-- A running script's prepare. For an untrusted run the blob is there only when untrusted
-- runs may know it, and its bytes always pass through the server (verify), which hashes
-- them: a URL signed for the store would let it skip the upload or write other bytes
-- under a digest trusted artifacts name.
CREATE OR REPLACE FUNCTION cryo.prepare_run_artifact(
    p_run_id text, p_token uuid, p_sha256 text, p_size bigint, p_max_bytes bigint)
RETURNS TABLE (present boolean, verify boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_untrusted boolean;
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    v_untrusted := cryo._run_untrusted(p_run_id);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM cryo._check_artifact_room(v_org, v_project, p_sha256, p_size, p_max_bytes,
                                      v_untrusted);
    RETURN QUERY SELECT EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                                 WHERE b.org = v_org AND b.project = v_project
                                   AND b.sha256 = p_sha256 AND b.size = p_size
                                   AND (b.untrusted_known OR NOT v_untrusted)),
                        v_untrusted;
END
$$;
COMMENT ON FUNCTION cryo.prepare_run_artifact(text, uuid, text, bigint, bigint) IS
    'Returns (present, verify) for the claimed run''s put of a blob: present when the project holds it with that size and the run may know so (for an untrusted run, only a blob an untrusted run uploaded or a published artifact named); verify when the bytes must be uploaded through the server, which checks them against the digest (an untrusted run''s). Raises CR002 for a stale claim token, CR004 for a malformed digest or size, CR075 when a new blob would take the project past p_max_bytes.';

-- After the server received an untrusted run's upload and found the bytes hash to
-- p_sha256: untrusted runs may now know the blob and name it. A trusted run's upload
-- needs no record (its put names any blob).
CREATE OR REPLACE FUNCTION cryo.record_run_artifact_upload(
    p_run_id text, p_token uuid, p_sha256 text, p_size bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_now timestamptz := cryo.now();
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    IF NOT cryo._run_untrusted(p_run_id) THEN
        RETURN false;
    END IF;
    -- The project's artifact lock: the store sweep does not remove these bytes meanwhile.
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || v_org || ':' || v_project, 0));
    INSERT INTO cryo.artifact_blobs AS b (org, project, sha256, size, created_at, touched_at,
                                          untrusted_known)
    VALUES (v_org, v_project, p_sha256, p_size, v_now, v_now, true)
    ON CONFLICT (org, project, sha256) DO UPDATE
       SET touched_at = excluded.touched_at, untrusted_known = true;
    RETURN true;
END
$$;
COMMENT ON FUNCTION cryo.record_run_artifact_upload(text, uuid, text, bigint) IS
    'Records that the claimed run uploaded the blob p_sha256 of p_size bytes through the server, which checked the bytes against the digest; for an untrusted run, untrusted runs may then know the blob and name it (returns true), for a trusted run nothing changes (false). Call it only after that check. Raises CR002 for a stale claim token, CR004 for a malformed digest or size.';

-- Points a name at a blob (already in the store), in one transaction: the blob's row is
-- made or touched, the bound checked under a per-project lock so two puts cannot both
-- squeeze under it, and the name (re)pointed. A name's earlier blob is left to the
-- collector.
-- The putting run's trust taints the name (no run: a trusted writer); a trusted put
-- publishes it with p_public (a put without it withdraws that). An untrusted run names
-- only a blob untrusted runs may know (see the header).
CREATE OR REPLACE FUNCTION cryo._put_artifact(
    p_org text, p_project text, p_run_id text, p_key text, p_name text, p_sha256 text,
    p_size bigint, p_max_bytes bigint, p_by_run text, p_public boolean DEFAULT false,
    p_executable boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_scope text := cryo.artifact_scope(p_org, p_project, p_run_id, p_key);
    v_tainted boolean := cryo._run_untrusted(p_by_run);
    v_now timestamptz := cryo.now();
BEGIN
    PERFORM cryo._check_name('artifact', p_name);
    PERFORM cryo._check_sha256(p_sha256, p_size);
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || p_org || ':' || p_project, 0));
    IF v_tainted AND NOT EXISTS (
        SELECT 1 FROM cryo.artifact_blobs b
         WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
           AND b.size = p_size AND b.untrusted_known) THEN
        RAISE EXCEPTION 'an untrusted run names only bytes it uploaded: upload blob % (% bytes) through the server first',
            p_sha256, p_size USING ERRCODE = 'CR170';
    END IF;
    PERFORM cryo._check_artifact_room(p_org, p_project, p_sha256, p_size, p_max_bytes,
                                      v_tainted);
    -- A published name shows the blob to untrusted runs: they may know of it from now on.
    INSERT INTO cryo.artifact_blobs AS b (org, project, sha256, size, created_at, touched_at,
                                          untrusted_known)
    VALUES (p_org, p_project, p_sha256, p_size, v_now, v_now,
            coalesce(p_public, false) AND NOT v_tainted)
    ON CONFLICT (org, project, sha256) DO UPDATE
       SET touched_at = excluded.touched_at,
           untrusted_known = b.untrusted_known OR excluded.untrusted_known;
    INSERT INTO cryo.artifacts AS a (org, project, scope, run_id, cache_key, name, sha256, size,
                                     created_by_run, created_at, tainted, published,
                                     executable)
    VALUES (p_org, p_project, v_scope, CASE WHEN p_key IS NULL THEN p_run_id END, p_key, p_name,
            p_sha256, p_size, p_by_run, v_now, v_tainted,
            coalesce(p_public, false) AND NOT v_tainted, coalesce(p_executable, false))
    ON CONFLICT ON CONSTRAINT artifacts_pkey DO UPDATE
       SET sha256 = excluded.sha256, size = excluded.size,
           created_by_run = excluded.created_by_run, created_at = excluded.created_at,
           published = excluded.published, executable = excluded.executable;
    RETURN QUERY SELECT v_scope, p_name, p_sha256, p_size, v_now;
END
$$;

-- A run's put (its own artifact, or a cached one with p_key), under its live claim.
CREATE OR REPLACE FUNCTION cryo.put_run_artifact(
    p_run_id text, p_token uuid, p_key text, p_name text, p_sha256 text, p_size bigint,
    p_max_bytes bigint, p_public boolean DEFAULT false, p_executable boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT * FROM cryo._put_artifact(
        cryo._run_org(p_run_id), cryo._run_project(p_run_id), p_run_id, p_key, p_name,
        p_sha256, p_size, p_max_bytes, p_run_id, p_public, p_executable);
END
$$;
COMMENT ON FUNCTION cryo.put_run_artifact(text, uuid, text, text, text, bigint, bigint, boolean, boolean) IS
    'Points the run''s artifact p_name (or, with p_key, the project''s cached artifact) at a blob already stored, remembering whether the file was executable (p_executable); returns (scope, name, sha256, size, created_at). An untrusted run''s put is tainted and never replaces a trusted artifact; a trusted run''s p_public lets untrusted runs read it. Raises CR002 for a stale claim token, CR004 for a bad name, key, digest or size, CR075 past p_max_bytes, CR170 when an untrusted run names a blob it did not upload through the server (cryo.record_run_artifact_upload) and no published artifact names.';

-- A put from outside a run: only a cached artifact (a run's own are the run's to write).
CREATE OR REPLACE FUNCTION cryo.put_artifact(
    p_org text, p_project text, p_key text, p_name text, p_sha256 text, p_size bigint,
    p_max_bytes bigint, p_public boolean DEFAULT false, p_executable boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    IF p_key IS NULL THEN
        RAISE EXCEPTION 'outside a run an artifact needs a cache key (--key)' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = p_org AND p.slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN QUERY SELECT * FROM cryo._put_artifact(
        p_org, p_project, NULL, p_key, p_name, p_sha256, p_size, p_max_bytes, NULL, p_public,
        p_executable);
END
$$;
COMMENT ON FUNCTION cryo.put_artifact(text, text, text, text, text, bigint, bigint, boolean, boolean) IS
    'Points the project''s trusted cached artifact (p_key, p_name) at a blob already stored (with p_public, published to untrusted runs; p_executable: the file was executable); returns (scope, name, sha256, size, created_at). Raises CR004 without a key or for a bad name, key, digest or size, CR005 for an unknown project, CR075 past p_max_bytes.';

-- One name of a scope (a run id, or a cache key's scope from cryo.artifact_scope), for a
-- person or an application: the trusted artifact of a cache key, or with p_tainted the
-- tainted one; a run's scope has one namespace, read as it is.
CREATE OR REPLACE FUNCTION cryo.find_artifact(p_org text, p_project text, p_scope text, p_name text,
                                              p_tainted boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz,
               cache_key text, created_by_run text, tainted boolean, published boolean,
               executable boolean)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo.artifacts a
                  WHERE a.scope = p_scope AND a.name = p_name
                    AND a.org = p_org AND a.project = p_project
                    AND (a.run_id IS NOT NULL OR a.tainted = coalesce(p_tainted, false));
END
$$;
COMMENT ON FUNCTION cryo.find_artifact(text, text, text, text, boolean) IS
    'Returns the artifact p_name of scope p_scope in the project (of a cache key, the trusted one, or with p_tainted the one untrusted runs put), with its trust flags; no row when there is none. Raises CR021 for an application role of another tenant.';

-- A scope's names, or with p_scope NULL every cached artifact of the project, of both
-- namespaces (each row says which) unless p_tainted picks one.
CREATE OR REPLACE FUNCTION cryo.list_artifacts(p_org text, p_project text, p_scope text,
                                               p_tainted boolean DEFAULT NULL)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz,
               cache_key text, created_by_run text, tainted boolean, published boolean,
               executable boolean)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._app_tenant_check(p_org, p_project);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo.artifacts a
                  WHERE a.org = p_org AND a.project = p_project
                    AND (a.scope = p_scope OR (p_scope IS NULL AND a.cache_key IS NOT NULL))
                    AND (p_tainted IS NULL OR a.run_id IS NOT NULL OR a.tainted = p_tainted)
                  ORDER BY a.scope, a.name, a.tainted;
END
$$;
COMMENT ON FUNCTION cryo.list_artifacts(text, text, text, boolean) IS
    'Returns the artifacts of scope p_scope (a run id or a cache key''s scope), or every cached artifact of the project when p_scope is NULL, by scope and name, with their trust flags; p_tainted (NULL: both) keeps one namespace of cached ones. Raises CR021 for an application role of another tenant.';

-- The artifacts a run may read (see the header), one per (scope, name): of scope
-- p_scope and name p_name, each when NULL (p_scope NULL: the cached ones).
CREATE OR REPLACE FUNCTION cryo._run_artifacts(p_run_id text, p_scope text, p_name text,
                                               p_tainted boolean)
RETURNS SETOF cryo.artifacts
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT ON (a.scope, a.name) a.* FROM cryo.artifacts a
     WHERE a.org = cryo._run_org(p_run_id) AND a.project = cryo._run_project(p_run_id)
       AND (a.scope = p_scope OR (p_scope IS NULL AND a.cache_key IS NOT NULL))
       AND (p_name IS NULL OR a.name = p_name)
       AND (a.scope = p_run_id
            OR a.tainted = (cryo._run_untrusted(p_run_id) OR coalesce(p_tainted, false))
            OR (cryo._run_untrusted(p_run_id) AND a.published))
     ORDER BY a.scope, a.name, a.tainted DESC
$$;

-- A running script's get: its own artifact, run p_run's, or the cached (p_key, p_name).
CREATE OR REPLACE FUNCTION cryo.find_run_artifact(
    p_run_id text, p_token uuid, p_run text, p_key text, p_name text,
    p_tainted boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz,
               cache_key text, created_by_run text, tainted boolean, published boolean,
               executable boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo._run_artifacts(
                        p_run_id, cryo.artifact_scope(cryo._run_org(p_run_id),
                                                      cryo._run_project(p_run_id),
                                                      coalesce(p_run, p_run_id), p_key),
                        p_name, p_tainted) a;
END
$$;
COMMENT ON FUNCTION cryo.find_run_artifact(text, uuid, text, text, text, boolean) IS
    'Returns the artifact p_name the claimed run may read -- its own, run p_run''s, or with p_key the cached one: a trusted run reads trusted ones (with p_tainted those untrusted runs put), an untrusted run tainted ones and, where it has none, published trusted ones; no row when there is none it may read. Raises CR002 for a stale claim token, CR004 for a bad key or a run of another project.';

CREATE OR REPLACE FUNCTION cryo.list_run_artifacts(
    p_run_id text, p_token uuid, p_run text, p_cached boolean, p_tainted boolean DEFAULT false)
RETURNS TABLE (scope text, name text, sha256 text, size bigint, created_at timestamptz,
               cache_key text, created_by_run text, tainted boolean, published boolean,
               executable boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN QUERY SELECT a.scope, a.name, a.sha256, a.size, a.created_at, a.cache_key,
                        a.created_by_run, a.tainted, a.published, a.executable
                   FROM cryo._run_artifacts(
                        p_run_id,
                        CASE WHEN NOT coalesce(p_cached, false) THEN cryo.artifact_scope(
                            cryo._run_org(p_run_id), cryo._run_project(p_run_id),
                            coalesce(p_run, p_run_id), NULL) END,
                        NULL, p_tainted) a
                  ORDER BY a.scope, a.name;
END
$$;
COMMENT ON FUNCTION cryo.list_run_artifacts(text, uuid, text, boolean, boolean) IS
    'Returns the artifacts the claimed run may read (as find_run_artifact) of its own scope, of run p_run, or with p_cached every cached one, by scope and name. Raises CR002 for a stale claim token, CR004 for a run of another project.';

-- A running script's download by digest: only of a blob an artifact it may read names.
CREATE OR REPLACE FUNCTION cryo.find_run_artifact_blob(p_run_id text, p_token uuid, p_sha256 text)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._claimed_row(p_run_id, p_token);
    RETURN (SELECT b.size FROM cryo.artifact_blobs b
             WHERE b.org = cryo._run_org(p_run_id) AND b.project = cryo._run_project(p_run_id)
               AND b.sha256 = p_sha256
               AND EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256
                              AND (NOT cryo._run_untrusted(p_run_id) OR a.tainted
                                   OR a.published)));
END
$$;
COMMENT ON FUNCTION cryo.find_run_artifact_blob(text, uuid, text) IS
    'Returns the size of the project''s blob with that SHA-256 when an artifact the claimed run may read names it (for a trusted run, a tainted one too: it fetches those only by a name it asked for with --tainted), else NULL. Raises CR002 for a stale claim token.';

-- Whether a project holds a blob, and its size (a proxied download asks by digest).
CREATE OR REPLACE FUNCTION cryo.find_artifact_blob(p_org text, p_project text, p_sha256 text)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT b.size FROM cryo.artifact_blobs b
     WHERE b.org = p_org AND b.project = p_project AND b.sha256 = p_sha256
       AND EXISTS (SELECT 1 FROM cryo.artifacts a
                    WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256)
$$;
COMMENT ON FUNCTION cryo.find_artifact_blob(text, text, text) IS
    'Returns the size of the project''s blob with that SHA-256 when a name points at it, else NULL. Raises nothing.';

-- Retention of artifacts: cached names older than p_cached go, then blobs no name points
-- at and nobody touched within p_grace are removed and returned, so the caller deletes
-- their bytes from the store before it commits (a put of the same blob meanwhile waits
-- on these rows, then finds the bytes gone and uploads them again).
CREATE OR REPLACE FUNCTION cryo.collect_artifacts(p_cached interval, p_grace interval,
                                                  p_batch integer DEFAULT 1000)
RETURNS TABLE (org text, project text, sha256 text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    IF p_cached <= interval '0' OR p_grace < interval '0' THEN
        RAISE EXCEPTION 'retention must be a positive interval' USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.artifacts a WHERE (a.scope, a.name, a.tainted) IN (
        SELECT c.scope, c.name, c.tainted FROM cryo.artifacts c
         WHERE c.cache_key IS NOT NULL AND c.created_at < cryo.now() - p_cached
         ORDER BY c.created_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED);
    RETURN QUERY
    DELETE FROM cryo.artifact_blobs b WHERE (b.org, b.project, b.sha256) IN (
        SELECT o.org, o.project, o.sha256 FROM cryo.artifact_blobs o
         WHERE o.touched_at < cryo.now() - p_grace
           AND NOT EXISTS (SELECT 1 FROM cryo.artifacts a
                            WHERE a.org = o.org AND a.project = o.project AND a.sha256 = o.sha256)
         ORDER BY o.touched_at LIMIT p_batch
           FOR UPDATE SKIP LOCKED)
    RETURNING b.org, b.project, b.sha256;
END
$$;
COMMENT ON FUNCTION cryo.collect_artifacts(interval, interval, integer) IS
    'Deletes cached artifacts put more than p_cached ago, then the blobs no artifact points at that nobody touched within p_grace, at most p_batch of each; returns the removed blobs (org, project, sha256), whose bytes the caller deletes. Raises CR004 for a non-positive retention.';

-- Of blobs the store holds for a project, the ones no index row knows (bytes of a put
-- that was refused or never committed, or of a deleted project), under the project's
-- artifact lock, held to commit: a put cannot name one of them before the caller has
-- deleted its bytes, and one naming it later finds them gone and uploads again.
CREATE OR REPLACE FUNCTION cryo.unindexed_artifact_blobs(p_org text, p_project text,
                                                         p_sha256s text[])
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('cryo.artifacts:' || p_org || ':' || p_project, 0));
    -- A statement of its own, so its snapshot sees every put committed before the lock.
    RETURN QUERY SELECT DISTINCT s.sha256 FROM unnest(p_sha256s) AS s (sha256)
                  WHERE NOT EXISTS (SELECT 1 FROM cryo.artifact_blobs b
                                     WHERE b.org = p_org AND b.project = p_project
                                       AND b.sha256 = s.sha256);
END
$$;
COMMENT ON FUNCTION cryo.unindexed_artifact_blobs(text, text, text[]) IS
    'Takes the project''s artifact lock until commit and returns those of p_sha256s the project has no blob row for, whose bytes the caller may delete from the store. Raises nothing.';
