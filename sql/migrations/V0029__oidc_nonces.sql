-- Sign-in that cannot be replayed: the nonces the server hands `cryopg login` (a CLI
-- trade must carry one of these, never a browser sign-in's), and the ID tokens already
-- traded for a session (each is traded once). Plus a run's log context: the last bytes
-- of its log, sealed, which the next pass's masker starts from so a secret begun before
-- a park and finished after it is masked on both sides.

CREATE TABLE cryo.oidc_cli_nonces (
    nonce_hash bytea PRIMARY KEY,
    org text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE INDEX oidc_cli_nonces_expiry ON cryo.oidc_cli_nonces (expires_at);

COMMENT ON TABLE cryo.oidc_cli_nonces IS
    'Nonces handed to a CLI sign-in (cryopg login) and not used yet, by SHA-256: the ID token a CLI trades must carry one, and the trade uses it up. Gone after a few minutes.';

CREATE TABLE cryo.oidc_spent_tokens (
    token_hash bytea PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

CREATE INDEX oidc_spent_tokens_expiry ON cryo.oidc_spent_tokens (expires_at);

COMMENT ON TABLE cryo.oidc_spent_tokens IS
    'ID tokens already traded for a session, by SHA-256, kept until the token itself expires: a second trade of one is refused.';

ALTER TABLE cryo.runs ADD COLUMN log_context bytea;

COMMENT ON COLUMN cryo.runs.log_context IS
    'Sealed: the last bytes of the run''s log when they may begin a secret, for the next pass''s log masker. NULL when there are none.';
