-- Orgs, their wrapped data keys, tokens and agents. The database only ever holds a
-- data key wrapped by the master key, which it never sees.

-- Stores an org's wrapped data key the first time one is offered and returns the key
-- that is in force, so two servers racing to create a key agree on one.
CREATE OR REPLACE FUNCTION cryo.set_org_key(p_org text, p_key_id text, p_wrapped bytea)
RETURNS TABLE (key_id text, wrapped_key bytea)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.orgs o SET key_id = p_key_id, wrapped_key = p_wrapped
     WHERE o.slug = p_org AND o.wrapped_key IS NULL;
    RETURN QUERY SELECT o.key_id, o.wrapped_key FROM cryo.orgs o WHERE o.slug = p_org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.set_org_key(text, text, bytea) IS
    'Sets the org''s wrapped data key if it has none; returns the key in force. Raises CR005 for an unknown org.';

CREATE OR REPLACE FUNCTION cryo.get_org_key(p_org text)
RETURNS TABLE (key_id text, wrapped_key bytea)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT o.key_id, o.wrapped_key FROM cryo.orgs o WHERE o.slug = p_org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_org_key(text) IS
    'Returns the org''s key id and wrapped data key (both null before the first seal). Raises CR005 for an unknown org.';

-- Tokens are stored as a hash of their secret; the secret itself is shown once. A user
-- token acts for one member of its org (p_member is the login); an agent token carries
-- a capability ceiling, which defaults to shell and polyglot (never connector).
CREATE OR REPLACE FUNCTION cryo.create_token(
    p_kind text, p_org text, p_name text, p_secret_hash bytea,
    p_capabilities text[] DEFAULT '{}', p_expires_at timestamptz DEFAULT NULL,
    p_member text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id text := 'tok-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    v_member text;
    v_caps text[] := coalesce(p_capabilities, '{}');
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('user', 'agent') THEN
        RAISE EXCEPTION 'token kind must be user or agent, not %', p_kind USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    IF p_kind = 'user' THEN
        SELECT m.id INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = p_member;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'a user token needs a member of org %; no member %', p_org, p_member
                USING ERRCODE = 'CR005';
        END IF;
        v_caps := '{}';
    ELSE
        IF cardinality(v_caps) = 0 THEN
            v_caps := '{shell,polyglot}';
        END IF;
        IF EXISTS (SELECT 1 FROM unnest(v_caps) c WHERE c IS NULL OR c !~ '^[a-z][a-z0-9_-]{0,31}$') THEN
            RAISE EXCEPTION 'capabilities must be short lower-case names' USING ERRCODE = 'CR004';
        END IF;
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= cryo.now() THEN
        RAISE EXCEPTION 'a token cannot expire in the past (%)', p_expires_at USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.tokens (id, kind, org, name, secret_hash, capabilities, expires_at, member_id)
    VALUES (v_id, p_kind, p_org, coalesce(p_name, ''), p_secret_hash, v_caps, p_expires_at, v_member);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.create_token(text, text, text, bytea, text[], timestamptz, text) IS
    'Creates a user token (for the member whose login is p_member) or an agent token (with a capability ceiling, default shell+polyglot) from the hash of its secret; returns the token id. Raises CR004 for a bad kind, capability or expiry, CR005 for an unknown org or member.';

CREATE OR REPLACE FUNCTION cryo.authenticate_token(p_secret_hash bytea)
RETURNS TABLE (token_id text, kind text, org text, capabilities text[], member text, role text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT t.id, t.kind, t.org, t.capabilities, m.login, m.role
          FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
         WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL
           AND (t.expires_at IS NULL OR t.expires_at > cryo.now());
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown, revoked or expired token' USING ERRCODE = 'CR008';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.authenticate_token(bytea) IS
    'Returns the live token whose secret hashes to the argument, with its member login and role (NULL for agents). Raises CR008 when none is live.';

-- The rank of a role; a route that needs role R admits every role ranked at least R.
CREATE OR REPLACE FUNCTION cryo._role_rank(p_role text)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_role WHEN 'owner' THEN 4 WHEN 'admin' THEN 3 WHEN 'member' THEN 2
                       WHEN 'viewer' THEN 1 ELSE 0 END
$$;

-- Every user route starts here: the token must be a live user token, the org and
-- project of the path must be its own and exist (else it reads as absent, a 404 that
-- says nothing about other tenants), and its member must hold at least p_need.
CREATE OR REPLACE FUNCTION cryo.authorize_user(
    p_secret_hash bytea, p_org text, p_project text, p_need text)
RETURNS TABLE (token_id text, member text, role text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_tok record;
BEGIN
    SELECT t.id, t.kind, t.org, m.login, m.role INTO v_tok
      FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
     WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL
       AND (t.expires_at IS NULL OR t.expires_at > cryo.now());
    IF NOT FOUND THEN
        -- A session of somebody signed in through the OIDC issuer acts like a user token.
        SELECT s.id, 'user' AS kind, s.org, m.login, m.role INTO v_tok
          FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
         WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL
           AND s.expires_at > cryo.now();
    END IF;
    IF NOT FOUND OR v_tok.kind <> 'user' OR v_tok.role IS NULL THEN
        RAISE EXCEPTION 'unknown, revoked or expired user token' USING ERRCODE = 'CR008';
    END IF;
    IF v_tok.org IS DISTINCT FROM p_org
       OR (p_project IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM cryo.projects p WHERE p.org = p_org AND p.slug = p_project)) THEN
        RAISE EXCEPTION 'no project %/%', p_org, coalesce(p_project, '') USING ERRCODE = 'CR005';
    END IF;
    IF cryo._role_rank(v_tok.role) < cryo._role_rank(p_need) OR cryo._role_rank(p_need) = 0 THEN
        RAISE EXCEPTION 'role % of % cannot do this (needs %)', v_tok.role, v_tok.login, p_need
            USING ERRCODE = 'CR020';
    END IF;
    RETURN QUERY SELECT v_tok.id, v_tok.login, v_tok.role;
END
$$;
COMMENT ON FUNCTION cryo.authorize_user(bytea, text, text, text) IS
    'Authorizes a user request on org/project (project NULL for org-level routes) needing role p_need (viewer, member, admin, owner), made with a user token or a signed-in session (cryo.sessions); returns the token or session id, member login and role. Raises CR008 for a secret that is neither a live user token nor a live session, CR005 when the org is not the token''s or the project does not exist, CR020 when the role is too low.';

CREATE OR REPLACE FUNCTION cryo.list_tokens(p_org text)
RETURNS TABLE (id text, kind text, name text, member text, capabilities text[],
               created_at timestamptz, expires_at timestamptz, revoked_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT t.id, t.kind, t.name, m.login, t.capabilities, t.created_at, t.expires_at, t.revoked_at
      FROM cryo.tokens t LEFT JOIN cryo.members m ON m.id = t.member_id
     WHERE t.org = p_org ORDER BY t.created_at, t.id
$$;
COMMENT ON FUNCTION cryo.list_tokens(text) IS
    'Returns every token of an org (never a secret or its hash), oldest first. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.revoke_token(p_org text, p_token_id text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.tokens SET revoked_at = cryo.now()
     WHERE org = p_org AND id = p_token_id AND revoked_at IS NULL;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.tokens WHERE org = p_org AND id = p_token_id) THEN
        RAISE EXCEPTION 'no token % in org %', p_token_id, p_org USING ERRCODE = 'CR005';
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION cryo.revoke_token(text, text) IS
    'Revokes a token at once; returns false when it was already revoked. Raises CR005 for a token not of that org.';

-- An agent's periodic refresh (the server calls it now and then while the agent claims,
-- not per claim): capabilities, build and when it last received a run. The answer tells
-- the server whether the agent was asked to drain, so it gets no new claim.
CREATE OR REPLACE FUNCTION cryo.register_agent(p_org text, p_agent_id text, p_capabilities text[],
                                               p_build text DEFAULT NULL,
                                               p_instance text DEFAULT NULL,
                                               p_last_claim_at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE sql AS $$
    INSERT INTO cryo.agents (id, org, capabilities, registered_at, last_seen_at, build,
                             instance, last_claim_at, replica)
    VALUES (p_agent_id, p_org, p_capabilities, cryo.now(), cryo.now(), p_build, p_instance,
            p_last_claim_at, nullif(current_setting('cryo.replica_id', true), ''))
    ON CONFLICT (org, id) DO UPDATE  -- an org's agent ids are its own (V0013)
       SET capabilities = excluded.capabilities, last_seen_at = excluded.last_seen_at,
           -- another process under an old id is a restarted agent: a drain was for the old one
           drain_requested_at = CASE WHEN excluded.instance IS DISTINCT FROM cryo.agents.instance
                                     THEN NULL ELSE cryo.agents.drain_requested_at END,
           build = excluded.build, instance = excluded.instance,
           last_claim_at = coalesce(excluded.last_claim_at, cryo.agents.last_claim_at),
           replica = excluded.replica,  -- the replica it claims through (cryo.replica_id)
           gone_at = NULL  -- it claims: it is here
    RETURNING drain_requested_at IS NOT NULL
$$;
COMMENT ON FUNCTION cryo.register_agent(text, text, text[], text, text, timestamptz) IS
    'Records (or refreshes) an agent: the capabilities it advertises, its build, its process instance (a new one clears a drain asked of the old), when it last received a run (a known one is kept when NULL), the server replica it claims through (the session''s cryo.replica_id), and that it is not gone. Returns true when the agent was asked to drain. Raises nothing of its own.';

-- What an agent process says of itself, or the server learns of it: 'draining' (it got
-- SIGTERM: it finishes the run it holds and takes no new one, so every replica refuses
-- its claims from now on, as for cryo.drain_agents) or 'gone' (it said goodbye on its way
-- out, or its claim long-poll was closed from its end). Only the process instance named
-- (when given) is marked: a restarted agent under the same id is not the one that left.
CREATE OR REPLACE FUNCTION cryo.note_agent(p_org text, p_agent_id text, p_instance text,
                                           p_state text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_found boolean;
BEGIN
    IF p_state = 'draining' THEN
        UPDATE cryo.agents a SET drain_requested_at = coalesce(a.drain_requested_at, cryo.now())
         WHERE a.org = p_org AND a.id = p_agent_id
           AND (p_instance IS NULL OR a.instance IS NOT DISTINCT FROM p_instance);
        v_found := FOUND;
        IF v_found THEN
            PERFORM pg_notify('cryo_drain', json_build_object('org', p_org,
                                                              'ids', ARRAY[p_agent_id])::text);
        END IF;
    ELSIF p_state = 'gone' THEN
        UPDATE cryo.agents a SET gone_at = cryo.now()
         WHERE a.org = p_org AND a.id = p_agent_id
           AND (p_instance IS NULL OR a.instance IS NOT DISTINCT FROM p_instance);
        v_found := FOUND;
    ELSE
        RAISE EXCEPTION 'an agent''s state is draining or gone, not %', coalesce(p_state, 'NULL')
            USING ERRCODE = 'CR004';
    END IF;
    RETURN v_found;
END
$$;
COMMENT ON FUNCTION cryo.note_agent(text, text, text, text) IS
    'Marks the org''s agent p_agent_id (only its process instance p_instance, when given) draining (and notifies cryo_drain, as cryo.drain_agents does) or gone until its next refresh. Returns false when no such agent (instance) is known. Raises CR004 for another state.';

-- The agents of an org as operators see them: build, capabilities, the replica it claims
-- through, when last seen (last_contact_at: the latest of its refresh, its claim of the
-- run it holds and its goodbye) and last given a run, and a state: gone (it said goodbye or its long-poll was closed from
-- its end since it last claimed; or the claim it holds has lapsed unrenewed, as when it
-- was killed or stopped mid-run; or not seen for p_gone_after), draining (asked to, or
-- told the server it got SIGTERM), busy (holds a claim), idle.
CREATE OR REPLACE FUNCTION cryo.list_agents(p_org text, p_gone_after interval DEFAULT '2 minutes')
RETURNS TABLE (id text, build text, capabilities text[], registered_at timestamptz,
               last_seen_at timestamptz, last_claim_at timestamptz, claimed_run text,
               drain_requested_at timestamptz, state text, replica text,
               last_contact_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT a.id, a.build, a.capabilities, a.registered_at, a.last_seen_at,
           greatest(a.last_claim_at, c.claimed_at), c.run_id, a.drain_requested_at,
           CASE WHEN a.gone_at IS NOT NULL
                  OR (c.run_id IS NULL AND a.last_seen_at < cryo.now() - p_gone_after)
                  OR c.claim_expires_at < cryo.now() THEN 'gone'
                WHEN a.drain_requested_at IS NOT NULL THEN 'draining'
                WHEN c.run_id IS NOT NULL THEN 'busy'
                ELSE 'idle' END,
           a.replica, greatest(a.last_seen_at, c.claimed_at, a.gone_at)
      FROM cryo.agents a
      LEFT JOIN LATERAL (SELECT q.run_id, q.claimed_at, q.claim_expires_at FROM cryo.queue q
                          WHERE q.org = a.org AND q.state = 'claimed' AND q.agent_id = a.id
                          ORDER BY q.claimed_at DESC LIMIT 1) c ON true
     WHERE a.org = p_org
     ORDER BY a.id
$$;
COMMENT ON FUNCTION cryo.list_agents(text, interval) IS
    'Returns the org''s agents with build, capabilities, times seen and last given a run, the run each holds now, the replica it claims through, its last contact, and state: gone (said goodbye or closed its long-poll since its last refresh, its claim lapsed unrenewed, or not seen for p_gone_after), draining, busy or idle. Raises nothing.';

-- Asks agents to drain: they finish the run they hold, take no new one and exit. By build
-- (every agent of the org reporting it), by id (an id or the ids `cryopg agent --id ID
-- --count N` gives, ID-1..ID-N), or both.
CREATE OR REPLACE FUNCTION cryo.drain_agents(p_org text, p_build text DEFAULT NULL,
                                             p_agent_id text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
    v_note text;
BEGIN
    IF p_build IS NULL AND p_agent_id IS NULL THEN
        RAISE EXCEPTION 'name a build or an agent to drain' USING ERRCODE = 'CR004';
    END IF;
    WITH marked AS (
        UPDATE cryo.agents a SET drain_requested_at = cryo.now()
         WHERE a.org = p_org AND a.drain_requested_at IS NULL
           AND (p_build IS NULL OR a.build = p_build)
           AND (p_agent_id IS NULL OR a.id = p_agent_id
                OR (left(a.id, length(p_agent_id) + 1) = p_agent_id || '-'
                    AND substr(a.id, length(p_agent_id) + 2) ~ '^[0-9]+$'))
        RETURNING a.id)
    SELECT coalesce(array_agg(id), '{}') INTO v_ids FROM marked;
    IF cardinality(v_ids) > 0 THEN
        -- Every replica hears it at commit and refuses these agents at once, so a claim
        -- held open on another replica is not granted one last run. The ids ride along
        -- when they fit a notification (8000 bytes); else replicas re-read every mark.
        v_note := json_build_object('org', p_org, 'ids', v_ids)::text;
        IF octet_length(v_note) > 7000 THEN
            v_note := json_build_object('org', p_org)::text;
        END IF;
        PERFORM pg_notify('cryo_drain', v_note);
    END IF;
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION cryo.drain_agents(text, text, text) IS
    'Marks the org''s agents of build p_build and/or id p_agent_id (or p_agent_id-N) as draining and notifies cryo_drain (JSON: org, and ids when they fit); returns how many were newly marked. Raises CR004 when neither is given.';

-- What every server replica reads each tick: the agents asked to drain, so a claim for
-- one is refused without a query on the claim path.
CREATE OR REPLACE FUNCTION cryo.draining_agents()
RETURNS TABLE (org text, id text)
LANGUAGE sql STABLE AS $$
    SELECT a.org, a.id FROM cryo.agents a WHERE a.drain_requested_at IS NOT NULL
$$;
COMMENT ON FUNCTION cryo.draining_agents() IS
    'Returns (org, id) of every agent asked to drain. Raises nothing.';

-- Master key rotation: the CLI reads every wrapped key, unwraps it with the old master
-- key and wraps the same data key with the new one, then swaps them all here in one
-- transaction. Payloads are untouched because the data keys do not change.
CREATE OR REPLACE FUNCTION cryo.list_org_keys()
RETURNS TABLE (org text, key_id text, wrapped_key bytea)
LANGUAGE sql STABLE AS $$
    SELECT o.slug, o.key_id, o.wrapped_key FROM cryo.orgs o
     WHERE o.wrapped_key IS NOT NULL ORDER BY o.slug
$$;
COMMENT ON FUNCTION cryo.list_org_keys() IS
    'Returns every org that has a data key, with its key id and wrapped key. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.rewrap_org_keys(p_orgs text[], p_old bytea[], p_new bytea[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := coalesce(cardinality(p_orgs), 0);
    v_done integer;
BEGIN
    IF coalesce(cardinality(p_old), 0) <> v_n OR coalesce(cardinality(p_new), 0) <> v_n THEN
        RAISE EXCEPTION 'rewrap_org_keys needs arrays of one length' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.orgs o SET wrapped_key = u.new
      FROM unnest(p_orgs, p_old, p_new) AS u(org, old, new)
     WHERE o.slug = u.org AND o.wrapped_key = u.old AND u.new IS NOT NULL;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    IF v_done <> v_n THEN
        RAISE EXCEPTION 'an org key changed during the rotation (% of % matched); nothing was rewrapped',
            v_done, v_n USING ERRCODE = 'CR004';
    END IF;
    RETURN v_done;
END
$$;
COMMENT ON FUNCTION cryo.rewrap_org_keys(text[], bytea[], bytea[]) IS
    'Replaces each org''s wrapped key p_old by p_new, all or nothing; returns how many. Raises CR004 when an array length differs or a key is no longer p_old.';

-- Orgs, projects and members. A slug is permanent (nothing here changes one); a name
-- is what renames. Roles rank owner > admin > member > viewer (see cryo._role_rank).

CREATE OR REPLACE FUNCTION cryo._slug_ok(p_slug text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_slug ~ '^[a-z0-9][a-z0-9-]{0,62}$', false)
$$;

-- Creates an org if it is missing; returns true when it did. Used by the dev bootstrap
-- and by operators; an existing org keeps its name.
CREATE OR REPLACE FUNCTION cryo.ensure_org(p_slug text, p_name text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT cryo._slug_ok(p_slug) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_slug
            USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.orgs (slug, name) VALUES (p_slug, coalesce(nullif(p_name, ''), p_slug))
    ON CONFLICT (slug) DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION cryo.ensure_org(text, text) IS
    'Creates the org if missing; returns true when created. Raises CR004 for a malformed slug.';

CREATE OR REPLACE FUNCTION cryo.rename_org(p_slug text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a name cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.orgs SET name = p_name WHERE slug = p_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no org %', p_slug USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.rename_org(text, text) IS
    'Changes an org''s display name (the slug never changes). Returns nothing. Raises CR004 for an empty name, CR005 for an unknown org.';

CREATE OR REPLACE FUNCTION cryo.ensure_project(p_org text, p_slug text, p_name text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT cryo._slug_ok(p_slug) THEN
        RAISE EXCEPTION 'project slug % must be lower-case letters, digits and - (up to 63)', p_slug
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.projects (org, slug, name)
    VALUES (p_org, p_slug, coalesce(nullif(p_name, ''), p_slug))
    ON CONFLICT (org, slug) DO NOTHING;
    RETURN FOUND;
END
$$;
COMMENT ON FUNCTION cryo.ensure_project(text, text, text) IS
    'Creates the project in the org if missing; returns true when created. Raises CR004 for a malformed slug, CR005 for an unknown org.';

CREATE OR REPLACE FUNCTION cryo.rename_project(p_org text, p_slug text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a name cannot be empty' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.projects SET name = p_name WHERE org = p_org AND slug = p_slug;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no project %/%', p_org, p_slug USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.rename_project(text, text, text) IS
    'Changes a project''s display name (the slug never changes). Returns nothing. Raises CR004 for an empty name, CR005 for an unknown project.';

CREATE OR REPLACE FUNCTION cryo.list_projects(p_org text)
RETURNS TABLE (slug text, name text, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT p.slug, p.name, p.created_at FROM cryo.projects p WHERE p.org = p_org ORDER BY p.slug
$$;
COMMENT ON FUNCTION cryo.list_projects(text) IS 'Returns the projects of an org by slug. Raises nothing.';

-- Stored workflows of a project, for `cryopg workflow list`: what each is and what starts
-- it (schedules and event handlers naming it, webhooks bound to it), read in one pass.
CREATE OR REPLACE FUNCTION cryo.list_workflows(p_org text, p_project text)
RETURNS TABLE (name text, filename text, kind text, pipeline text, updated_at timestamptz,
               schedules bigint, handlers bigint, webhooks bigint, version integer,
               updated_by text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    PERFORM cryo._require_project(p_org, p_project);
    RETURN QUERY
    SELECT w.name, w.filename,
           CASE WHEN w.graph ? 'pipeline' THEN 'pipeline' ELSE w.kind END,
           w.graph ->> 'pipeline', w.updated_at,
           (SELECT count(*) FROM cryo.schedules s
             WHERE s.org = w.org AND s.project = w.project AND s.workflow = w.name),
           (SELECT count(*) FROM cryo.event_handlers h
             WHERE h.org = w.org AND h.project = w.project AND h.workflow = w.name),
           (SELECT count(*) FROM cryo.webhooks k
             WHERE k.org = w.org AND k.project = w.project AND k.workflow = w.name),
           w.version,
           (SELECT v.created_by FROM cryo.workflow_versions v
             WHERE v.org = w.org AND v.project = w.project AND v.workflow = w.name
               AND v.version = w.version)
      FROM cryo.workflows w
     WHERE w.org = p_org AND w.project = p_project
     ORDER BY w.name;
END
$$;
COMMENT ON FUNCTION cryo.list_workflows(text, text) IS
    'Returns the stored workflows of a project by name: filename, kind (script, graph or pipeline), the pipeline version, when it was last put, how many schedules, event handlers and webhooks start it, its current version and who stored that. Raises CR005 for an unknown project.';

-- A stored workflow's versions, newest first, for the workflows page: who stored each
-- and when (the sources stay sealed; get_workflow_version reads one).
CREATE OR REPLACE FUNCTION cryo.list_workflow_versions(p_org text, p_project text, p_name text)
RETURNS TABLE (version integer, filename text, kind text, pipeline text, created_by text,
               created_at timestamptz, current boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_current integer;
BEGIN
    SELECT w.version INTO v_current FROM cryo.workflows w
     WHERE w.org = p_org AND w.project = p_project AND w.name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project USING ERRCODE = 'CR005';
    END IF;
    RETURN QUERY
    SELECT v.version, v.filename, CASE WHEN v.graph ? 'pipeline' THEN 'pipeline' ELSE v.kind END,
           v.graph ->> 'pipeline', v.created_by, v.created_at, v.version = v_current
      FROM cryo.workflow_versions v
     WHERE v.org = p_org AND v.project = p_project AND v.workflow = p_name
     ORDER BY v.version DESC;
END
$$;
COMMENT ON FUNCTION cryo.list_workflow_versions(text, text, text) IS
    'Returns the versions of a stored workflow, newest first: number, filename, kind (script, graph or pipeline), pipeline version, who stored it (NULL: from SQL or before versions were kept), when, and whether it is the current one. Raises CR005 for an unknown workflow.';

CREATE OR REPLACE FUNCTION cryo.get_workflow_version(p_org text, p_project text, p_name text,
                                                     p_version integer)
RETURNS TABLE (filename text, interpreter text, source bytea, kind text, graph jsonb,
               workdir text, created_by text, created_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT v.filename, v.interpreter, v.source, v.kind, v.graph, v.workdir,
                        v.created_by, v.created_at
                   FROM cryo.workflow_versions v
                  WHERE v.org = p_org AND v.project = p_project AND v.workflow = p_name
                    AND v.version = p_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'workflow % in project %/% has no version %', p_name, p_org, p_project, p_version
            USING ERRCODE = 'CR005';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.get_workflow_version(text, text, text, integer) IS
    'Returns one version of a stored workflow: filename, interpreter, sealed source, kind, compiled graph, directory, who stored it and when. Raises CR005 for an unknown workflow or version.';

-- Removes a stored workflow. The schedules and handlers its own `on:` registered go with
-- it; a schedule, handler or webhook made separately that starts it is never removed
-- behind its owner's back: the delete is refused (CR055), naming them, until they are
-- deleted or pointed elsewhere. Runs already started keep their pinned copy.
CREATE OR REPLACE FUNCTION cryo.delete_workflow(p_org text, p_project text, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_users text;
BEGIN
    PERFORM 1 FROM cryo.workflows
      WHERE org = p_org AND project = p_project AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no workflow % in project %/%', p_name, p_org, p_project
            USING ERRCODE = 'CR005';
    END IF;
    SELECT string_agg(what, ', ' ORDER BY what) INTO v_users FROM (
        SELECT 'schedule ' || s.name AS what FROM cryo.schedules s
         WHERE s.org = p_org AND s.project = p_project AND s.workflow = p_name
           AND s.source_workflow IS DISTINCT FROM p_name
        UNION ALL
        SELECT 'handler ' || h.name FROM cryo.event_handlers h
         WHERE h.org = p_org AND h.project = p_project AND h.workflow = p_name
           AND h.source_workflow IS DISTINCT FROM p_name
        UNION ALL
        SELECT 'webhook ' || k.name FROM cryo.webhooks k
         WHERE k.org = p_org AND k.project = p_project AND k.workflow = p_name) u;
    IF v_users IS NOT NULL THEN
        RAISE EXCEPTION 'workflow % is started by %; delete those first', p_name, v_users
            USING ERRCODE = 'CR055';
    END IF;
    -- Its own schedules and handlers go by the foreign keys' ON DELETE CASCADE.
    DELETE FROM cryo.workflows WHERE org = p_org AND project = p_project AND name = p_name;
END
$$;
COMMENT ON FUNCTION cryo.delete_workflow(text, text, text) IS
    'Deletes a stored workflow with the schedules and handlers its on: registered. Returns nothing. Raises CR005 for an unknown workflow, CR055 when a schedule, handler or webhook made separately still starts it.';

-- Adds or changes a member. p_by is the acting member's login (NULL: an operator on the
-- database, who may do anything). Only an owner grants or takes away owner, and the
-- last owner of an org cannot be demoted.
CREATE OR REPLACE FUNCTION cryo.put_member(p_org text, p_login text, p_role text, p_by text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_by_role text;
    v_old cryo.members;
    v_id text;
BEGIN
    IF p_role IS NULL OR p_role NOT IN ('owner', 'admin', 'member', 'viewer') THEN
        RAISE EXCEPTION 'role must be owner, admin, member or viewer, not %', p_role USING ERRCODE = 'CR004';
    END IF;
    IF p_login IS NULL OR p_login !~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$' THEN
        RAISE EXCEPTION 'member login % must be letters, digits, _ . @ - (up to 128)', p_login
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    SELECT * INTO v_old FROM cryo.members WHERE org = p_org AND login = p_login FOR UPDATE;
    IF p_by IS NOT NULL THEN
        SELECT role INTO v_by_role FROM cryo.members WHERE org = p_org AND login = p_by;
        IF cryo._role_rank(v_by_role) < 3
           OR ((p_role = 'owner' OR v_old.role = 'owner') AND v_by_role <> 'owner') THEN
            RAISE EXCEPTION 'role % cannot make % a member of role %', coalesce(v_by_role, 'none'),
                p_login, p_role USING ERRCODE = 'CR020';
        END IF;
    END IF;
    IF v_old.role = 'owner' AND p_role <> 'owner'
       AND NOT EXISTS (SELECT 1 FROM cryo.members
                        WHERE org = p_org AND role = 'owner' AND login <> p_login) THEN
        RAISE EXCEPTION '% is the last owner of org %', p_login, p_org USING ERRCODE = 'CR004';
    END IF;
    IF v_old.id IS NOT NULL THEN
        UPDATE cryo.members SET role = p_role WHERE id = v_old.id;
        RETURN v_old.id;
    END IF;
    v_id := 'mem-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    INSERT INTO cryo.members (id, org, login, role, created_at)
    VALUES (v_id, p_org, p_login, p_role, cryo.now());
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.put_member(text, text, text, text) IS
    'Adds a member with a role or changes its role, acting as member p_by (NULL: operator); returns the member id. Raises CR004 for a bad role or login or for demoting the last owner, CR005 for an unknown org, CR020 when p_by may not grant that.';

-- The dev bootstrap's member: created with p_role when missing, left alone otherwise.
CREATE OR REPLACE FUNCTION cryo.ensure_member(p_org text, p_login text, p_role text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
BEGIN
    SELECT id INTO v_id FROM cryo.members WHERE org = p_org AND login = p_login;
    IF FOUND THEN
        RETURN v_id;
    END IF;
    RETURN cryo.put_member(p_org, p_login, p_role, NULL);
END
$$;
COMMENT ON FUNCTION cryo.ensure_member(text, text, text) IS
    'Returns the id of member p_login, creating it with p_role when missing. Raises what put_member raises.';

-- Removes a member and every token it holds, in one transaction.
CREATE OR REPLACE FUNCTION cryo.remove_member(p_org text, p_login text, p_by text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_old cryo.members;
    v_by_role text;
BEGIN
    SELECT * INTO v_old FROM cryo.members WHERE org = p_org AND login = p_login FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no member % in org %', p_login, p_org USING ERRCODE = 'CR005';
    END IF;
    IF p_by IS NOT NULL THEN
        SELECT role INTO v_by_role FROM cryo.members WHERE org = p_org AND login = p_by;
        IF cryo._role_rank(v_by_role) < 3 OR (v_old.role = 'owner' AND v_by_role <> 'owner') THEN
            RAISE EXCEPTION 'role % cannot remove %', coalesce(v_by_role, 'none'), p_login
                USING ERRCODE = 'CR020';
        END IF;
    END IF;
    IF v_old.role = 'owner' AND NOT EXISTS (SELECT 1 FROM cryo.members
                                             WHERE org = p_org AND role = 'owner' AND login <> p_login) THEN
        RAISE EXCEPTION '% is the last owner of org %', p_login, p_org USING ERRCODE = 'CR004';
    END IF;
    -- A removed member's tokens go with it: they could never authenticate again.
    DELETE FROM cryo.tokens WHERE member_id = v_old.id;
    DELETE FROM cryo.members WHERE id = v_old.id;
END
$$;
COMMENT ON FUNCTION cryo.remove_member(text, text, text) IS
    'Removes member p_login and deletes its tokens, acting as member p_by (NULL: operator). Returns nothing. Raises CR005 for an unknown member, CR004 for the last owner, CR020 when p_by may not.';

CREATE OR REPLACE FUNCTION cryo.list_members(p_org text)
RETURNS TABLE (login text, role text, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT m.login, m.role, m.created_at FROM cryo.members m
     WHERE m.org = p_org ORDER BY m.login
$$;
COMMENT ON FUNCTION cryo.list_members(text) IS 'Returns the members of an org by login. Raises nothing.';

-- Project secrets and untrusted runs. A secret's value arrives sealed under the org data
-- key and leaves only through claim_secrets, i.e. into the grant of a live claim, and,
-- still sealed, to the server through read_secret_values, which masks it in what users
-- read; the queue never holds one. An untrusted run's claim learns only the names, so its agent
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

-- The server masks a project's secret values in every payload it opens for a user
-- (outputs, annotations, cells, events): it needs the sealed values, never in clear here.
CREATE OR REPLACE FUNCTION cryo.read_secret_values(p_org text, p_project text)
RETURNS TABLE (name text, value bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.name, s.value FROM cryo.secrets s
     WHERE s.org = p_org AND s.project = p_project ORDER BY s.name
$$;
COMMENT ON FUNCTION cryo.read_secret_values(text, text) IS
    'Returns a project''s secrets with their sealed values, by name, for the server to mask them in what users read. Raises nothing.';

-- -- application roles ----------------------------------------------------------------

-- Makes a database role an application of one tenant: it joins cryo_app (so it may call
-- the application's functions) and is bound to an org and, optionally, one project of it,
-- which every one of those functions and every view then holds it to. Runs as the
-- caller, who needs CREATEROLE (to create the role) and cryo_app's admin option (to grant
-- it): the schema owner or a superuser. The engine's own roles cannot be bound: they
-- could set themselves free again (and a superuser is never held).
CREATE OR REPLACE FUNCTION cryo.bind_app_role(
    p_role text, p_org text, p_project text DEFAULT NULL, p_create boolean DEFAULT false,
    p_login boolean DEFAULT true)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_owner text := (SELECT pg_get_userbyid(n.nspowner) FROM pg_namespace n WHERE n.nspname = 'cryo');
    v_created boolean := false;
BEGIN
    IF p_role IS NULL OR p_role !~ '^[A-Za-z_][A-Za-z0-9_.-]{0,62}$' THEN
        RAISE EXCEPTION 'a role name is 1 to 63 letters, digits, _ . - (starting with a letter or _)'
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', coalesce(p_org, '') USING ERRCODE = 'CR005';
    END IF;
    IF p_project IS NOT NULL THEN
        PERFORM cryo._require_project(p_org, p_project);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cryo_app') THEN
        RAISE EXCEPTION 'role cryo_app does not exist (migrate as a role with CREATEROLE)'
            USING ERRCODE = 'CR005';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = p_role) THEN
        IF NOT p_create THEN
            RAISE EXCEPTION 'no database role %', p_role USING ERRCODE = 'CR005';
        END IF;
        EXECUTE format('CREATE ROLE %I %s', p_role, CASE WHEN p_login THEN 'LOGIN' ELSE 'NOLOGIN' END);
        v_created := true;
    END IF;
    IF p_role IN ('cryo_app', 'cryo_dba') OR pg_has_role(p_role, v_owner, 'MEMBER') THEN
        RAISE EXCEPTION 'role % is one of the engine''s own (it can act as the owner %); bind an application''s own role',
            p_role, v_owner USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
                   JOIN pg_roles r ON r.oid = m.member
                    WHERE a.rolname = 'cryo_app' AND r.rolname = p_role) THEN
        EXECUTE format('GRANT cryo_app TO %I', p_role);
    END IF;
    INSERT INTO cryo.app_roles AS b (role, org, project, created_at)
    VALUES (p_role, p_org, p_project, pg_catalog.now())
    ON CONFLICT (role) DO UPDATE SET org = excluded.org, project = excluded.project,
                                     created_at = excluded.created_at;
    RETURN v_created;
END
$$;
COMMENT ON FUNCTION cryo.bind_app_role(text, text, text, boolean, boolean) IS
    'Grants cryo_app to a database role and binds it to an org and one of its projects (p_project NULL: all of them), replacing an earlier binding; with p_create a missing role is created first (LOGIN unless p_login is false, no password). Returns true when the role was created here. Raises CR004 for a bad role name or an engine role (the owner, one that can become it, a superuser, cryo_app, cryo_dba), CR005 for an unknown org, project or role (or no cryo_app); permission denied when the caller may not create roles or grant cryo_app.';

-- Undoes bind_app_role: the binding goes and the role leaves cryo_app, so it can call
-- nothing. The role itself stays (it may own objects); DROP ROLE it if it should go.
CREATE OR REPLACE FUNCTION cryo.unbind_app_role(p_role text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_found boolean;
BEGIN
    DELETE FROM cryo.app_roles WHERE role = p_role;
    v_found := FOUND;
    IF EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
               JOIN pg_roles r ON r.oid = m.member
                WHERE a.rolname = 'cryo_app' AND r.rolname = p_role) THEN
        EXECUTE format('REVOKE cryo_app FROM %I', p_role);
        v_found := true;
    END IF;
    RETURN v_found;
END
$$;
COMMENT ON FUNCTION cryo.unbind_app_role(text) IS
    'Removes a role''s tenant binding and its membership of cryo_app (the role itself stays). Returns false when it had neither. Raises permission denied when the caller may not revoke cryo_app.';

CREATE OR REPLACE FUNCTION cryo.list_app_roles()
RETURNS TABLE (role text, org text, project text, can_login boolean, in_cryo_app boolean,
               created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT b.role, b.org, b.project, r.rolcanlogin,
           r.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles a ON a.oid = m.roleid
                                          WHERE a.rolname = 'cryo_app' AND m.member = r.oid),
           b.created_at
      FROM cryo.app_roles b LEFT JOIN pg_roles r ON r.rolname = b.role
     ORDER BY b.role
$$;
COMMENT ON FUNCTION cryo.list_app_roles() IS
    'Returns every bound application role with its org and project (NULL: all of the org''s), whether it can log in (NULL: the role no longer exists) and whether it is a member of cryo_app. Raises nothing.';
