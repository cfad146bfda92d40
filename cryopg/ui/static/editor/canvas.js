// The editor's drawing board: a graph document's nodes as boxes the user moves by dragging,
// edges drawn from a box's right-hand port to another box, a selected node or edge, and
// the server's error written under the node it names. It holds positions only; the
// document itself belongs to editor/page.js, told of every change through `on`.
import { NODE_H, NODE_W, arrowDefs, curve, fit, svg } from "./svg.js";

// on: { select(sel), connect(from, to), moved() }; readOnly draws without handles.
export function board(on, readOnly = false) {
  const edgesG = svg("g", { class: "edges" });
  const nodesG = svg("g", { class: "nodes" });
  const ghost = svg("path", { class: "ghost", d: "" });
  const root = svg("svg", { class: "canvas", id: "canvas", role: "group", "aria-label": "graph canvas" },
    arrowDefs("canvas-arrow"), edgesG, nodesG, ghost);
  let doc = null, pos = {}, sel = null, errors = {};
  let drag = null;  // { kind: "move", id, dx, dy, moved } | { kind: "link", from }

  const point = (ev) => {
    const r = root.getBoundingClientRect();
    return { x: ev.clientX - r.left, y: ev.clientY - r.top };
  };

  function size() {
    const xs = Object.values(pos);
    const w = Math.max(600, ...xs.map((p) => p.x + NODE_W)) + 40;
    const h = Math.max(360, ...xs.map((p) => p.y + NODE_H)) + 60;
    root.setAttribute("width", w);
    root.setAttribute("height", h);
    root.setAttribute("viewBox", `0 0 ${w} ${h}`);
  }

  function drawEdges() {
    edgesG.replaceChildren(...(doc.edges || []).map((e, i) => {
      const a = pos[e.from], b = pos[e.to];
      if (!a || !b) return "";
      const d = curve(a, b);
      const picked = sel && sel.edge === i;
      return svg("g", { "data-edge": `${e.from}>${e.to}`, "data-index": i },
        svg("path", { d, class: "edge-hit" }),
        svg("path", { d, class: `edge${picked ? " selected" : ""}`, "marker-end": "url(#canvas-arrow)" }));
    }));
  }

  function draw() {
    nodesG.replaceChildren(...(doc.nodes || []).map((n) => {
      const p = pos[n.id] || { x: 20, y: 20 };
      const err = errors[n.id];
      const bits = [n.type, n.fan_out ? "fan-out" : "", n.retry ? `retry ×${n.retry.attempts ?? 1}` : "", n.if !== undefined ? "if" : ""];
      return svg("g", { class: `cnode${sel && sel.node === n.id ? " selected" : ""}${err ? " has-error" : ""}`,
        "data-node": n.id, transform: `translate(${p.x - NODE_W / 2},${p.y - NODE_H / 2})`, tabindex: 0, role: "button",
        // Named by its <title>, not an aria-label that differs from the text drawn (axe:
        // label-content-name-mismatch).
      },
        svg("title", {}, `node ${n.id} (${n.type})${err ? ": " + err : ""}`),
        svg("rect", { class: "body", width: NODE_W, height: NODE_H, rx: 5 }),
        svg("text", { x: 8, y: 20, class: "t1" }, fit(n.id, 22)),
        svg("text", { x: 8, y: 38, class: "t2" }, fit(bits.filter(Boolean).join(" · "), 26)),
        readOnly ? "" : svg("circle", { class: "port", cx: NODE_W, cy: NODE_H / 2, r: 7, "data-port": n.id }),
        err ? svg("text", { x: 0, y: NODE_H + 14, class: "err", "data-error": n.id }, fit(err, 60)) : "");
    }));
    drawEdges();
    size();
  }

  function nodeAt(ev) {
    const hit = document.elementFromPoint(ev.clientX, ev.clientY);
    const g = hit && hit.closest && hit.closest("[data-node]");
    return g ? g.dataset.node : null;
  }

  root.addEventListener("pointerdown", (ev) => {
    const port = ev.target.closest("[data-port]");
    const node = ev.target.closest("[data-node]");
    const edge = ev.target.closest("[data-edge]");
    if (port && !readOnly) {
      drag = { kind: "link", from: port.dataset.port };
      root.setPointerCapture(ev.pointerId);
      ev.preventDefault();
    } else if (node) {
      const p = pos[node.dataset.node], at = point(ev);
      drag = readOnly ? null : { kind: "move", id: node.dataset.node, dx: at.x - p.x, dy: at.y - p.y, moved: false };
      if (drag) root.setPointerCapture(ev.pointerId);
      on.select({ node: node.dataset.node });
    } else if (edge) {
      on.select({ edge: Number(edge.dataset.index) });
    } else {
      on.select(null);
    }
  });
  root.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const at = point(ev);
    if (drag.kind === "move") {
      pos[drag.id] = { x: Math.max(NODE_W / 2, at.x - drag.dx), y: Math.max(NODE_H / 2, at.y - drag.dy) };
      drag.moved = true;
      const g = nodesG.querySelector(`[data-node="${CSS.escape(drag.id)}"]`);
      if (g) g.setAttribute("transform", `translate(${pos[drag.id].x - NODE_W / 2},${pos[drag.id].y - NODE_H / 2})`);
      drawEdges();
    } else {
      const a = pos[drag.from];
      ghost.setAttribute("d", `M${a.x + NODE_W / 2},${a.y} L${at.x},${at.y}`);
    }
  });
  root.addEventListener("pointerup", (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    ghost.setAttribute("d", "");
    if (d.kind === "move") { if (d.moved) { size(); on.moved(); } return; }
    const to = nodeAt(ev);
    if (to && to !== d.from) on.connect(d.from, to);
  });

  return {
    el: root,
    set(next) { ({ doc, pos, sel, errors } = next); draw(); },
  };
}
