-- Flat graph turns. A turn must cost what is ready, not the size of the graph, and its
-- queries must stay keyed on a brand-new run whose statistics say nothing. Each node row
-- therefore carries its own clear definition (so no turn re-expands the whole graph
-- document), its place in document order, the nodes it depends on and the nodes that
-- depend on it, and open_deps: how many of its predecessors have not ended yet. A node is
-- ready when it is pending with open_deps = 0, found by index.
-- A graph run whose turn fails is retried with backoff (drive_failures counts the
-- failures in a row), so one poisoned run never holds up the others.

ALTER TABLE cryo.node_states ADD COLUMN ord integer;
ALTER TABLE cryo.node_states ADD COLUMN def jsonb;
ALTER TABLE cryo.node_states ADD COLUMN deps text[];
ALTER TABLE cryo.node_states ADD COLUMN dependents text[];
ALTER TABLE cryo.node_states ADD COLUMN open_deps integer NOT NULL DEFAULT 0;
-- A node with continue_on_error that failed: it ended, and the run goes on.
ALTER TABLE cryo.node_states ADD COLUMN tolerated boolean NOT NULL DEFAULT false;

-- Live graph runs gain the new columns from their pinned structure.
WITH defs AS (
    SELECT r.id AS run_id, d.def ->> 'id' AS node_id, d.ord::integer AS ord, d.def,
           ARRAY(SELECT DISTINCT x FROM jsonb_array_elements_text(coalesce(d.def -> 'deps', '[]')) x)
               AS deps
      FROM cryo.runs r, jsonb_array_elements(r.graph -> 'nodes') WITH ORDINALITY AS d(def, ord)
     WHERE r.kind = 'graph' AND r.status NOT IN ('succeeded', 'failed', 'cancelled')
)
UPDATE cryo.node_states n
   SET ord = d.ord, def = d.def, deps = d.deps,
       dependents = ARRAY(SELECT e.node_id FROM defs e WHERE e.run_id = d.run_id
                             AND d.node_id = ANY (e.deps)),
       open_deps = (SELECT count(*) FROM cryo.node_states m WHERE m.run_id = d.run_id
                       AND m.node_id = ANY (d.deps)
                       AND m.status IN ('pending', 'running', 'waiting'))
  FROM defs d
 WHERE n.run_id = d.run_id AND n.node_id = d.node_id;

-- Indexes whose leading columns are every condition a turn asks with (run, status, and
-- for readiness open_deps), so the planner picks them over the primary key even when its
-- statistics guess one row per run: a turn never filters a run's every node row.
CREATE INDEX node_states_by_status ON cryo.node_states (run_id, status, open_deps, ord);
-- Instances in flight, read once a turn (not per node): a partial index, so the primary
-- key stays the only choice for a lookup by (run, node, item).
CREATE INDEX node_instances_live ON cryo.node_instances (run_id, node_id, item)
    WHERE status IN ('ready', 'running', 'waiting', 'retrying');

ALTER TABLE cryo.runs ADD COLUMN drive_failures integer NOT NULL DEFAULT 0;

COMMENT ON COLUMN cryo.node_states.tolerated IS
    'A failed node whose continue_on_error let the run go on (its successors run).';
COMMENT ON COLUMN cryo.node_states.open_deps IS
    'How many of the node''s predecessors have not ended; pending with 0 means ready.';
COMMENT ON COLUMN cryo.runs.drive_failures IS
    'For a graph run: how many driver turns in a row failed (each backs off longer).';
