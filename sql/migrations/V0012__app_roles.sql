-- Application roles bound to a tenant, and the mark that makes a database a test
-- database (the only kind where cryo.fake_now moves the engine's clock).

CREATE TABLE cryo.app_roles (
    role text PRIMARY KEY,
    org text NOT NULL REFERENCES cryo.orgs (slug) ON DELETE CASCADE,
    project text,
    created_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org, project) REFERENCES cryo.projects (org, slug) ON DELETE CASCADE
);

COMMENT ON TABLE cryo.app_roles IS
    'Database roles in cryo_app and the tenant each may act on: one org, and one project of it or (project NULL) all of them. A cryo_app member without a row here is refused everything.';

-- One row at most; only the schema owner (or a superuser) can write it, so no
-- application or agent can turn its own session's fake clock on.
CREATE TABLE cryo.test_database (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    marked_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE cryo.test_database IS
    'Present (one row) only in a database made for tests: there cryo.now() honours the session setting cryo.fake_now. Never mark a production database.';
