-- Tenancy: members with roles, tokens that belong to a member, project secrets, and
-- runs marked untrusted. Applied after V0002 (state); V0003 is another change.

CREATE TABLE cryo.members (
    id text PRIMARY KEY,
    org text NOT NULL REFERENCES cryo.orgs (slug),
    login text NOT NULL CHECK (login ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$'),
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org, login)
);

ALTER TABLE cryo.tokens ADD COLUMN member_id text REFERENCES cryo.members (id);

-- User tokens made before members existed act for an owner of their org.
INSERT INTO cryo.members (id, org, login, role)
SELECT DISTINCT 'mem-' || md5(t.org || '/owner'), t.org, 'owner', 'owner'
  FROM cryo.tokens t WHERE t.kind = 'user';
UPDATE cryo.tokens SET member_id = 'mem-' || md5(org || '/owner') WHERE kind = 'user';

ALTER TABLE cryo.tokens ADD CONSTRAINT tokens_user_has_member
    CHECK (kind <> 'user' OR member_id IS NOT NULL);

-- An agent token without a ceiling used to mean "anything"; it now means the default
-- set, which never includes connector.
UPDATE cryo.tokens SET capabilities = '{shell,polyglot}'
 WHERE kind = 'agent' AND capabilities = '{}';

CREATE TABLE cryo.secrets (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    value bytea NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug)
);

ALTER TABLE cryo.runs ADD COLUMN untrusted boolean NOT NULL DEFAULT false;

COMMENT ON TABLE cryo.members IS
    'People of an org and their role (owner, admin, member, viewer); a user token acts for one member.';
COMMENT ON TABLE cryo.secrets IS
    'Project secrets, sealed under the org data key; opened only into a claim grant of a trusted run.';
COMMENT ON COLUMN cryo.runs.untrusted IS
    'Submitted as untrusted: its claims carry no secrets, and a step that needs one fails.';
