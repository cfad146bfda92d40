-- Project secrets and untrusted runs. A secret's value arrives sealed under the org data
-- key and leaves only through claim_secrets, i.e. into the grant of a live claim; the
-- queue never holds one. An untrusted run's claim learns only the names, so its agent
-- can fail a step that needs one instead of running it without.

-- Names a secret may not take: they would replace what the agent itself sets up.
CREATE OR REPLACE FUNCTION cryo._secret_name_ok(p_name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$', false)
       AND upper(p_name) NOT LIKE 'CRYO%'
       AND upper(p_name) NOT IN ('PATH', 'HOME', 'LANG', 'TERM', 'TZ', 'USER', 'LOGNAME',
                                 'SHELL', 'TMPDIR', 'PWD', 'IFS', 'ENV', 'BASH_ENV', 'PYTHONPATH')
       AND upper(p_name) NOT LIKE 'LD\_%' AND upper(p_name) NOT LIKE 'LC\_%'
$$;

CREATE OR REPLACE FUNCTION cryo.set_secret(p_org text, p_project text, p_name text, p_value bytea)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_created boolean;
BEGIN
    IF NOT cryo._secret_name_ok(p_name) THEN
        RAISE EXCEPTION 'secret name % must be an environment variable name (letters, digits, _), not reserved (CRYO*, PATH, HOME, LD_*, ...)', p_name
            USING ERRCODE = 'CR004';
    END IF;
    IF p_value IS NULL THEN
        RAISE EXCEPTION 'a secret needs a value' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.projects WHERE org = p_org AND slug = p_project) THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.secrets AS s (org, project, name, value, created_at, updated_at)
    VALUES (p_org, p_project, p_name, p_value, v_now, v_now)
    ON CONFLICT (org, project, name) DO UPDATE SET value = excluded.value, updated_at = v_now
    RETURNING (s.xmax = 0) INTO v_created;
    RETURN v_created;
END
$$;
COMMENT ON FUNCTION cryo.set_secret(text, text, text, bytea) IS
    'Stores a sealed secret under a name in a project, replacing any earlier value; returns true when it was new. Raises CR004 for a bad or reserved name or a NULL value, CR005 for an unknown project.';

CREATE OR REPLACE FUNCTION cryo.delete_secret(p_org text, p_project text, p_name text)
RETURNS boolean
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM cryo.secrets
                   WHERE org = p_org AND project = p_project AND name = p_name RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;
COMMENT ON FUNCTION cryo.delete_secret(text, text, text) IS
    'Deletes a secret; returns false when there was none. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_secrets(p_org text, p_project text)
RETURNS TABLE (name text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.name, s.created_at, s.updated_at FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;
COMMENT ON FUNCTION cryo.list_secrets(text, text) IS
    'Returns the names of a project''s secrets (never values), by name. Raises nothing.';

-- What a live claim may see: every secret of the run's project, sealed, or for an
-- untrusted run the names alone (value NULL, withheld true).
CREATE OR REPLACE FUNCTION cryo.claim_secrets(p_run_id text, p_token uuid)
RETURNS TABLE (name text, value bytea, withheld boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_untrusted boolean := (SELECT r.untrusted FROM cryo.runs r WHERE r.id = p_run_id);
BEGIN
    RETURN QUERY
        SELECT s.name, CASE WHEN v_untrusted THEN NULL ELSE s.value END, v_untrusted
          FROM cryo.secrets s
         WHERE s.org = v_q.org AND s.project = v_q.project ORDER BY s.name;
END
$$;
COMMENT ON FUNCTION cryo.claim_secrets(text, uuid) IS
    'Returns the secrets the claimed run may see: sealed values of its project, or names only (withheld) for an untrusted run. Raises CR002 for a stale claim token.';

-- The server's submit of an untrusted run: submit_script, then the mark, in one
-- transaction, so no claim can ever see the run unmarked.
CREATE OR REPLACE FUNCTION cryo.submit_untrusted_script(
    p_org text, p_project text, p_filename text, p_interpreter text, p_source bytea,
    p_input bytea DEFAULT NULL, p_idempotency_key text DEFAULT NULL,
    p_required_caps text[] DEFAULT '{shell}', p_concurrency text DEFAULT NULL,
    p_policy text DEFAULT NULL)
RETURNS TABLE (run_id text, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
    v_created boolean;
BEGIN
    SELECT s.run_id, s.created INTO v_id, v_created FROM cryo.submit_script(
        p_org, p_project, p_filename, p_interpreter, p_source, p_input, p_idempotency_key,
        p_required_caps, NULL, NULL, p_concurrency, p_policy) s;
    IF v_created THEN
        UPDATE cryo.runs r SET untrusted = true WHERE r.id = v_id;
    END IF;
    RETURN QUERY SELECT v_id, v_created;
END
$$;
COMMENT ON FUNCTION cryo.submit_untrusted_script(text, text, text, text, bytea, bytea, text, text[], text, text) IS
    'Like submit_script, but the new run is untrusted: its claims carry no secret values. Returns (run_id, created). Raises what submit_script raises.';

-- A child run or activity of an untrusted run is untrusted too, however it was started:
-- the run that spawns it sets parent_run_id, and this trigger carries the mark across,
-- so no path through a child can reach the project's secrets.
CREATE OR REPLACE FUNCTION cryo._inherit_untrusted()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL AND NOT NEW.untrusted THEN
        NEW.untrusted := coalesce((SELECT r.untrusted FROM cryo.runs r WHERE r.id = NEW.parent_run_id), false);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS runs_inherit_untrusted ON cryo.runs;
CREATE TRIGGER runs_inherit_untrusted
    BEFORE INSERT OR UPDATE OF parent_run_id ON cryo.runs
    FOR EACH ROW EXECUTE FUNCTION cryo._inherit_untrusted();
