-- Reading graph runs: their nodes (runs show, the UI, DBAs), their structure and
-- document, and the jobs that did their nodes, with those jobs' logs.

-- Nodes of graph runs, for reading (runs show, the UI) and for DBAs.
CREATE OR REPLACE FUNCTION cryo.read_graph_nodes(p_run_id text)
RETURNS TABLE (node_id text, type text, status text, items integer, item integer,
               item_status text, attempt integer, output bytea, error text, job_run_id text,
               wait_kind text, started_at timestamptz, finished_at timestamptz,
               output_clear jsonb, cached boolean)
LANGUAGE sql STABLE AS $$
    SELECT n.node_id, n.type, n.status, n.items, i.item, i.status, i.attempt,
           coalesce(i.output, CASE WHEN i.item IS NULL THEN n.output END), coalesce(i.error, n.error),
           i.job_run_id, i.wait_kind, n.started_at, n.finished_at,
           coalesce(i.output_clear, CASE WHEN i.item IS NULL THEN n.output_clear END),
           coalesce(i.cached, false)
      FROM cryo.node_states n
      LEFT JOIN cryo.node_instances i ON i.run_id = n.run_id AND i.node_id = n.node_id
     WHERE n.run_id = p_run_id
     ORDER BY n.node_id, i.item
$$;
COMMENT ON FUNCTION cryo.read_graph_nodes(text) IS
    'Returns every node of a graph run with each started instance (a fan-out''s items, a loop''s iterations): status, attempt, sealed output (or output_clear, for one holding no user data), error, the child run doing it, and cached (its output came from the node''s cache). Raises nothing.';

CREATE OR REPLACE VIEW cryo.graph_nodes WITH (security_barrier) AS
SELECT n.run_id, n.org, n.project, n.node_id, n.type, n.status, n.items,
       (SELECT max(i.attempt) FROM cryo.node_instances i
         WHERE i.run_id = n.run_id AND i.node_id = n.node_id) AS attempt,
       n.started_at, n.finished_at, n.error
  FROM cryo.node_states n JOIN cryo.runs r ON r.id = n.run_id
 WHERE NOT cryo.is_terminal(r.status)
   AND n.org || ':' || n.project || ':' LIKE (SELECT cryo._app_tenant());  -- an application role sees its tenant only (95_reads.sql)
COMMENT ON VIEW cryo.graph_nodes IS 'One row per node of every live graph run: type, status, fan-out size, attempt, times.';

CREATE OR REPLACE FUNCTION cryo.read_graph(p_run_id text)
RETURNS TABLE (graph jsonb, source bytea)
LANGUAGE sql STABLE AS $$
    SELECT r.graph, r.source FROM cryo.runs r WHERE r.id = p_run_id AND r.kind = 'graph'
$$;
COMMENT ON FUNCTION cryo.read_graph(text) IS
    'Returns a graph run''s clear structure and its sealed document; no row for a script run. Raises nothing.';

-- The jobs that did the nodes of a graph run, oldest first: each child run an agent ran
-- for a node instance (a retry is another), and those of the graph runs its workflow
-- nodes started, nested. label names the node as a log prefix: its id, '#item' for a
-- fan-out instance, 'outer/inner' inside a workflow node; attempt counts the jobs
-- of one label. Log followers read their logs with cryo.read_graph_logs.
CREATE OR REPLACE FUNCTION cryo.graph_jobs(p_run_id text)
RETURNS TABLE (job_run_id text, label text, attempt bigint, status text, exit_code integer,
               error text, finished boolean, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE jobs AS (
        SELECT c.id, c.kind, c.status, c.exit_code, c.error, c.created_at,
               c.graph_node || CASE WHEN n.items IS NULL THEN '' ELSE '#' || c.graph_item END AS label,
               1 AS depth
          FROM cryo.runs c
          LEFT JOIN cryo.node_states n ON n.run_id = c.parent_run_id AND n.node_id = c.graph_node
         WHERE c.parent_run_id = p_run_id AND c.graph_node IS NOT NULL
        UNION ALL
        SELECT c.id, c.kind, c.status, c.exit_code, c.error, c.created_at,
               j.label || '/' || c.graph_node
                   || CASE WHEN n.items IS NULL THEN '' ELSE '#' || c.graph_item END,
               j.depth + 1
          FROM jobs j
          JOIN cryo.runs c ON c.parent_run_id = j.id AND c.graph_node IS NOT NULL
          LEFT JOIN cryo.node_states n ON n.run_id = c.parent_run_id AND n.node_id = c.graph_node
         WHERE j.kind = 'graph' AND j.depth < 16
    )
    SELECT j.id, j.label, row_number() OVER (PARTITION BY j.label ORDER BY j.created_at, j.id),
           j.status, j.exit_code, j.error, cryo.is_terminal(j.status), j.created_at
      FROM jobs j
     WHERE j.kind = 'script'
     ORDER BY j.created_at, j.id
$$;
COMMENT ON FUNCTION cryo.graph_jobs(text) IS
    'Returns the child runs that did the nodes of a graph run (and of the graph runs its workflow nodes started), oldest first: each with a label naming its node (id, #item for a fan-out instance, outer/inner when nested), which attempt of that label it is, its status, exit code and error, and whether it has finished. Raises nothing.';

-- The log chunks of a graph run's jobs after a position per job: p_jobs[i] after chunk
-- id p_after[i], at most p_limit per job, in chunk order. A job that is not one of the
-- run's (cryo.graph_jobs) gives nothing.
CREATE OR REPLACE FUNCTION cryo.read_graph_logs(p_run_id text, p_jobs text[], p_after bigint[],
                                                p_limit integer DEFAULT 500)
RETURNS TABLE (job_run_id text, id bigint, data bytea, created_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT c.job, l.id, l.data, l.created_at
      FROM unnest(p_jobs, p_after) AS c(job, after)
      JOIN cryo.graph_jobs(p_run_id) g ON g.job_run_id = c.job
      CROSS JOIN LATERAL (SELECT l.id, l.data, l.created_at FROM cryo.logs l
                           WHERE l.run_id = c.job AND l.id > coalesce(c.after, 0)
                           ORDER BY l.id LIMIT p_limit) l
     ORDER BY l.id
$$;
COMMENT ON FUNCTION cryo.read_graph_logs(text, text[], bigint[], integer) IS
    'Returns sealed log chunks of the jobs of a graph run, with when each was stored: for each job in p_jobs (one of the run''s, see graph_jobs) up to p_limit chunks after the id at the same place in p_after, all in chunk order. Raises nothing.';
