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
