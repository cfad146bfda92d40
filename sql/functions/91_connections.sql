-- Connections: a project's named endpoints for connector nodes (cryo.connections).
--
-- A connection is a base URL, an auth scheme and default headers, in the clear, plus
-- the NAME of the project secret holding its credential. The value stays sealed in
-- cryo.secrets and follows the secrets' rules: it leaves the database only in the claim
-- grant of the connector agent doing a connector node's request (cryo._grant_run_secrets
-- gives that job the connection's secret and nothing else), an untrusted run never gets
-- it (its node fails at start, cryo.connection_for_run), and the agent masks it in the
-- job's log. The egress policy is applied by the job to every hop it requests.

-- The checks of a connection's fields, shared by create_connection; CR004 in one line.
CREATE OR REPLACE FUNCTION cryo._connection_check(
    p_name text, p_base_url text, p_auth text, p_secret text, p_username text,
    p_header text, p_headers jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_key text;
    v_value jsonb;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z0-9][a-z0-9_-]{0,62}$' THEN
        RAISE EXCEPTION 'connection name % must be lower-case letters, digits, _ and - (at most 63, starting with a letter or digit)', coalesce(p_name, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    -- No user:password@ (the credential belongs in a secret), no query or fragment (a
    -- node adds its own), no space or control character.
    IF p_base_url IS NULL OR length(p_base_url) > 2000
       OR p_base_url !~ '^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[^[:space:][:cntrl:]?#]*)?$'
       AND p_base_url !~ '^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?(/[^[:space:][:cntrl:]?#]*)?$' THEN
        RAISE EXCEPTION 'base URL % must be http(s)://host[:port][/path], without credentials, query or fragment', coalesce(p_base_url, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    IF p_auth IS NULL OR p_auth NOT IN ('none', 'bearer', 'basic', 'header') THEN
        RAISE EXCEPTION 'auth must be none, bearer, basic or header, not %', coalesce(p_auth, 'null')
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'none') <> (p_secret IS NULL) THEN
        RAISE EXCEPTION 'auth % %', p_auth,
            CASE WHEN p_auth = 'none' THEN 'takes no secret' ELSE 'needs a secret (the project secret holding the credential)' END
            USING ERRCODE = 'CR004';
    END IF;
    IF p_secret IS NOT NULL AND NOT cryo._secret_name_ok(p_secret) THEN
        RAISE EXCEPTION 'secret name % must be an environment variable name (letters, digits, _), not reserved', p_secret
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'basic') <> (p_username IS NOT NULL)
       OR (p_username IS NOT NULL AND (p_username = '' OR p_username ~ '[:[:cntrl:]]' OR length(p_username) > 200)) THEN
        RAISE EXCEPTION 'a user name (without : or control characters) goes with auth basic, and only with it'
            USING ERRCODE = 'CR004';
    END IF;
    IF (p_auth = 'header') <> (p_header IS NOT NULL)
       OR (p_header IS NOT NULL AND p_header !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,64}$') THEN
        RAISE EXCEPTION 'a header name (a token such as X-Api-Key) goes with auth header, and only with it'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_headers IS NULL OR jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be an object of names to strings' USING ERRCODE = 'CR004';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(p_headers)) > 20 THEN
        RAISE EXCEPTION 'a connection has at most 20 default headers' USING ERRCODE = 'CR004';
    END IF;
    -- A default header is stored in the clear: a credential belongs in a secret.
    IF EXISTS (SELECT 1 FROM jsonb_object_keys(p_headers) k
                WHERE lower(k) IN ('authorization', 'proxy-authorization', 'cookie')
                   OR lower(k) = lower(p_header)) THEN
        RAISE EXCEPTION 'a default header may not carry a credential (Authorization, Cookie or the auth header): name a secret with auth instead'
            USING ERRCODE = 'CR004';
    END IF;
    FOR v_key, v_value IN SELECT * FROM jsonb_each(p_headers) LOOP
        IF v_key !~ '^[A-Za-z0-9!#$%&''*+.^_`|~-]{1,64}$' OR jsonb_typeof(v_value) <> 'string'
           OR v_value #>> '{}' ~ '[[:cntrl:]]' OR length(v_value #>> '{}') > 4096 THEN
            RAISE EXCEPTION 'header % must be a token name with a string value of at most 4096 characters, without control characters', v_key
                USING ERRCODE = 'CR004';
        END IF;
    END LOOP;
END
$$;

-- The project secret a connection names must exist when it is made or used: otherwise
-- the node could only fail later with a vaguer reason.
CREATE OR REPLACE FUNCTION cryo._connection_secret_check(p_org text, p_project text,
                                                         p_name text, p_secret text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_secret IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM cryo.secrets s
             WHERE s.org = p_org AND s.project = p_project AND s.name = p_secret) THEN
        RAISE EXCEPTION 'connection % uses secret %, which project %/% does not have (cryopg secret set %)',
            p_name, p_secret, p_org, p_project, p_secret USING ERRCODE = 'CR207';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo.create_connection(
    p_org text, p_project text, p_name text, p_base_url text, p_auth text,
    p_secret text DEFAULT NULL, p_username text DEFAULT NULL, p_header text DEFAULT NULL,
    p_headers jsonb DEFAULT '{}', p_replace boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_created boolean;
BEGIN
    PERFORM cryo._connection_check(p_name, p_base_url, p_auth, p_secret, p_username,
                                   p_header, coalesce(p_headers, '{}'));
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    PERFORM cryo._connection_secret_check(p_org, p_project, p_name, p_secret);
    INSERT INTO cryo.connections AS c (org, project, name, base_url, auth, secret, username,
                                       header, headers, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_base_url, p_auth, p_secret, p_username, p_header,
            coalesce(p_headers, '{}'), v_now, v_now)
    ON CONFLICT (org, project, name) DO NOTHING;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT p_replace THEN
        RAISE EXCEPTION 'connection % already exists in %/% (replace it, or delete it first)',
            p_name, p_org, p_project USING ERRCODE = 'CR205';
    END IF;
    UPDATE cryo.connections c
       SET base_url = p_base_url, auth = p_auth, secret = p_secret, username = p_username,
           header = p_header, headers = coalesce(p_headers, '{}'), updated_at = v_now
     WHERE c.org = p_org AND c.project = p_project AND c.name = p_name;
    RETURN false;
END
$$;
COMMENT ON FUNCTION cryo.create_connection(text, text, text, text, text, text, text, text, jsonb, boolean) IS
    'Stores a connection of a project (base URL, auth scheme none/bearer/basic/header, the name of the project secret holding its credential, a basic user name or the header name, default headers); with p_replace an existing one is replaced. Returns true when it was new. Raises CR004 for a malformed field, CR005 for an unknown project, CR205 when it exists and p_replace is false, CR207 when the project has no secret of that name.';

CREATE OR REPLACE FUNCTION cryo.list_connections(p_org text, p_project text)
RETURNS TABLE (name text, base_url text, auth text, secret text, username text, header text,
               headers jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.name, c.base_url, c.auth, c.secret, c.username, c.header, c.headers,
           c.created_at, c.updated_at
      FROM cryo.connections c WHERE c.org = p_org AND c.project = p_project ORDER BY c.name
$$;
COMMENT ON FUNCTION cryo.list_connections(text, text) IS
    'Returns a project''s connections by name (secret names, never values). Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.get_connection(p_org text, p_project text, p_name text)
RETURNS TABLE (name text, base_url text, auth text, secret text, username text, header text,
               headers jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT * FROM cryo.list_connections(p_org, p_project) c WHERE c.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no connection % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR206';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_connection(text, text, text) IS
    'Returns one connection of a project (its secret''s name, never a value). Raises CR206 when there is none of that name.';

CREATE OR REPLACE FUNCTION cryo.delete_connection(p_org text, p_project text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM cryo.connections c
     WHERE c.org = p_org AND c.project = p_project AND c.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no connection % in %/%', p_name, p_org, p_project USING ERRCODE = 'CR206';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.delete_connection(text, text, text) IS
    'Deletes a connection (its secret stays). A connector node started later that names it fails. Raises CR206 when there is none of that name.';

-- What the graph driver starts a connector node with: the connection of the graph run's
-- project, refused to an untrusted run when it carries a credential (the run's trust
-- from runs.untrusted, cryo._run_untrusted), so the node fails at once with the reason
-- instead of its job failing later without the value.
CREATE OR REPLACE FUNCTION cryo.connection_for_run(p_run_id text, p_name text)
RETURNS TABLE (name text, base_url text, auth text, secret text, username text, header text,
               headers jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_org text := cryo._run_org(p_run_id);
    v_project text := cryo._run_project(p_run_id);
    v_c record;
BEGIN
    SELECT * INTO v_c FROM cryo.get_connection(v_org, v_project, p_name);
    IF v_c.auth <> 'none' AND cryo._run_untrusted(p_run_id) THEN
        RAISE EXCEPTION 'connection %''s credential (secret %) is withheld from an untrusted run',
            p_name, v_c.secret USING ERRCODE = 'CR208';
    END IF;
    PERFORM cryo._connection_secret_check(v_org, v_project, p_name, v_c.secret);
    RETURN QUERY SELECT v_c.name, v_c.base_url, v_c.auth, v_c.secret, v_c.username, v_c.header,
                        v_c.headers, v_c.created_at, v_c.updated_at;
END
$$;
COMMENT ON FUNCTION cryo.connection_for_run(text, text) IS
    'Returns the connection a connector node of run p_run_id names, from the run''s project. Raises CR206 when there is none, CR207 when its secret is gone, CR208 when the run is untrusted and the connection has a credential.';
