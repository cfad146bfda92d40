-- Durable state: cells addressed by (scope, key) holding a sealed JSON value and a
-- version counted in the clear.
--
-- A scope is the run id (run scope) or '{org}:{project}:entity:{name}' (entity scope,
-- shared by every run of the project). SQL never sees a value: the server seals it
-- before a write and opens it after a read. Conditions therefore work on versions,
-- which the store counts itself: every write or delete of a cell raises its version by
-- one, and a delete keeps the row (value NULL) so a cell re-created later continues
-- the count instead of repeating a version that a cas may still hold.
--
-- Plain reads and writes (get, list, set, delete) are not durable calls. The three
-- race-safe operations are: add (claim a key), cas (swap on a version) and incr
-- (count). Their answers belong to the run that asked, so each writes the cell AND the
-- run's journal memo of the answer in the same transaction: an agent that dies at any
-- point either left no trace or left both, and the next pass reads the memo back
-- instead of racing (or counting) again.
--
-- Trust (docs/security/trust.md): a cell written by an untrusted run is tainted, and
-- `tainted` is part of the key, so a tainted write lands beside a trusted cell of the
-- same scope and key and never replaces it. Every function here takes the writer's or
-- reader's trust from runs.untrusted (cryo._run_untrusted). A trusted reader sees
-- trusted cells, or with p_tainted the tainted ones; an untrusted reader sees tainted
-- cells and, where it has none of a key, a trusted cell published by its last set.
-- A run's own scope has one writer, so one namespace, and reads of it ignore the flag.

-- The scope text of a cell; the one place the rule lives. Run scope when p_entity is
-- NULL (the run id itself), else the project's entity scope.
CREATE OR REPLACE FUNCTION cryo.state_scope(
    p_org text, p_project text, p_run_id text, p_entity text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_entity IS NULL THEN
        IF NOT cryo._run_in_project(p_run_id, p_org, p_project) THEN
            RAISE EXCEPTION 'run % is not a run of project %/%', p_run_id, p_org, p_project
                USING ERRCODE = 'CR004';
        END IF;
        RETURN p_run_id;
    END IF;
    IF p_entity !~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$' THEN
        RAISE EXCEPTION 'entity name % must be letters, digits, _ . @ - (up to 128)', p_entity
            USING ERRCODE = 'CR004';
    END IF;
    RETURN p_org || ':' || p_project || ':entity:' || p_entity;
END
$$;
COMMENT ON FUNCTION cryo.state_scope(text, text, text, text) IS
    'Returns the scope of a cell: the run id when p_entity is NULL, else {org}:{project}:entity:{name}. Raises CR004 for a run of another project or a malformed entity name.';

-- Refuses keys that could not be listed one per line, and (for writes) the engine's own.
CREATE OR REPLACE FUNCTION cryo._state_key(p_key text, p_write boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF coalesce(p_key, '') = '' OR length(p_key) > 512 OR p_key ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'a state key must be 1 to 512 characters without control characters'
            USING ERRCODE = 'CR004';
    END IF;
    IF p_write AND p_key LIKE '\_cryo/%' THEN
        RAISE EXCEPTION 'key % is reserved for the engine (keys under _cryo/ are read-only)', p_key
            USING ERRCODE = 'CR001';
    END IF;
END
$$;

-- The memo a state operation left for this run, if any. A memo from any attempt of the
-- run answers: the question was asked and answered once, whoever carried it.
CREATE OR REPLACE FUNCTION cryo._state_memo(p_run_id text, p_path text)
RETURNS cryo.journal
LANGUAGE sql STABLE AS $$
    SELECT * FROM cryo.journal j WHERE j.run_id = p_run_id AND j.path = p_path
$$;

-- Records the answer of a state operation as the run's memo at its position, with its
-- history event. exit_code carries the answer of add and cas (0 won, 3 lost); incr's
-- answer (the total) is a value, so it arrives sealed in p_result.
CREATE OR REPLACE FUNCTION cryo._state_record(
    p_q cryo.queue, p_position integer, p_path text, p_family text, p_name text,
    p_ordinal integer, p_exit_code integer, p_result bytea)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cryo._record(p_q, p_position, p_path, p_family, p_name, p_ordinal, p_result, NULL,
                         p_exit_code);
    PERFORM cryo._history(p_q.run_id, p_q.org, p_q.project, replace(p_family, '.', '_'),
                          p_family, p_name, p_ordinal,
                          (SELECT r.attempt FROM cryo.runs r WHERE r.id = p_q.run_id));
END
$$;

-- The path of a state operation's memo; its name (the --as label) may not be empty.
CREATE OR REPLACE FUNCTION cryo._state_path(
    p_family text, p_name text, p_ordinal integer, p_path text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'a durable call needs a path, a name and an ordinal >= 0' USING ERRCODE = 'CR004';
    END IF;
    RETURN cryo.call_path(p_family, p_name, p_ordinal, p_path);
END
$$;

-- The live cells of a scope (one key, or all when p_key is NULL) that a reader sees:
-- see the header. p_untrusted is the reader's trust, which callers take from the run.
CREATE OR REPLACE FUNCTION cryo._state_read(p_scope text, p_key text, p_untrusted boolean,
                                            p_tainted boolean)
RETURNS SETOF cryo.state_cells
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT ON (c.key) c.* FROM cryo.state_cells c
     WHERE c.scope = p_scope AND (p_key IS NULL OR c.key = p_key) AND c.value IS NOT NULL
       AND (c.run_id IS NOT NULL
            OR c.tainted = (coalesce(p_untrusted, false) OR coalesce(p_tainted, false))
            OR (p_untrusted AND c.published))
     ORDER BY c.key, c.tainted DESC
$$;

-- A person's or an application's read (a trusted reader): the trusted cell, or with
-- p_tainted the tainted one.
CREATE OR REPLACE FUNCTION cryo.state_get(p_scope text, p_key text, p_tainted boolean DEFAULT false)
RETURNS TABLE (value bytea, version bigint, created_by_run text, updated_at timestamptz,
               tainted boolean, published boolean)
LANGUAGE sql STABLE AS $$
    SELECT c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(p_scope, p_key, false, p_tainted) c
$$;
COMMENT ON FUNCTION cryo.state_get(text, text, boolean) IS
    'Returns the sealed value, version, creating run, last write time and trust flags of a live trusted cell (with p_tainted, the tainted cell untrusted runs wrote), or no row when the cell is unset or deleted. A run''s own scope has one namespace and ignores p_tainted. Raises nothing.';

CREATE OR REPLACE FUNCTION cryo.state_list(p_scope text, p_tainted boolean DEFAULT false)
RETURNS TABLE (key text, value bytea, version bigint, created_by_run text, updated_at timestamptz,
               tainted boolean, published boolean)
LANGUAGE sql STABLE AS $$
    SELECT c.key, c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(p_scope, NULL, false, p_tainted) c ORDER BY c.key
$$;
COMMENT ON FUNCTION cryo.state_list(text, boolean) IS
    'Returns every live trusted cell of a scope (with p_tainted, the tainted ones) in key order, values sealed. Raises nothing.';

-- A running script's read, under its live claim: what the run may see (see the header).
CREATE OR REPLACE FUNCTION cryo.run_state_get(
    p_run_id text, p_token uuid, p_entity text, p_key text, p_tainted boolean DEFAULT false)
RETURNS TABLE (value bytea, version bigint, created_by_run text, updated_at timestamptz,
               tainted boolean, published boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    RETURN QUERY SELECT c.value, c.version, c.created_by_run, c.updated_at, c.tainted, c.published
      FROM cryo._state_read(cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity), p_key,
                            cryo._run_untrusted(p_run_id), p_tainted) c;
END
$$;
COMMENT ON FUNCTION cryo.run_state_get(text, uuid, text, text, boolean) IS
    'Returns the cell of the claimed run''s scope (run scope when p_entity is NULL) that the run may read: a trusted run its trusted cell, or with p_tainted the tainted one; an untrusted run its tainted cell, else a published trusted one; no row when none. Raises CR002 for a stale claim token, CR004 for a malformed entity.';

CREATE OR REPLACE FUNCTION cryo.run_state_list(
    p_run_id text, p_token uuid, p_entity text, p_tainted boolean DEFAULT false)
RETURNS TABLE (key text, value bytea, version bigint, created_by_run text, updated_at timestamptz,
               tainted boolean, published boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
BEGIN
    RETURN QUERY SELECT c.key, c.value, c.version, c.created_by_run, c.updated_at, c.tainted,
                        c.published
      FROM cryo._state_read(cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity), NULL,
                            cryo._run_untrusted(p_run_id), p_tainted) c
     ORDER BY c.key;
END
$$;
COMMENT ON FUNCTION cryo.run_state_list(text, uuid, text, boolean) IS
    'Returns, in key order, every cell of the claimed run''s scope that the run may read (as run_state_get). Raises CR002 for a stale claim token, CR004 for a malformed entity.';

-- Last-write-wins: creates the cell (or re-creates a deleted one) or replaces its value.
-- For a caller that holds the claimed row already (a graph's state nodes run in the
-- database), and for many cells at once: a graph's constant set nodes are one write, not
-- one call each. Each cell is checked as state_set checks it, in the order given, then
-- all are written in one statement; returns their new versions in that order. A cell
-- named twice cannot be written by one statement (the caller runs those one by one).
-- The writer's trust taints the cells; a trusted writer publishes them with p_public
-- (and a set without it withdraws that), an untrusted one never does.
CREATE OR REPLACE FUNCTION cryo._state_set_cells(p_q cryo.queue, p_entities text[],
                                                 p_keys text[], p_values bytea[],
                                                 p_public boolean DEFAULT false)
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := cryo.now();
    v_tainted boolean := cryo._run_untrusted(p_q.run_id);
    v_scopes text[] := '{}';
    v_versions bigint[];
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_keys), 0) LOOP
        v_scopes := v_scopes || cryo.state_scope(p_q.org, p_q.project, p_q.run_id, p_entities[i]);
        PERFORM cryo._state_key(p_keys[i], true);
        IF p_values[i] IS NULL THEN
            RAISE EXCEPTION 'a state value cannot be NULL (use state_delete)' USING ERRCODE = 'CR004';
        END IF;
    END LOOP;
    WITH cells AS (
        SELECT * FROM unnest(v_scopes, p_entities, p_keys, p_values)
                      WITH ORDINALITY AS u(scope, entity, key, value, i)
    ), written AS (
        INSERT INTO cryo.state_cells AS c (org, project, scope, entity, run_id, key, value,
                                           version, created_by_run, updated_by_run,
                                           created_at, updated_at, tainted, published)
        SELECT p_q.org, p_q.project, w.scope, w.entity,
               CASE WHEN w.entity IS NULL THEN p_q.run_id END, w.key, w.value, 1,
               p_q.run_id, p_q.run_id, v_now, v_now, v_tainted,
               coalesce(p_public, false) AND NOT v_tainted
          FROM cells w ORDER BY w.i
        ON CONFLICT (scope, key, tainted) DO UPDATE
           SET value = excluded.value, version = c.version + 1, published = excluded.published,
               updated_by_run = excluded.updated_by_run, updated_at = excluded.updated_at,
               created_by_run = CASE WHEN c.value IS NULL THEN excluded.created_by_run
                                     ELSE c.created_by_run END,
               created_at = CASE WHEN c.value IS NULL THEN excluded.created_at
                                 ELSE c.created_at END
        RETURNING c.scope, c.key, c.version
    )
    SELECT array_agg(w.version ORDER BY x.i) INTO v_versions
      FROM cells x JOIN written w ON w.scope = x.scope AND w.key = x.key;
    RETURN v_versions;
END
$$;

-- One cell (see _state_set_cells).
CREATE OR REPLACE FUNCTION cryo._state_set(p_q cryo.queue, p_entity text, p_key text, p_value bytea,
                                           p_public boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN (cryo._state_set_cells(p_q, ARRAY[p_entity], ARRAY[p_key], ARRAY[p_value], p_public))[1];
END
$$;

CREATE OR REPLACE FUNCTION cryo.state_set(
    p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea,
    p_public boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN cryo._state_set(cryo._claimed_row(p_run_id, p_token), p_entity, p_key, p_value,
                           p_public);
END
$$;
COMMENT ON FUNCTION cryo.state_set(text, uuid, text, text, bytea, boolean) IS
    'Writes a sealed value into a cell of the claimed run (run scope when p_entity is NULL); returns the cell''s new version. An untrusted run writes its tainted cell, never a trusted one; a trusted run''s p_public publishes the cell to untrusted runs until a set without it. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or a NULL value.';

-- state_delete for a caller that holds the claimed row already (see _state_set).
CREATE OR REPLACE FUNCTION cryo._state_delete(p_q cryo.queue, p_entity text, p_key text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_scope text := cryo.state_scope(p_q.org, p_q.project, p_q.run_id, p_entity);
BEGIN
    PERFORM cryo._state_key(p_key, true);
    UPDATE cryo.state_cells c
       SET value = NULL, version = c.version + 1, updated_by_run = p_q.run_id, updated_at = cryo.now()
     WHERE c.scope = v_scope AND c.key = p_key AND c.value IS NOT NULL
       AND c.tainted = cryo._run_untrusted(p_q.run_id);
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION cryo.state_delete(
    p_run_id text, p_token uuid, p_entity text, p_key text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN cryo._state_delete(cryo._claimed_row(p_run_id, p_token), p_entity, p_key);
END
$$;
COMMENT ON FUNCTION cryo.state_delete(text, uuid, text, text) IS
    'Deletes a cell of the claimed run''s scopes (its version is kept and raised, so it is never reused); returns true when a live cell was deleted. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key or entity.';

-- add: claim a key. Memoized by the cell (the agent passes the path). Writes the cell
-- only when nothing holds it; a cell this run created already counts as won, so a run
-- that asks again after losing its memo still holds what it claimed.
CREATE OR REPLACE FUNCTION cryo.state_add(
    p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea,
    p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL)
RETURNS TABLE (claimed boolean, version bigint, replayed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_family text := 'state.add';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_tainted boolean := cryo._run_untrusted(p_run_id);
    v_now timestamptz := cryo.now();
    v_path text;
    v_memo cryo.journal;
    v_version bigint;
    v_creator text;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT v_memo.exit_code = 0, NULL::bigint, true;
        RETURN;
    END IF;
    IF p_value IS NULL THEN
        RAISE EXCEPTION 'a state value cannot be NULL' USING ERRCODE = 'CR004';
    END IF;
    INSERT INTO cryo.state_cells AS c (org, project, scope, entity, run_id, key, value, version,
                                       created_by_run, updated_by_run, created_at, updated_at,
                                       tainted)
    VALUES (v_q.org, v_q.project, v_scope, p_entity,
            CASE WHEN p_entity IS NULL THEN p_run_id END, p_key, p_value, 1,
            p_run_id, p_run_id, v_now, v_now, v_tainted)
    ON CONFLICT (scope, key, tainted) DO UPDATE
       SET value = excluded.value, version = c.version + 1, created_by_run = excluded.created_by_run,
           updated_by_run = excluded.updated_by_run, created_at = excluded.created_at,
           updated_at = excluded.updated_at
     WHERE c.value IS NULL
    RETURNING c.version INTO v_version;
    IF v_version IS NULL THEN
        -- Held already. It is still ours if this run created it.
        SELECT c.created_by_run, c.version INTO v_creator, v_version FROM cryo.state_cells c
         WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted;
    ELSE
        v_creator := p_run_id;
    END IF;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.add', p_name, p_ordinal,
                               CASE WHEN v_creator = p_run_id THEN 0 ELSE 3 END, NULL);
    RETURN QUERY SELECT v_creator = p_run_id, v_version, false;
END
$$;
COMMENT ON FUNCTION cryo.state_add(text, uuid, text, text, bytea, integer, text, integer, text) IS
    'Claims a cell for the claimed run: writes it only when no live cell holds the key, and records the answer as the run''s memo at its position in the same transaction. Returns (claimed, version, replayed); claimed is true when this run created the cell, now or earlier; replayed is true when the answer came from an existing memo (version NULL then). An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or call identity, CR009 for a path that disagrees with the identity.';

-- cas: swap the value only if the live cell is still at p_expect. Memoized by --as
-- (the agent passes its position and identity); a lost swap is recorded too, because the run acts on it.
CREATE OR REPLACE FUNCTION cryo.state_cas(
    p_run_id text, p_token uuid, p_entity text, p_key text, p_value bytea, p_expect bigint,
    p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL)
RETURNS TABLE (swapped boolean, version bigint, replayed boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_family text := 'state.cas';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_path text;
    v_memo cryo.journal;
    v_version bigint;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT v_memo.exit_code = 0, NULL::bigint, true;
        RETURN;
    END IF;
    IF p_value IS NULL OR p_expect IS NULL OR p_expect < 1 THEN
        RAISE EXCEPTION 'cas needs a value and an expected version >= 1' USING ERRCODE = 'CR004';
    END IF;
    UPDATE cryo.state_cells c
       SET value = p_value, version = c.version + 1, updated_by_run = p_run_id, updated_at = cryo.now()
     WHERE c.scope = v_scope AND c.key = p_key AND c.value IS NOT NULL AND c.version = p_expect
       AND c.tainted = cryo._run_untrusted(p_run_id)
    RETURNING c.version INTO v_version;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.cas', p_name, p_ordinal,
                               CASE WHEN v_version IS NULL THEN 3 ELSE 0 END, NULL);
    RETURN QUERY SELECT v_version IS NOT NULL, v_version, false;
END
$$;
COMMENT ON FUNCTION cryo.state_cas(text, uuid, text, text, bytea, bigint, integer, text, integer, text) IS
    'Replaces a live cell''s value when its version equals p_expect, and records the answer (swapped or not) as the claimed run''s memo at its position in the same transaction. Returns (swapped, version, replayed): version is the new one after a swap; replayed is true when the answer came from an existing memo. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity, expected version or call identity, CR009 for a path that disagrees with the identity.';

-- incr: count. SQL cannot add sealed numbers, so the server does the arithmetic and
-- this function is the compare-and-set step of its loop:
--   1. called with p_expect NULL it only reports the cell (outcome 'moved' with the
--      sealed value, or NULL when unset, and the row's version, 0 when no row);
--   2. the server opens the value, adds, seals the new total and the memo, and calls
--      again with p_expect = the version it read; if the cell moved meanwhile it gets
--      'moved' with the fresh value and tries again.
-- The write and the memo commit together, so an increment is never applied without
-- the run's memo of it: a pass after an agent crash finds the memo ('recorded', with
-- the sealed memo in `sealed`) and never counts twice. Keeping a clear numeric column
-- instead would let SQL add in one step, but it would put the count in the clear,
-- which the sealing promise rules out.
CREATE OR REPLACE FUNCTION cryo.state_incr(
    p_run_id text, p_token uuid, p_entity text, p_key text, p_expect bigint, p_value bytea,
    p_result bytea, p_position integer, p_name text, p_ordinal integer, p_path text DEFAULT NULL)
RETURNS TABLE (outcome text, version bigint, sealed bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_family text := 'state.incr';
    v_q cryo.queue := cryo._claimed_row(p_run_id, p_token);
    v_scope text := cryo.state_scope(v_q.org, v_q.project, p_run_id, p_entity);
    v_tainted boolean := cryo._run_untrusted(p_run_id);
    v_now timestamptz := cryo.now();
    v_path text;
    v_memo cryo.journal;
    v_cell cryo.state_cells;
    v_version bigint;
BEGIN
    PERFORM cryo._state_key(p_key, true);
    v_path := cryo._state_path(v_family, p_name, p_ordinal, p_path);
    v_memo := cryo._state_memo(p_run_id, v_path);
    IF v_memo.path IS NOT NULL THEN
        RETURN QUERY SELECT 'recorded'::text, NULL::bigint, v_memo.result;
        RETURN;
    END IF;
    SELECT * INTO v_cell FROM cryo.state_cells c
     WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted FOR UPDATE;
    IF p_expect IS NULL OR p_value IS NULL OR p_expect <> coalesce(v_cell.version, 0) THEN
        RETURN QUERY SELECT 'moved'::text, coalesce(v_cell.version, 0), v_cell.value;
        RETURN;
    END IF;
    IF v_cell.version IS NULL THEN
        INSERT INTO cryo.state_cells (org, project, scope, entity, run_id, key, value, version,
                                      created_by_run, updated_by_run, created_at, updated_at,
                                      tainted)
        VALUES (v_q.org, v_q.project, v_scope, p_entity,
                CASE WHEN p_entity IS NULL THEN p_run_id END, p_key, p_value, 1,
                p_run_id, p_run_id, v_now, v_now, v_tainted)
        ON CONFLICT (scope, key, tainted) DO NOTHING;
        IF NOT FOUND THEN  -- another run created it between our read and now
            RETURN QUERY SELECT 'moved'::text, c.version, c.value FROM cryo.state_cells c
                          WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted;
            RETURN;
        END IF;
        v_version := 1;
    ELSE
        UPDATE cryo.state_cells c
           SET value = p_value, version = c.version + 1, updated_by_run = p_run_id, updated_at = v_now,
               created_by_run = CASE WHEN c.value IS NULL THEN p_run_id ELSE c.created_by_run END,
               created_at = CASE WHEN c.value IS NULL THEN v_now ELSE c.created_at END
         WHERE c.scope = v_scope AND c.key = p_key AND c.tainted = v_tainted
        RETURNING c.version INTO v_version;
    END IF;
    PERFORM cryo._state_record(v_q, p_position, v_path, 'state.incr', p_name, p_ordinal, 0, p_result);
    RETURN QUERY SELECT 'done'::text, v_version, NULL::bytea;
END
$$;
COMMENT ON FUNCTION cryo.state_incr(text, uuid, text, text, bigint, bytea, bytea, integer, text, integer, text) IS
    'One compare-and-set step of an increment by the claimed run. Returns (outcome, version, sealed): ''recorded'' with the sealed memo when the run already has an answer at its path; ''moved'' with the cell''s current version (0 when no row) and sealed value (NULL when unset) when p_expect is NULL or stale; ''done'' with the new version once the new sealed total is written and p_result recorded as the memo in the same transaction. An untrusted run works on its tainted cell only, never a trusted one. Raises CR002 for a stale claim token, CR001 for a key under _cryo/, CR004 for a malformed key, entity or call identity, CR009 for a path that disagrees with the identity.';

CREATE OR REPLACE VIEW cryo.state_overview WITH (security_barrier) AS
SELECT c.org, c.project, CASE WHEN c.entity IS NULL THEN 'run' ELSE 'entity' END AS scope_kind,
       coalesce(c.entity, c.run_id) AS scope_name, c.key, c.version, c.value IS NULL AS deleted,
       length(c.value) AS sealed_bytes, c.created_by_run, c.updated_by_run, c.created_at,
       c.updated_at, c.tainted, c.published
  FROM cryo.state_cells c
 WHERE c.org || ':' || c.project || ':' LIKE (SELECT cryo._app_tenant());  -- an application role sees its tenant only (95_reads.sql)
COMMENT ON VIEW cryo.state_overview IS 'One row per state cell: scope, key, version, who created and last wrote it, the sealed size, whether an untrusted run wrote it (tainted) and whether a trusted writer published it. Values stay sealed and are not shown.';
