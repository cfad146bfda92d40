// What a graph's job runs are called: the node that started them, not `node.sh`.
import { api, projectPath } from "../api.js";

const cache = new Map();  // parent run id -> { job run id: "workflow › node" }

export async function jobNames(parentId, signal) {
  if (cache.has(parentId)) return cache.get(parentId);
  let names = {};
  try {
    const p = await api(projectPath(`/runs/${encodeURIComponent(parentId)}`), { signal });
    names = namesOf(p);
    if (p.finished) cache.set(parentId, names);
  } catch (_) { names = {}; }
  return names;
}

export function namesOf(run) {
  const names = {};
  for (const n of (run.graph && run.graph.nodes) || []) {
    for (const id of n.runs || []) names[id] = `${run.workflow || run.filename} › ${n.id}`;
  }
  return names;
}
