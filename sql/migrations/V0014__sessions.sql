-- Sign-in through an OpenID Connect issuer: browser sign-ins under way, the sessions
-- they open (web UI cookie, CLI credential), and an org's map from a claim value of the
-- ID token (a group or role) to a member role.

CREATE TABLE cryo.oidc_logins (
    id_hash bytea PRIMARY KEY,
    state text NOT NULL,
    nonce text NOT NULL,
    code_verifier text NOT NULL,
    org text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX oidc_logins_expiry ON cryo.oidc_logins (expires_at);

COMMENT ON TABLE cryo.oidc_logins IS
    'Browser sign-ins sent to the issuer and not back yet: keyed by the hash of the id in the browser''s cookie, holding the state, nonce and PKCE verifier the callback must match. Single use; gone after a few minutes.';

CREATE TABLE cryo.sessions (
    id text PRIMARY KEY,
    org text NOT NULL REFERENCES cryo.orgs (slug),
    member_id text NOT NULL REFERENCES cryo.members (id) ON DELETE CASCADE,
    secret_hash bytea NOT NULL UNIQUE,
    kind text NOT NULL CHECK (kind IN ('web', 'cli')),
    issuer text NOT NULL,
    subject text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE INDEX sessions_member ON cryo.sessions (member_id);
CREATE INDEX sessions_org ON cryo.sessions (org, created_at);

COMMENT ON TABLE cryo.sessions IS
    'A person signed in through the OIDC issuer, acting as one member of one org: the web UI''s cookie (kind web) or the CLI''s stored credential (kind cli). Stored as the hash of its secret; it ends at expires_at or when revoked (sign-out, an admin, or the member''s removal).';

CREATE TABLE cryo.oidc_role_maps (
    org text NOT NULL REFERENCES cryo.orgs (slug),
    claim text NOT NULL CHECK (claim ~ '^[A-Za-z_][A-Za-z0-9_:./-]{0,127}$'),
    value text NOT NULL CHECK (length(value) BETWEEN 1 AND 256),
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (org, claim, value)
);

COMMENT ON TABLE cryo.oidc_role_maps IS
    'An org''s map from an ID token claim value (e.g. claim groups, value ops) to a member role: a person whose token carries it signs in with that role (the highest, when several match), made a member when new.';
