-- Whether an artifact's file was executable when it was put, so that a get makes it
-- executable again (a tool kept as an artifact keeps its +x).
ALTER TABLE cryo.artifacts ADD COLUMN executable boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN cryo.artifacts.executable IS
    'The file was executable (its owner''s x bit) when it was put: a get makes it executable again.';
