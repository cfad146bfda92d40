-- How many runs the web UI's runs list holds under its filters, for its total: the plain
-- list (top-level runs, or one parent's children, by status and exact workflow) or the
-- search (cryo.search_runs: children too, text, workflow substring, trigger, dates).
CREATE OR REPLACE FUNCTION cryo.count_runs(
    p_org text, p_project text, p_search boolean, p_text text DEFAULT NULL,
    p_status text DEFAULT NULL, p_workflow text DEFAULT NULL, p_match text DEFAULT NULL,
    p_trigger text DEFAULT NULL, p_since timestamptz DEFAULT NULL,
    p_until timestamptz DEFAULT NULL, p_parent text DEFAULT NULL, p_input_hash bytea DEFAULT NULL)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    WITH pat AS (
        SELECT '%' || replace(replace(replace(p_text, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS t,
               '%' || replace(replace(replace(p_match, '\', '\\'), '%', '\%'), '_', '\_') || '%' AS w
    )
    SELECT count(*) FROM pat, cryo.runs r
     WHERE r.org = p_org AND r.project = p_project
       AND (p_status IS NULL OR r.status = p_status)
       AND (p_workflow IS NULL OR coalesce(r.workflow, r.filename) = p_workflow)
       AND (p_search OR CASE WHEN p_parent IS NULL THEN r.parent_run_id IS NULL
                             ELSE r.parent_run_id = p_parent END)
       AND (p_match IS NULL OR coalesce(r.workflow, r.filename) ILIKE pat.w)
       AND (p_trigger IS NULL OR CASE WHEN r.parent_run_id IS NOT NULL THEN 'parent'
                                      ELSE coalesce(r.trigger_kind, 'manual') END = p_trigger)
       AND (p_since IS NULL OR r.created_at >= p_since)
       AND (p_until IS NULL OR r.created_at < p_until)
       AND (p_text IS NULL OR r.id ILIKE pat.t OR coalesce(r.workflow, r.filename) ILIKE pat.t
            OR r.input_clear::text ILIKE pat.t
            OR (p_input_hash IS NOT NULL AND p_input_hash = ANY (r.input_hashes))
            OR EXISTS (SELECT 1 FROM cryo.journal j WHERE j.run_id = r.id AND j.label ILIKE pat.t))
$$;
COMMENT ON FUNCTION cryo.count_runs(text, text, boolean, text, text, text, text, text, timestamptz, timestamptz, text, bytea) IS
    'Returns how many runs of the project match the runs list''s filters: with p_search those of cryo.search_runs (children included; p_input_hash as there), else those of cryo.list_runs_page (top-level runs or p_parent''s children, status, exact workflow). Raises nothing.';
