// Zoom, pan and fit for the DAG view, and a minimap from MINIMAP_AT nodes. Zoom scales the
// <svg> (its viewBox stays) on a sizer that gives the box its scroll range, so the box's
// own scrollbars pan; dragging the background pans too, Ctrl/⌘ + wheel zooms at the
// pointer, and a click on the minimap moves there. While the wheel turns, the drawing is
// only moved and scaled by a CSS transform (no layout, no culling, no re-raster: a frame
// is a composite), and drawn at its new size once the wheel rests for REST ms. The
// view's rectangle goes to the drawing once a frame (a culled graph draws only that).
import { el } from "../dom.js";

export const MINIMAP_AT = 500;
const STEPS = [0.1, 0.15, 0.25, 0.35, 0.5, 0.7, 0.85, 1, 1.25, 1.5, 2];
const MAP_W = 220, MAP_H = 130;
const REST = 150;

export function dagNav(wrap) {
  const level = el("span", { class: "muted", id: "dag-zoom-level", "aria-live": "polite" }, "100%");
  const map = el("canvas", { id: "dag-minimap", class: "dag-minimap", width: MAP_W, height: MAP_H, hidden: true,
                             role: "img", "aria-label": "minimap of the graph: click to move there" });
  const bar = el("div", { class: "dag-tools filters", role: "toolbar", "aria-label": "graph zoom" },
    el("button", { type: "button", id: "dag-zoom-out", "aria-label": "zoom out", onclick: () => zoomTo(step(-1)) }, "−"),
    el("button", { type: "button", id: "dag-zoom-in", "aria-label": "zoom in", onclick: () => zoomTo(step(1)) }, "+"),
    el("button", { type: "button", id: "dag-fit", onclick: () => fit() }, "Fit"),
    el("button", { type: "button", id: "dag-actual", onclick: () => zoomTo(1) }, "100%"), level, map);
  let svg = null, sizer = null, w = 0, h = 0, z = 1, pos = null, onView = null, dots = null, frame = 0;
  // The zoom the svg is drawn at; the wheel's zoom in progress: the scroll it began at,
  // which stays, and the transform's offset; the timer of its rest.
  let drawnZ = 1, gesture = null, settle = 0;

  function resize() {
    drawnZ = z;
    sizer.style.width = `${(w * z).toFixed(0)}px`;
    sizer.style.height = `${(h * z).toFixed(0)}px`;
    svg.setAttribute("width", (w * z).toFixed(0));
    svg.setAttribute("height", (h * z).toFixed(0));
    svg.style.transform = "";
  }
  // One wheel step: the graph point under (px, py) stays there.
  function wheelZoom(nz, px, py) {
    const g = gesture || (gesture = { sl: wrap.scrollLeft, st: wrap.scrollTop, tx: 0, ty: 0 });
    const gx = (px + g.sl - g.tx) / z, gy = (py + g.st - g.ty) / z;
    z = Math.max(0.02, Math.min(3, nz));
    g.tx = px + g.sl - gx * z; g.ty = py + g.st - gy * z;
    svg.style.transform = `translate(${g.tx.toFixed(1)}px, ${g.ty.toFixed(1)}px) scale(${z / drawnZ})`;
    level.textContent = `${Math.round(z * 100)}%`;
    clearTimeout(settle);
    settle = setTimeout(rest, REST);
  }
  function rest() {
    clearTimeout(settle); settle = 0;
    const g = gesture;
    gesture = null;
    if (!g || !svg) return;
    resize();
    wrap.scrollLeft = g.sl - g.tx;
    wrap.scrollTop = g.st - g.ty;
    changed();
  }

  // What the box shows, in graph coordinates, told once a frame to whoever draws (a
  // culled graph draws only that), and the minimap's frame.
  function changed() {
    if (frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      drawMap();
      if (onView && wrap.clientWidth) {
        onView({ x0: wrap.scrollLeft / z, y0: wrap.scrollTop / z, x1: (wrap.scrollLeft + wrap.clientWidth) / z,
                 y1: (wrap.scrollTop + wrap.clientHeight) / z, z });
      }
    });
  }

  function step(d) {
    const i = STEPS.findIndex((s) => s >= z - 1e-6);
    const at = i < 0 ? STEPS.length - 1 : i;
    return STEPS[Math.max(0, Math.min(STEPS.length - 1, at + d))];
  }
  // Zooms keeping the point (px, py) of the box (its centre by default) where it is.
  function zoomTo(nz, px = wrap.clientWidth / 2, py = wrap.clientHeight / 2) {
    if (!svg) return;
    rest();
    const gx = (wrap.scrollLeft + px) / z, gy = (wrap.scrollTop + py) / z;
    z = Math.max(0.02, Math.min(3, nz));
    resize();
    wrap.scrollLeft = gx * z - px;
    wrap.scrollTop = gy * z - py;
    level.textContent = `${Math.round(z * 100)}%`;
    changed();
  }
  function fit() {
    const boxH = Math.max(wrap.clientHeight, window.innerHeight * 0.7 - 20);
    zoomTo(Math.min(1, (wrap.clientWidth - 4) / w, (boxH - 4) / h), 0, 0);
    wrap.scrollLeft = 0; wrap.scrollTop = 0;
    changed();
  }

  function drawMap() {
    if (map.hidden || !pos) return;
    const ctx = map.getContext("2d");
    const s = Math.min(MAP_W / w, MAP_H / h);
    if (!dots) {  // the nodes are drawn once per graph, then copied each frame
      dots = document.createElement("canvas");
      dots.width = MAP_W; dots.height = MAP_H;
      const d = dots.getContext("2d");
      d.fillStyle = "#9aa3b2";
      for (const p of Object.values(pos)) d.fillRect(p.x * s - 1.5, p.y * s - 1, 3, 2);
    }
    ctx.clearRect(0, 0, MAP_W, MAP_H);
    ctx.drawImage(dots, 0, 0);
    ctx.strokeStyle = "#2456c7"; ctx.lineWidth = 1.5;
    ctx.strokeRect(wrap.scrollLeft / z * s, wrap.scrollTop / z * s, wrap.clientWidth / z * s, wrap.clientHeight / z * s);
  }
  map.addEventListener("pointerdown", (ev) => {
    rest();
    const s = Math.min(MAP_W / w, MAP_H / h), r = map.getBoundingClientRect();
    const gx = (ev.clientX - r.left) / s, gy = (ev.clientY - r.top) / s;
    wrap.scrollLeft = gx * z - wrap.clientWidth / 2;
    wrap.scrollTop = gy * z - wrap.clientHeight / 2;
    changed();
  });

  // Drag on the background pans; a press on a node is a pick, left alone.
  let drag = null;
  wrap.addEventListener("pointerdown", (ev) => {
    rest();
    if (ev.button !== 0 || ev.target.closest("[data-node]")) return;
    drag = { x: ev.clientX, y: ev.clientY, l: wrap.scrollLeft, t: wrap.scrollTop };
    wrap.classList.add("panning");
  });
  window.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    wrap.scrollLeft = drag.l - (ev.clientX - drag.x);
    wrap.scrollTop = drag.t - (ev.clientY - drag.y);
  });
  window.addEventListener("pointerup", () => { drag = null; wrap.classList.remove("panning"); });
  wrap.addEventListener("wheel", (ev) => {
    if (!(ev.ctrlKey || ev.metaKey)) return;
    ev.preventDefault();
    const r = wrap.getBoundingClientRect();
    if (svg) wheelZoom(z * (ev.deltaY < 0 ? 1.15 : 1 / 1.15), ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });
  wrap.addEventListener("scroll", changed);
  new ResizeObserver(changed).observe(wrap);  // also when the hidden tab first shows

  return {
    el: bar,
    // A new drawing: its size and node positions; zoom carries over.
    attach(drawnSvg, width, height, positions, viewChanged = null) {
      gesture = null;
      svg = drawnSvg; w = width || 1; h = height || 1; pos = positions; onView = viewChanged; dots = null;
      // The sizer gives the box its scroll range; the svg sits on it, scaled from its corner.
      sizer = el("div", { class: "dag-size" });
      svg.replaceWith(sizer);
      sizer.append(svg);
      map.hidden = Object.keys(pos || {}).length < MINIMAP_AT;
      // Only writes here (the zoom carries over): a read of the box's layout would force
      // the whole page's layout in the middle of the run page's first render.
      resize();
      level.textContent = `${Math.round(z * 100)}%`;
      changed();
    },
    get zoom() { return z; },
  };
}
