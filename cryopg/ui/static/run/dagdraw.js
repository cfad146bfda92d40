// Drawing a DAG into an <svg>: laid out once per shape (the caller keeps the result while
// the run's nodes and edges stay the same), and from CULL_AT nodes culled: only the boxes
// and edges inside the visible rectangle (plus a margin) are in the page, swapped as the
// view pans or zooms, and below DETAIL_BELOW zoom a box is a bare rect (its text would be
// unreadable) with the visible edges as one path. A 2,000-node graph thus keeps a few
// hundred elements in the page however it is moved.
import { NODE_H, NODE_W, arrowDefs, edgePath, fit, layout, svg } from "../editor/svg.js";

export const CULL_AT = 1000;
export const DETAIL_BELOW = 0.3;
const MARGIN = 300;  // graph px drawn beyond the visible rectangle, so a pan shows no gap

function box(n, p) {
  return svg("g", { class: `dag-node s-${n.status}`, "data-node": n.id, tabindex: 0, role: "button",
    transform: `translate(${(p.x - NODE_W / 2).toFixed(1)},${(p.y - NODE_H / 2).toFixed(1)})` },
    svg("rect", { width: NODE_W, height: NODE_H, rx: 5 }),
    svg("text", { x: 8, y: 17, class: "t1" }, fit(n.label, 24)),
    svg("text", { x: 8, y: 33, class: "t2" }, ""),
    svg("text", { x: 8, y: 48, class: "t3" }, ""));
}

// A box at low zoom: one rect, still a pick target.
function dot(n, p) {
  return svg("rect", { class: `dag-dot s-${n.status}`, "data-node": n.id, x: (p.x - NODE_W / 2).toFixed(1),
    y: (p.y - NODE_H / 2).toFixed(1), width: NODE_W, height: NODE_H, rx: 5 });
}

function edgeEl(e) {
  return svg("path", { d: edgePath(e.points), class: "dag-edge", "marker-end": "url(#dag-arrow)",
                       "data-from": e.from, "data-to": e.to });
}

// Lays `shape` out and draws it. Returns { svg, boxes: {id: g} (the boxes in the page),
// width, height, pos, culled, show(view), setNodes(nodes) }: show({x0, y0, x1, y1, z})
// draws what that rectangle of the graph holds (a no-op unless culled); paint(g, n) is
// called on each box drawn, with the node's latest data (setNodes keeps it current).
export function drawDag(shape, onPick, paint = () => {}) {
  if (!shape.nodes.length) return { svg: null, boxes: {}, width: 0, height: 0, pos: {}, culled: false, show() {}, setNodes() {} };
  const lay = layout(shape.nodes.map((n) => ({ id: n.id, h: NODE_H })), shape.edges);
  const culled = shape.nodes.length >= CULL_AT;
  let byId = Object.fromEntries(shape.nodes.map((n) => [n.id, n]));
  const boxes = {};
  const edgesG = svg("g", { class: "dag-edges" });
  const nodesG = svg("g", { class: "dag-nodes" });
  if (!culled) {
    edgesG.append(...lay.edges.map(edgeEl));
    nodesG.append(...shape.nodes.map((n) => (boxes[n.id] = box(n, lay.pos[n.id]))));
  }
  const root = svg("svg", { class: "dag", width: lay.width, height: lay.height,
    viewBox: `0 0 ${lay.width} ${lay.height}`, role: "group", "aria-label": "graph of the run" },
    arrowDefs("dag-arrow"), edgesG, nodesG);
  root.addEventListener("click", (ev) => {
    const g = ev.target.closest("[data-node]");
    if (g) onPick(g.dataset.node);
  });
  root.addEventListener("keydown", (ev) => {
    const g = ev.target.closest("[data-node]");
    if (g && (ev.key === "Enter" || ev.key === " ")) { ev.preventDefault(); onPick(g.dataset.node); }
  });

  // Edges by their bounding boxes, so a rectangle's edges are found by one pass.
  const ebox = lay.edges.map((e) => {
    const xs = e.points.map((p) => p.x), ys = e.points.map((p) => p.y);
    return [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)];
  });
  let detail = null, shownEdges = new Map(), lastKey = "";
  function show(v) {
    if (!culled || !v || !(v.x1 > v.x0)) return;
    const x0 = v.x0 - MARGIN, y0 = v.y0 - MARGIN, x1 = v.x1 + MARGIN, y1 = v.y1 + MARGIN;
    const full = v.z >= DETAIL_BELOW;
    // Redraw only when the drawn rectangle moved by a fair part of the margin.
    const q = (a) => Math.round(a / (MARGIN / 3));
    const key = `${full}|${q(x0)}|${q(y0)}|${q(x1)}|${q(y1)}`;
    if (key === lastKey) return;
    lastKey = key;
    if (full !== detail) {  // the level of detail changed: start again
      detail = full;
      nodesG.replaceChildren(); edgesG.replaceChildren(); shownEdges = new Map();
      for (const id of Object.keys(boxes)) delete boxes[id];
    }
    const want = new Set();
    for (const id in lay.pos) {
      const p = lay.pos[id];
      if (p.x + NODE_W / 2 >= x0 && p.x - NODE_W / 2 <= x1 && p.y + NODE_H / 2 >= y0 && p.y - NODE_H / 2 <= y1) want.add(id);
    }
    for (const id of Object.keys(boxes)) if (!want.has(id)) { boxes[id].remove(); delete boxes[id]; }
    const add = [];
    for (const id of want) {
      if (boxes[id]) continue;
      const n = byId[id];
      const g = full ? box(n, lay.pos[id]) : dot(n, lay.pos[id]);
      boxes[id] = g;
      if (full) paint(g, n);
      add.push(g);
    }
    nodesG.append(...add);
    const inView = [];
    lay.edges.forEach((e, i) => {
      const b = ebox[i];
      if (b[2] >= x0 && b[0] <= x1 && b[3] >= y0 && b[1] <= y1) inView.push(i);
    });
    if (!full) {  // one path for them all, no arrowheads
      edgesG.replaceChildren(svg("path", { class: "dag-edge", d: inView.map((i) => edgePath(lay.edges[i].points)).join(" ") }));
      return;
    }
    const keep = new Set(inView);
    for (const [i, p] of shownEdges) if (!keep.has(i)) { p.remove(); shownEdges.delete(i); }
    const newEdges = [];
    for (const i of inView) if (!shownEdges.has(i)) { const p = edgeEl(lay.edges[i]); shownEdges.set(i, p); newEdges.push(p); }
    edgesG.append(...newEdges);
  }

  return { svg: root, boxes, width: lay.width, height: lay.height, pos: lay.pos, culled, show,
    setNodes(nodes) { byId = Object.fromEntries(nodes.map((n) => [n.id, n])); },
    // Boxes at low zoom carry only their status colour.
    repaint() {
      for (const [id, g] of Object.entries(boxes)) {
        const n = byId[id];
        if (!n) continue;
        if (g.tagName === "rect") g.setAttribute("class", `dag-dot s-${n.status}`); else paint(g, n);
      }
    } };
}
