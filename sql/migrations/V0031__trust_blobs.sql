-- Blobs by content address, per trust domain. A put deduplicates by SHA-256, so the
-- answer "the project holds this blob" would tell an untrusted run whether a guess of a
-- trusted artifact's content is right, and naming a blob by digest alone would let it
-- read bytes it never had. A blob untrusted runs may learn about and name is one an
-- untrusted run uploaded through the server (which hashed the bytes) or one a published
-- trusted artifact named; the rules live in functions/78_artifacts.sql.
ALTER TABLE cryo.artifact_blobs ADD COLUMN untrusted_known boolean NOT NULL DEFAULT false;

-- Blobs untrusted runs could already read stay nameable by them.
UPDATE cryo.artifact_blobs b SET untrusted_known = true
 WHERE EXISTS (SELECT 1 FROM cryo.artifacts a
                WHERE a.org = b.org AND a.project = b.project AND a.sha256 = b.sha256
                  AND (a.tainted OR a.published));

COMMENT ON COLUMN cryo.artifact_blobs.untrusted_known IS
    'Untrusted runs may learn the project holds this blob and name it: an untrusted run uploaded its bytes through the server, which checked them against the digest, or a published trusted artifact named it. Otherwise an untrusted run''s prepare answers "not present" and its put must upload the bytes first.';
