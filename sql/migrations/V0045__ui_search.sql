-- Runs found by their sealed input (issue 41): the server stores, at submit, keyed hashes
-- (HMAC-SHA256 under a key derived from the project's key, never the values) of the
-- scalar values of a trusted run's input; the runs search hashes its text the same way
-- and matches one of them. A DBA holding the key can search the same way; without it the
-- hashes say nothing (no dictionary of guesses can be tried against them). NULL: not
-- indexed (an untrusted run, a run from before this, an input given clear from SQL).
ALTER TABLE cryo.runs ADD COLUMN IF NOT EXISTS input_hashes bytea[];
