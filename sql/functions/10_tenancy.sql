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

-- Tokens are stored as a hash of their secret; the secret itself is shown once.
CREATE OR REPLACE FUNCTION cryo.create_token(
    p_kind text, p_org text, p_name text, p_secret_hash bytea,
    p_capabilities text[] DEFAULT '{}', p_expires_at timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id text := 'tok-' || left(replace(gen_random_uuid()::text, '-', ''), 16);
BEGIN
    IF p_kind NOT IN ('user', 'agent') THEN
        RAISE EXCEPTION 'token kind must be user or agent, not %', p_kind USING ERRCODE = 'CR004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cryo.orgs WHERE slug = p_org) THEN
        RAISE EXCEPTION 'no org %', p_org USING ERRCODE = 'CR005';
    END IF;
    INSERT INTO cryo.tokens (id, kind, org, name, secret_hash, capabilities, expires_at)
    VALUES (v_id, p_kind, p_org, p_name, p_secret_hash, p_capabilities, p_expires_at);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION cryo.create_token(text, text, text, bytea, text[], timestamptz) IS
    'Creates a user or agent token from the hash of its secret; returns the token id. Raises CR004 for a bad kind, CR005 for an unknown org.';

CREATE OR REPLACE FUNCTION cryo.authenticate_token(p_secret_hash bytea)
RETURNS TABLE (token_id text, kind text, org text, capabilities text[])
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT t.id, t.kind, t.org, t.capabilities FROM cryo.tokens t
         WHERE t.secret_hash = p_secret_hash AND t.revoked_at IS NULL
           AND (t.expires_at IS NULL OR t.expires_at > cryo.now());
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown, revoked or expired token' USING ERRCODE = 'CR008';
    END IF;
END
$$;
COMMENT ON FUNCTION cryo.authenticate_token(bytea) IS
    'Returns the live token whose secret hashes to the argument. Raises CR008 when none is live.';

CREATE OR REPLACE FUNCTION cryo.register_agent(p_org text, p_agent_id text, p_capabilities text[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.agents (id, org, capabilities, registered_at, last_seen_at)
    VALUES (p_agent_id, p_org, p_capabilities, cryo.now(), cryo.now())
    ON CONFLICT (id) DO UPDATE
       SET org = excluded.org, capabilities = excluded.capabilities,
           last_seen_at = excluded.last_seen_at
$$;
COMMENT ON FUNCTION cryo.register_agent(text, text, text[]) IS
    'Records (or refreshes) an agent and the capabilities it advertises. Returns nothing; raises nothing of its own.';
