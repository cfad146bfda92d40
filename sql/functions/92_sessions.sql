-- Sessions of people who signed in through the OIDC issuer. The server verifies the ID
-- token (signature, issuer, audience, expiry, nonce) in Python, with the issuer's keys;
-- what it hands here is the verified identity, and everything that changes state is
-- decided here: which member that is (or becomes, through the org's role map), and the
-- session that then acts for it. A session is presented like a user token (the server
-- hashes its secret) and cryo.authorize_user accepts either.

-- A browser sign-in is two requests (to the issuer and back): the first stores what the
-- second must match, keyed by the hash of a random id kept in the browser's cookie.
-- Stale rows of abandoned sign-ins go here, which keeps the table a few minutes deep.
CREATE OR REPLACE FUNCTION cryo.begin_oidc_login(
    p_id_hash bytea, p_state text, p_nonce text, p_code_verifier text, p_org text,
    p_ttl_seconds double precision DEFAULT 600)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_expires timestamptz;
BEGIN
    IF coalesce(length(p_state), 0) < 16 OR coalesce(length(p_nonce), 0) < 16
       OR coalesce(length(p_code_verifier), 0) < 43 OR p_id_hash IS NULL THEN
        RAISE EXCEPTION 'a sign-in needs an id, a state and nonce of 16+ characters and a PKCE verifier of 43+'
            USING ERRCODE = 'CR004';
    END IF;
    IF NOT cryo._slug_ok(p_org) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_org
            USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 1 AND 3600 THEN
        RAISE EXCEPTION 'a sign-in lasts 1 to 3600 seconds, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.oidc_logins WHERE expires_at <= v_now;
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    INSERT INTO cryo.oidc_logins (id_hash, state, nonce, code_verifier, org, created_at, expires_at)
    VALUES (p_id_hash, p_state, p_nonce, p_code_verifier, p_org, v_now, v_expires);
    RETURN v_expires;
END
$$;
COMMENT ON FUNCTION cryo.begin_oidc_login(bytea, text, text, text, text, double precision) IS
    'Records a browser sign-in sent to the issuer (state, nonce, PKCE verifier, org) under the hash of the browser''s id for it, for p_ttl_seconds; deletes expired ones; returns when it expires. Raises CR004 for a short state, nonce or verifier, a malformed org or a bad lifetime.';

-- `cryopg login` asks the server for its nonce before it goes to the issuer: the ID
-- token it trades must carry one of these (single use, minutes old), which binds the
-- trade to a CLI sign-in this server began; a browser sign-in's nonce is never here.
CREATE OR REPLACE FUNCTION cryo.begin_cli_sign_in(
    p_nonce_hash bytea, p_org text, p_ttl_seconds double precision DEFAULT 600)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_expires timestamptz;
BEGIN
    IF p_nonce_hash IS NULL OR length(p_nonce_hash) <> 32 THEN
        RAISE EXCEPTION 'a CLI sign-in needs the SHA-256 of its nonce' USING ERRCODE = 'CR004';
    END IF;
    IF NOT cryo._slug_ok(p_org) THEN
        RAISE EXCEPTION 'org slug % must be lower-case letters, digits and - (up to 63)', p_org
            USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 1 AND 3600 THEN
        RAISE EXCEPTION 'a sign-in lasts 1 to 3600 seconds, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    DELETE FROM cryo.oidc_cli_nonces WHERE expires_at <= v_now;
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    INSERT INTO cryo.oidc_cli_nonces (nonce_hash, org, created_at, expires_at)
    VALUES (p_nonce_hash, p_org, v_now, v_expires);
    RETURN v_expires;
END
$$;
COMMENT ON FUNCTION cryo.begin_cli_sign_in(bytea, text, double precision) IS
    'Records a nonce (by its SHA-256) handed to a CLI sign-in of org p_org, for p_ttl_seconds; deletes expired ones; returns when it expires. Raises CR004 for a hash that is not 32 bytes, a malformed org or a bad lifetime.';

-- An ID token is traded for a session once: its hash is kept until the token expires,
-- and a CLI trade also uses up the nonce this server handed out for it (and only for
-- the org it was handed out for).
CREATE OR REPLACE FUNCTION cryo.spend_id_token(
    p_token_hash bytea, p_expires_at timestamptz, p_nonce_hash bytea DEFAULT NULL,
    p_org text DEFAULT NULL, p_renewing bytea DEFAULT NULL, p_issuer text DEFAULT NULL,
    p_subject text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
BEGIN
    IF p_token_hash IS NULL OR p_expires_at IS NULL THEN
        RAISE EXCEPTION 'spending an ID token needs its hash and expiry' USING ERRCODE = 'CR004';
    END IF;
    IF p_renewing IS NOT NULL THEN
        -- A refreshed ID token carries no fresh nonce: the CLI session it renews (the
        -- same person at the same issuer, in the org, not revoked, ended at most 30
        -- days ago) stands in for it, and ends.
        DELETE FROM cryo.sessions s
         WHERE s.secret_hash = p_renewing AND s.kind = 'cli' AND s.org = p_org
           AND s.issuer = p_issuer AND s.subject = p_subject AND s.revoked_at IS NULL
           AND s.expires_at > v_now - interval '30 days';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no CLI session of this person in org % to renew (revoked, long over, or another person''s)', coalesce(p_org, '')
                USING ERRCODE = 'CR150';
        END IF;
    ELSIF p_nonce_hash IS NOT NULL THEN
        DELETE FROM cryo.oidc_cli_nonces n
         WHERE n.nonce_hash = p_nonce_hash AND n.expires_at > v_now AND n.org = p_org;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'the ID token''s nonce is not one this server gave a CLI sign-in to org % (unknown, expired, used, or a browser sign-in''s)', coalesce(p_org, '')
                USING ERRCODE = 'CR150';
        END IF;
    END IF;
    DELETE FROM cryo.oidc_spent_tokens WHERE expires_at <= v_now;
    INSERT INTO cryo.oidc_spent_tokens (token_hash, expires_at)
    VALUES (p_token_hash, greatest(p_expires_at, v_now + interval '1 minute'))
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this ID token was traded for a session already' USING ERRCODE = 'CR150';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.spend_id_token(bytea, timestamptz, bytea, text, bytea, text, text) IS
    'Marks the ID token hashing to p_token_hash traded (kept until p_expires_at, its exp plus leeway); with p_renewing, ends the CLI session of org p_org with that secret hash, which must be p_issuer''s p_subject''s, not revoked and ended at most 30 days ago; else with p_nonce_hash, uses up the CLI sign-in nonce of org p_org it carries; deletes expired rows. Raises CR150 for a token traded before, a nonce this server did not hand a CLI sign-in of that org (or already used, or expired), or no such session to renew; CR004 for a missing hash or expiry.';

-- The callback's half: the sign-in of this browser whose state the issuer echoed, used
-- up at once so a code cannot be redeemed through it twice. A wrong state finds nothing
-- and leaves the real sign-in in place (the attacker has no cookie to use it with).
CREATE OR REPLACE FUNCTION cryo.take_oidc_login(p_id_hash bytea, p_state text)
RETURNS TABLE (nonce text, code_verifier text, org text)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
        DELETE FROM cryo.oidc_logins l
         WHERE l.id_hash = p_id_hash AND l.state = p_state AND l.expires_at > cryo.now()
        RETURNING l.nonce, l.code_verifier, l.org;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no sign-in of this browser with that state (unknown, expired, already used, or a forged state)'
            USING ERRCODE = 'CR041';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.take_oidc_login(bytea, text) IS
    'Deletes and returns the live sign-in whose id hashes to p_id_hash and whose state is p_state (nonce, PKCE verifier, org). Raises CR041 when there is none (unknown, expired, used, or the state does not match).';

-- The highest role an org's map gives to the claims of one ID token: a claim holding a
-- string matches that value, one holding an array matches each of its strings.
CREATE OR REPLACE FUNCTION cryo._mapped_role(p_org text, p_claims jsonb)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT m.role FROM cryo.oidc_role_maps m
     WHERE m.org = p_org
       AND (p_claims -> m.claim = to_jsonb(m.value)
            OR (jsonb_typeof(p_claims -> m.claim) = 'array'
                AND p_claims -> m.claim @> jsonb_build_array(m.value)))
     ORDER BY cryo._role_rank(m.role) DESC
     LIMIT 1
$$;

-- Signs a verified person in to an org. The member is the one whose login is the
-- token's subject, else its (verified) email; the org's role map, when a claim value
-- matches, sets that member's role (never taking the last owner's away) or makes a new
-- member (login: the email when it is a valid login, else the subject). Somebody the
-- org neither knows nor maps is refused here, before any session exists.
CREATE OR REPLACE FUNCTION cryo.oidc_sign_in(
    p_org text, p_issuer text, p_subject text, p_email text, p_claims jsonb,
    p_secret_hash bytea, p_kind text, p_ttl_seconds double precision)
RETURNS TABLE (session_id text, member text, role text, expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_member cryo.members;
    v_mapped text;
    v_login text;
    v_id text := 'ses-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
    v_expires timestamptz;
    v_login_re constant text := '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$';
BEGIN
    IF coalesce(p_subject, '') = '' OR coalesce(p_issuer, '') = '' OR p_secret_hash IS NULL THEN
        RAISE EXCEPTION 'a sign-in needs the issuer, the subject and a session secret' USING ERRCODE = 'CR004';
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('web', 'cli') THEN
        RAISE EXCEPTION 'a session is web or cli, not %', p_kind USING ERRCODE = 'CR004';
    END IF;
    IF p_ttl_seconds IS NULL OR NOT p_ttl_seconds BETWEEN 60 AND 90 * 86400 THEN
        RAISE EXCEPTION 'a session lasts 60 seconds to 90 days, not %', p_ttl_seconds USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs o WHERE o.slug = p_org) THEN
        -- Said the same way as for a known org: a sign-in page must not tell whether an org exists.
        RAISE EXCEPTION '% is not a member of org %', coalesce(p_email, p_subject), coalesce(p_org, '')
            USING ERRCODE = 'CR040';
    END IF;
    SELECT * INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = p_subject FOR UPDATE;
    IF NOT FOUND AND p_email IS NOT NULL THEN
        SELECT * INTO v_member FROM cryo.members m
         WHERE m.org = p_org AND lower(m.login) = lower(p_email)
         ORDER BY m.login = p_email DESC LIMIT 1 FOR UPDATE;
    END IF;
    v_mapped := cryo._mapped_role(p_org, coalesce(p_claims, '{}'));
    IF v_member.id IS NULL THEN
        IF v_mapped IS NULL THEN
            RAISE EXCEPTION '% is not a member of org %', coalesce(p_email, p_subject), p_org
                USING ERRCODE = 'CR040';
        END IF;
        v_login := CASE WHEN p_email ~ v_login_re THEN lower(p_email)
                        WHEN p_subject ~ v_login_re THEN p_subject END;
        IF v_login IS NULL THEN
            RAISE EXCEPTION 'neither the email nor the subject of % can be a member login', p_subject
                USING ERRCODE = 'CR040';
        END IF;
        PERFORM cryo.put_member(p_org, v_login, v_mapped, NULL);
        SELECT * INTO v_member FROM cryo.members m WHERE m.org = p_org AND m.login = v_login;
    ELSIF v_mapped IS NOT NULL AND v_mapped <> v_member.role
          AND NOT (v_member.role = 'owner'
                   AND NOT EXISTS (SELECT 1 FROM cryo.members o WHERE o.org = p_org
                                      AND o.role = 'owner' AND o.id <> v_member.id)) THEN
        UPDATE cryo.members m SET role = v_mapped WHERE m.id = v_member.id;
        v_member.role := v_mapped;
    END IF;
    -- Sessions long over are of no use to anybody; the member's go as it signs in again.
    DELETE FROM cryo.sessions s WHERE s.member_id = v_member.id AND s.expires_at < v_now - interval '7 days';
    v_expires := v_now + make_interval(secs => p_ttl_seconds);
    -- The token's groups claim (a list, or one name) is kept for approvals restricted to a group.
    INSERT INTO cryo.sessions (id, org, member_id, secret_hash, kind, issuer, subject,
                               created_at, expires_at, groups)
    VALUES (v_id, p_org, v_member.id, p_secret_hash, p_kind, p_issuer, p_subject, v_now, v_expires,
            CASE jsonb_typeof(p_claims -> 'groups')
                WHEN 'array' THEN ARRAY(SELECT jsonb_array_elements_text(p_claims -> 'groups'))
                WHEN 'string' THEN ARRAY[p_claims ->> 'groups'] END);
    RETURN QUERY SELECT v_id, v_member.login, v_member.role, v_expires;
END
$$;
COMMENT ON FUNCTION cryo.oidc_sign_in(text, text, text, text, jsonb, bytea, text, double precision) IS
    'Opens a session (web or cli, for p_ttl_seconds) for the person the issuer verified, as the org''s member whose login is the subject or the email, with the role the org''s claim map gives (creating the member when the map admits a newcomer); returns the session id, member login, role and expiry. Raises CR040 when the org does not know the person and maps none of its claims (or the org does not exist), CR004 for a missing identity, a bad kind or lifetime.';

-- What a session's holder may learn about it (the web UI asks on load).
CREATE OR REPLACE FUNCTION cryo.session_info(p_secret_hash bytea)
RETURNS TABLE (session_id text, org text, member text, role text, kind text, expires_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT s.id, s.org, m.login, m.role, s.kind, s.expires_at
          FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
         WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL AND s.expires_at > cryo.now();
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no live session (signed out, expired or revoked)' USING ERRCODE = 'CR008';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.session_info(bytea) IS
    'Returns the live session whose secret hashes to the argument: its id, org, member login, role, kind and expiry. Raises CR008 when none is live.';

-- Sign-out: the holder ends its own session.
CREATE OR REPLACE FUNCTION cryo.end_session(p_secret_hash bytea)
RETURNS boolean
LANGUAGE sql AS $$
    WITH ended AS (UPDATE cryo.sessions s SET revoked_at = cryo.now()
                    WHERE s.secret_hash = p_secret_hash AND s.revoked_at IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM ended)
$$;
COMMENT ON FUNCTION cryo.end_session(bytea) IS
    'Revokes the session whose secret hashes to the argument; returns false when there was no live one. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_sessions(p_org text)
RETURNS TABLE (id text, member text, kind text, subject text, created_at timestamptz,
               expires_at timestamptz, revoked_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT s.id, m.login, s.kind, s.subject, s.created_at, s.expires_at, s.revoked_at
      FROM cryo.sessions s JOIN cryo.members m ON m.id = s.member_id
     WHERE s.org = p_org AND s.revoked_at IS NULL AND s.expires_at > cryo.now()
     ORDER BY s.created_at, s.id
$$;
COMMENT ON FUNCTION cryo.list_sessions(text) IS
    'Returns the live sessions of an org (never a secret or its hash), oldest first. Raises nothing.';

-- An admin ends somebody's session (a lost laptop); the member's tokens are untouched.
CREATE OR REPLACE FUNCTION cryo.revoke_session(p_org text, p_session_id text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.sessions SET revoked_at = cryo.now()
     WHERE org = p_org AND id = p_session_id AND revoked_at IS NULL;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.sessions WHERE org = p_org AND id = p_session_id) THEN
        RAISE EXCEPTION 'no session % in org %', p_session_id, p_org USING ERRCODE = 'CR005';
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION cryo.revoke_session(text, text) IS
    'Revokes a session of the org at once; returns false when it was already revoked. Raises CR005 for a session not of that org.';

-- -- the org's claim map --------------------------------------------------------------

CREATE OR REPLACE FUNCTION cryo.put_role_map(p_org text, p_claim text, p_value text, p_role text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_created boolean;
BEGIN
    IF p_role IS NULL OR p_role NOT IN ('owner', 'admin', 'member', 'viewer') THEN
        RAISE EXCEPTION 'role must be owner, admin, member or viewer, not %', p_role USING ERRCODE = 'CR004';
    END IF;
    IF p_claim IS NULL OR p_claim !~ '^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$' THEN
        RAISE EXCEPTION 'a claim name is 1 to 128 letters, digits and _ : . / - (starting with a letter or _)'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_claim IN ('sub', 'iss', 'aud', 'exp', 'iat', 'nbf', 'nonce', 'azp', 'email') THEN
        RAISE EXCEPTION 'claim % names the person or the token, not a group or role', p_claim
            USING ERRCODE = 'CR004';
    END IF;
    IF coalesce(length(p_value), 0) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'a claim value is 1 to 256 characters' USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.oidc_role_maps AS r (org, claim, value, role, created_at)
    VALUES (p_org, p_claim, p_value, p_role, cryo.now())
    ON CONFLICT (org, claim, value) DO UPDATE SET role = excluded.role
    RETURNING (r.xmax = 0) INTO v_created;
    RETURN v_created;
END
$$;
COMMENT ON FUNCTION cryo.put_role_map(text, text, text, text) IS
    'Maps ID token claim p_claim holding p_value to member role p_role in the org (replacing an earlier role for it); returns true when new. Raises CR004 for a bad role, claim name (or one naming the person or token) or value, CR005 for an unknown org.';

CREATE OR REPLACE FUNCTION cryo.delete_role_map(p_org text, p_claim text, p_value text)
RETURNS boolean
LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM cryo.oidc_role_maps
                   WHERE org = p_org AND claim = p_claim AND value = p_value RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$$;
COMMENT ON FUNCTION cryo.delete_role_map(text, text, text) IS
    'Deletes one entry of the org''s claim map; returns false when there was none. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.list_role_maps(p_org text)
RETURNS TABLE (claim text, value text, role text, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT r.claim, r.value, r.role, r.created_at FROM cryo.oidc_role_maps r
     WHERE r.org = p_org ORDER BY r.claim, r.value
$$;
COMMENT ON FUNCTION cryo.list_role_maps(text) IS
    'Returns the org''s claim map by claim and value. Raises nothing.';
