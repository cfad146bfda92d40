// The Gantt view: one bar per graph node (or per checkpoint of a script run) on the run's
// time axis, so a user sees where the time went: what waited, what ran side by side,
// which node was the long pole. Bars of running nodes grow while the run is live.
import { el } from "../dom.js";
import { fit, svg, useCanvasStyle } from "../editor/svg.js";
import { fmtMs } from "../time.js";
import { throttledShape } from "./dag.js";
import { registerView } from "./views.js";

// RIGHT: room after the axis for the last bar's duration and the last tick's label,
// which are drawn past the bar's end.
const ROW = 22, LABEL = 190, AXIS = 24, MIN_W = 640, RIGHT = 80;

function niceStep(span) {
  const target = span / 6;
  const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5,
    6e5, 9e5, 18e5, 36e5, 72e5, 144e5, 288e5, 864e5];
  return steps.find((s) => s >= target) || 864e5;
}

export function drawGantt(run, shape, width) {
  const now = Date.now();
  const t = (iso) => (iso ? new Date(iso).getTime() : null);
  const rows = shape.nodes.filter((n) => n.started_at);
  const start = Math.min(t(run.started_at) ?? Infinity, ...rows.map((n) => t(n.started_at)));
  const endOf = (n) => t(n.finished_at) ?? (run.finished ? t(run.finished_at) ?? now : now);
  const end = Math.max(run.finished ? t(run.finished_at) ?? start : now, ...rows.map(endOf), start + 1);
  const span = end - start;
  const w = Math.max(width - LABEL - 16 - RIGHT, 200);
  const x = (ms) => LABEL + ((ms - start) / span) * w;
  const step = niceStep(span);
  const ticks = [];
  for (let s = 0; s <= span; s += step) {
    ticks.push(svg("g", { class: "tick" }, svg("line", { x1: x(start + s), x2: x(start + s), y1: AXIS - 4, y2: AXIS + rows.length * ROW }),
      svg("text", { x: x(start + s) + 2, y: 14 }, s ? fmtMs(s) : "0")));
  }
  const bars = rows.map((n, i) => {
    const a = t(n.started_at), b = endOf(n), y = AXIS + i * ROW;
    const bw = Math.max(x(b) - x(a), 2);
    const dur = fmtMs(b - a);
    return svg("g", { class: `gantt-row s-${n.status}`, "data-node": n.id },
      svg("title", {}, `${n.label} (${n.sub}): ${n.status}, ${dur}`),
      svg("text", { x: 4, y: y + 15, class: "gantt-label" }, fit(n.label, 26)),
      svg("rect", { x: x(a).toFixed(1), y: y + 4, width: bw.toFixed(1), height: ROW - 8, rx: 2, class: "gantt-bar" }),
      svg("text", { x: (x(a) + bw + 4).toFixed(1), y: y + 15, class: "gantt-dur" }, dur));
  });
  const h = AXIS + rows.length * ROW + 6;
  const total = LABEL + w + 16 + RIGHT;
  return svg("svg", { class: "gantt", width: total, height: h, viewBox: `0 0 ${total} ${h}`,
    role: "img", "aria-label": `timeline of ${rows.length} ${run.kind === "graph" ? "nodes" : "checkpoints"} over ${fmtMs(span)}` },
    svg("g", { class: "gantt-axis" }, ticks), bars);
}

function create({ base, signal }) {
  useCanvasStyle();
  // Focusable, so a keyboard can scroll a wide timeline (axe: scrollable-region-focusable).
  const wrap = el("div", { class: "gantt-wrap", id: "gantt", tabindex: "0", role: "region", "aria-label": "timeline chart" });
  const shapeFor = throttledShape(base, signal);
  // Whether its tab shows, without a read of layout (which would force the page's).
  const shown = () => wrap.isConnected && !wrap.closest("[hidden]");
  let lastRun = null, shape = null;
  function draw() {
    if (!shape || !lastRun) return;
    const width = Math.max(wrap.clientWidth || 0, MIN_W);
    const started = shape.nodes.filter((n) => n.started_at).length;
    wrap.replaceChildren(started ? drawGantt(lastRun, shape, width)
      : el("p", { class: "muted" }, "Nothing has started yet."));
  }
  const tick = setInterval(() => {
    if (signal.aborted) { clearInterval(tick); return; }
    if (lastRun && !lastRun.finished && shown()) draw();
  }, 1000);
  let width = 0;  // drawn again when the panel is shown or resized
  new ResizeObserver(() => {
    if (!wrap.clientWidth) width = 0;  // hidden: the next show draws
    else if (wrap.clientWidth !== width) { width = wrap.clientWidth; draw(); }
  }).observe(wrap);
  return {
    el: wrap,
    async update(run) {
      lastRun = run;
      try { shape = await shapeFor(run); } catch (_) { return; }
      if (shown()) draw();  // hidden: drawn when its tab shows (the observer)
    },
  };
}

registerView({ id: "gantt", label: "Gantt", applies: () => true, create });
