-- Log appends that a retry cannot duplicate or lose (issue 36): an agent numbers each
-- chunk by the offset of its first byte within its pass's log, and the engine stores a
-- chunk only at exactly the end of what it holds. That end is kept here, beside the
-- claim it counts for (a new pass, a new claim, starts at 0), so checking a chunk is
-- the one lookup of the run's row the append already makes.

ALTER TABLE cryo.runs ADD COLUMN log_claim uuid;
ALTER TABLE cryo.runs ADD COLUMN log_end bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN cryo.runs.log_claim IS
    'The claim (token) whose pass log_end counts: a chunk posted under another claim starts a new pass at byte 0.';
COMMENT ON COLUMN cryo.runs.log_end IS
    'How many (plain) log bytes the pass of log_claim has stored with an offset: the only offset the next chunk may start at (cryo._log_take).';
