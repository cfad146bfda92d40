-- Connections: a project's named, stored endpoints for connector nodes (a base URL, how
-- to authenticate, default headers), so a graph calls GitHub or Slack by name instead of
-- pasting URLs and headers into every node. A connection holds no credential itself: it
-- names the project secret that does (cryo.secrets, sealed), which reaches only the
-- connector agent doing a connector node's request, in its claim grant. The rules live
-- in functions/79_connections.sql.
CREATE TABLE cryo.connections (
    org text NOT NULL,
    project text NOT NULL,
    name text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    base_url text NOT NULL,
    auth text NOT NULL CHECK (auth IN ('none', 'bearer', 'basic', 'header')),
    secret text CHECK (secret ~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'),
    username text,
    header text,
    headers jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (org, project, name),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE,
    CHECK ((auth = 'none') = (secret IS NULL)),
    CHECK ((auth = 'basic') = (username IS NOT NULL)),
    CHECK ((auth = 'header') = (header IS NOT NULL))
);

COMMENT ON TABLE cryo.connections IS
    'A project''s named connections for connector nodes: base URL, auth scheme (none, bearer, basic, header), the project secret holding the credential (by name; the value stays sealed in cryo.secrets), a basic user name or the header name, and default headers, all in the clear.';
