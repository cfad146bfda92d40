-- Timeouts. A run's timeout (submit --timeout, its graph document's own, or the timeout
-- of the node it does) becomes its deadline at submit: runs.deadline_at, copied onto its
-- queue row by _enqueue. The deadline counts wall time from submit whatever the run is
-- doing (waiting for an agent, running, parked asleep, between retries), as Temporal's
-- workflow execution timeout does: a timeout bounds when the caller gets an answer.
-- The database enforces it, not only the agent: tick() fails every live run past its
-- deadline with exit code 124 ("timed out after 30s"), so a run whose agent is gone,
-- stopped or hung never stays running. The agent learns it at its next log flush (its
-- claim is refused with CR215, not CR002) and kills the job's whole process tree, TERM
-- then KILL. A graph run's unfinished children are cancelled with it; a node's job that
-- times out fails its node like any failure (its retry may cover exit code 124).

-- A duration as the documents write it: 30s, 5m, 1h30m, 1.5s.
CREATE OR REPLACE FUNCTION cryo._duration_text(p_seconds double precision)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_seconds IS NULL THEN NULL
        WHEN p_seconds <> trunc(p_seconds) OR p_seconds < 60 THEN
            trim(trailing '.' FROM trim(trailing '0' FROM round(p_seconds::numeric, 3)::text)) || 's'
        ELSE concat_ws('',
            nullif(floor(p_seconds / 86400)::bigint, 0) || 'd',
            nullif(floor(p_seconds::bigint % 86400 / 3600), 0) || 'h',
            nullif(floor(p_seconds::bigint % 3600 / 60), 0) || 'm',
            nullif(p_seconds::bigint % 60, 0) || 's')
    END
$$;

-- Fails one live run whose deadline passed: its unfinished children are cancelled
-- first (a node's job, an activity), a graph run's nodes end with it, and the run ends
-- failed with exit code 124. The caller holds its queue row.
CREATE OR REPLACE FUNCTION cryo._time_out_run(p_run_id text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_run cryo.runs;
    v_child record;
BEGIN
    SELECT * INTO v_run FROM cryo.runs WHERE id = p_run_id;
    IF NOT FOUND OR cryo.is_terminal(v_run.status) THEN
        RETURN;
    END IF;
    FOR v_child IN SELECT c.id FROM cryo.runs c
                    WHERE c.parent_run_id = p_run_id AND NOT cryo.is_terminal(c.status) LOOP
        PERFORM cryo.cancel_run(v_child.id);
    END LOOP;
    IF v_run.kind = 'graph' THEN
        PERFORM cryo._graph_cancel_nodes(p_run_id, false);
    END IF;
    PERFORM cryo._finalize(p_run_id, 'failed', 124,
                           'timed out after ' || cryo._duration_text(v_run.timeout_s));
END
$$;

-- tick()'s deadline sweep: fails up to p_batch live runs past their deadline, oldest
-- deadline first (a run another transaction holds is left to the next tick). Returns
-- how many it failed.
CREATE OR REPLACE FUNCTION cryo._expire_deadlines(p_batch integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_id text;
    v_n integer := 0;
BEGIN
    FOR v_id IN SELECT q.run_id FROM cryo.queue q
                 WHERE q.deadline_at IS NOT NULL AND q.deadline_at <= cryo.now()
                 ORDER BY q.deadline_at
                 LIMIT p_batch
                   FOR UPDATE SKIP LOCKED LOOP
        PERFORM cryo._time_out_run(v_id);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
