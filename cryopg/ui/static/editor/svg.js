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
export function layout(nodes, edges, opts = {}) {
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
