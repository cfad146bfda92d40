// Drawing helpers shared by the DAG view, the Gantt view and the canvas editor: SVG
// elements, the canvas stylesheet (style.css belongs to the page; ours is loaded once,
// as a file, since the CSP allows no inline style), and the layered layout (dagre).
import dagre from "../vendor/dagre.esm.js";

const NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

export function useCanvasStyle() {
  if (document.getElementById("canvas-css")) return;
  document.head.append(Object.assign(document.createElement("link"),
    { id: "canvas-css", rel: "stylesheet", href: "/ui/editor/canvas.css" }));
}

export const NODE_W = 168;
export const NODE_H = 54;

// Positions for nodes [{id, w?, h?}] and edges [{from, to}], left to right by rank:
// { pos: {id: {x, y}} (centres), edges: [{from, to, points}], width, height }.
// dagre's crossing reduction grows faster than the graph: past LARGE nodes (a 500-node
// graph takes it seconds) the same layering is done here in linear passes: ranks by
// longest path, a few barycentre sweeps to order each rank, straight edges.
const LARGE = 150;

export function layout(nodes, edges, opts = {}) {
  if (nodes.length > LARGE && !opts.dagre) return fastLayout(nodes, edges);
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: opts.rankdir || "LR", nodesep: 18, ranksep: 46, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  const known = new Set();
  for (const n of nodes) { g.setNode(n.id, { width: n.w || NODE_W, height: n.h || NODE_H }); known.add(n.id); }
  for (const e of edges) if (known.has(e.from) && known.has(e.to) && e.from !== e.to) g.setEdge(e.from, e.to);
  dagre.layout(g);
  const pos = {};
  for (const id of g.nodes()) { const n = g.node(id); pos[id] = { x: n.x, y: n.y }; }
  const out = g.edges().map((e) => ({ from: e.v, to: e.w, points: g.edge(e).points }));
  const { width, height } = g.graph();
  return { pos, edges: out, width: Math.ceil(width || 0), height: Math.ceil(height || 0) };
}

export function fastLayout(nodes, edges) {
  const ids = nodes.map((n) => n.id), known = new Set(ids);
  const preds = {}, succs = {}, indeg = {};
  for (const id of ids) { preds[id] = []; succs[id] = []; indeg[id] = 0; }
  for (const e of edges) {
    if (!known.has(e.from) || !known.has(e.to) || e.from === e.to) continue;
    succs[e.from].push(e.to); preds[e.to].push(e.from); indeg[e.to]++;
  }
  const rank = {}, queue = ids.filter((id) => !indeg[id]);
  for (const id of queue) rank[id] = 0;
  for (let i = 0; i < queue.length; i++) {
    const v = queue[i];
    for (const w of succs[v]) {
      rank[w] = Math.max(rank[w] ?? 0, rank[v] + 1);
      if (--indeg[w] === 0) queue.push(w);
    }
  }
  for (const id of ids) if (rank[id] === undefined) rank[id] = 0;  // a cycle: left in rank 0
  const layers = [];
  for (const id of ids) (layers[rank[id]] = layers[rank[id]] || []).push(id);
  const order = {};
  const number = (layer) => layer.forEach((id, i) => { order[id] = i; });
  layers.forEach(number);
  const bary = (layer, near) => {
    const score = {};
    for (const id of layer) {
      const ns = near[id];
      score[id] = ns.length ? ns.reduce((a, n) => a + order[n], 0) / ns.length : order[id];
    }
    layer.sort((a, b) => score[a] - score[b]);
    number(layer);
  };
  for (let sweep = 0; sweep < 4; sweep++) {
    if (sweep % 2 === 0) for (let r = 1; r < layers.length; r++) bary(layers[r], preds);
    else for (let r = layers.length - 2; r >= 0; r--) bary(layers[r], succs);
  }
  const H = NODE_H, gapX = 46, gapY = 18, m = 12;
  const tallest = Math.max(1, ...layers.map((l) => l.length));
  const pos = {};
  layers.forEach((layer, r) => {
    const offset = ((tallest - layer.length) * (H + gapY)) / 2;  // each rank centred
    layer.forEach((id, i) => { pos[id] = { x: m + r * (NODE_W + gapX) + NODE_W / 2, y: m + offset + i * (H + gapY) + H / 2 }; });
  });
  const out = [];
  for (const e of edges) {
    const a = pos[e.from], b = pos[e.to];
    if (!a || !b || e.from === e.to) continue;
    out.push({ from: e.from, to: e.to, points: [{ x: a.x + NODE_W / 2, y: a.y }, { x: b.x - NODE_W / 2, y: b.y }] });
  }
  return { pos, edges: out, width: 2 * m + layers.length * (NODE_W + gapX), height: 2 * m + tallest * (H + gapY) };
}

// An edge's path through dagre's points, or a curve between two boxes.
export function edgePath(points) {
  if (!points || !points.length) return "";
  return points.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
}

export function curve(a, b) {
  const x1 = a.x + NODE_W / 2, y1 = a.y, x2 = b.x - NODE_W / 2, y2 = b.y;
  const dx = Math.max(Math.abs(x2 - x1) / 2, 30);
  return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
}

export function arrowDefs(id) {
  return svg("defs", {}, svg("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
    markerHeight: 7, orient: "auto-start-reverse" }, svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrow-head" })));
}

// Text cut to fit a box of `chars` characters.
export function fit(text, chars) {
  text = String(text ?? "");
  return text.length > chars ? text.slice(0, chars - 1) + "…" : text;
}
