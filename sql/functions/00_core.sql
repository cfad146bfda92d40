-- Shared helpers: the clock, the error catalogue, and the claim-token check that
-- every agent-facing transition starts with.

-- The engine's clock. Tests move time by setting cryo.fake_now in their session, so
-- every due-time comparison goes through here rather than now().
CREATE OR REPLACE FUNCTION cryo.now() RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('cryo.fake_now', true), '')::timestamptz, now())
$$;
COMMENT ON FUNCTION cryo.now() IS
    'Returns the engine time: the session setting cryo.fake_now when set, else now(). Raises nothing.';

-- The one list of the engine's SQLSTATEs. Python maps each code to an exception class
-- and a test checks the two lists agree.
CREATE OR REPLACE FUNCTION cryo.error_codes()
RETURNS TABLE (code text, name text, meaning text)
LANGUAGE sql IMMUTABLE AS $$
    VALUES
        ('CR001', 'reserved_key', 'the key belongs to the engine and cannot be written'),
        ('CR002', 'stale_claim', 'the claim token is not the live claim of that run'),
        ('CR003', 'run_not_found', 'no run with that id'),
        ('CR004', 'invalid_argument', 'an argument is malformed or out of range'),
        ('CR005', 'not_found', 'the named org, project or workflow does not exist'),
        ('CR006', 'run_finished', 'the run already reached a terminal status'),
        ('CR007', 'duplicate_call', 'that durable call is already recorded for the run'),
        ('CR008', 'unauthorized', 'the token is unknown, revoked or expired'),
        ('CR020', 'forbidden', 'the member''s role does not allow this'),
        ('CR030', 'queue_full', 'the concurrency group''s queue holds its limit of runs')
$$;
COMMENT ON FUNCTION cryo.error_codes() IS
    'Returns every SQLSTATE the engine raises (class CR) with its name and meaning. Raises nothing.';

-- Locks and returns the queue row held by this claim token, or refuses the call.
-- Every agent-side transition goes through here, so a stale agent can never write.
CREATE OR REPLACE FUNCTION cryo._claimed_row(p_run_id text, p_token uuid)
RETURNS cryo.queue
LANGUAGE plpgsql AS $$
DECLARE
    v_row cryo.queue;
BEGIN
    SELECT * INTO v_row FROM cryo.queue
     WHERE run_id = p_run_id AND state = 'claimed' AND claim_token = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claim token is not the live claim of run %', p_run_id
            USING ERRCODE = 'CR002';
    END IF;
    RETURN v_row;
END
$$;

-- Appends one history event. Identity columns stay in the clear; payload is sealed.
CREATE OR REPLACE FUNCTION cryo._history(
    p_run_id text, p_org text, p_project text, p_kind text,
    p_family text DEFAULT NULL, p_name text DEFAULT NULL, p_ordinal integer DEFAULT NULL,
    p_attempt integer DEFAULT NULL, p_payload bytea DEFAULT NULL)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO cryo.history (run_id, org, project, kind, key_scope, key_family, key_name,
                              key_ordinal, attempt, payload, created_at)
    VALUES (p_run_id, p_org, p_project, p_kind,
            CASE WHEN p_family IS NULL THEN NULL ELSE 'run' END,
            p_family, p_name, p_ordinal, p_attempt, p_payload, cryo.now())
$$;

-- The position a new journal entry takes. The agent sends the position its pass reached
-- (the session setting cryo.position), so a call that recorded nothing -- a step_fn
-- that raised and was caught -- leaves a gap rather than shifting every later call,
-- and a strict replay still lines up. Without one, or when taken (lenient replay), the
-- next free number.
CREATE OR REPLACE FUNCTION cryo._next_seq(p_run_id text)
RETURNS integer
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_pos integer := nullif(current_setting('cryo.position', true), '')::integer;
BEGIN
    IF v_pos IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM cryo.journal j WHERE j.run_id = p_run_id AND j.seq = v_pos) THEN
        RETURN v_pos;
    END IF;
    RETURN (SELECT coalesce(max(j.seq) + 1, 0) FROM cryo.journal j WHERE j.run_id = p_run_id);
END
$$;

-- Tells followers of a run (log tails, `--follow`) that it changed. A NOTIFY holds a
-- cluster-wide lock from pre-commit until the commit is flushed, which would line up
-- every finishing transaction behind one another; so only a run somebody follows
-- (cryo.watch_run) notifies, and followers also poll as a backstop.
CREATE OR REPLACE FUNCTION cryo._notify_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cryo.runs r WHERE r.id = p_run_id AND r.watched) THEN
        PERFORM pg_notify('cryo_run', p_run_id);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION cryo.watch_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cryo.runs SET watched = true WHERE id = p_run_id AND NOT watched;
END
$$;
COMMENT ON FUNCTION cryo.watch_run(text) IS
    'Marks a run as followed, so its status and log changes NOTIFY cryo_run from now on. Returns nothing; raises nothing.';
