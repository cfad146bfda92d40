// The DAG view: a graph or pipeline run's nodes laid out in layers (dagre), edges drawn,
// each node in its status colour with attempt and duration, a fan-out as one node with
// its item count and items by status; kept live by the page's refreshes. A script run's
// recorded checkpoints show as a chain (the engine knows nothing else of a script's
// shape). Clicking a node opens its panel: definition (secrets masked by the server),
// rendered input, output, its job's log, approve/reject and re-run from here.
import { api, apiText, projectPath } from "../api.js";
import { el, json } from "../dom.js";
import { fit, svg, useCanvasStyle } from "../editor/svg.js";
import { S } from "../session.js";
import { fmtDur } from "../time.js";
import { dagNav } from "./dagnav.js";
import { drawDag } from "./dagdraw.js";
import { approvalForm } from "./approval.js";
import { checkpointStatus } from "./sections.js";
import { nodeStatus } from "./strip.js";
import { registerView } from "./views.js";

export { drawDag };

const ITEM_WORDS = { succeeded: "ok", failed: "failed", running: "running", pending: "pending",
  waiting: "waiting", skipped: "skipped", seeded: "seeded", cancelled: "cancelled" };

// What a view draws for a run: [{ id, label, sub, status, items, counts, started_at,
// finished_at, node? , checkpoint? }] and edges [{from, to}]. Shared with the Gantt view.
export async function shapeOf(run, base, signal) {
  if (run.kind === "graph" && run.graph) {
    const nodes = (run.graph.nodes || []).map((n) => ({ id: n.id, label: n.id, sub: n.type,
      status: nodeStatus(n, run), attempt: n.attempt, items: n.items, counts: n.item_statuses,
      started_at: n.started_at, finished_at: n.finished_at, node: n }));
    return { nodes, edges: run.graph.edges || [] };
  }
  const [{ checkpoints }, kids] = await Promise.all([api(`${base}/checkpoints`, { signal }),
    api(projectPath(`/runs?parent=${encodeURIComponent(run.id)}&limit=200`), { signal })]);
  const child = Object.fromEntries(kids.runs.map((k) => [k.id, k]));
  const nodes = checkpoints.map((c) => {
    const st = checkpointStatus(c, run), k = c.child_run_id && child[c.child_run_id];
    // A spawn or an activity is named for the child it started, and lasts as long as that
    // child runs (its journal row is written, done, when the child is submitted: "0 ms").
    const name = c.name || (k ? k.workflow || k.filename : "") || (c.child_run_id ? c.child_run_id.split(":").pop() : "");
    const label = [c.family === "step" ? "" : c.family, name, c.label].filter(Boolean).join(" · ") || c.family;
    const done = k ? (k.finished ? k.finished_at : null) : c.completed_at;
    return { id: `cp-${c.seq}`, label, sub: c.family + (c.ordinal ? ` #${c.ordinal}` : ""),
      status: k && !k.finished && st === "succeeded" ? "running" : st, attempt: c.attempt,
      // Not done yet (a step running, a wait on a signal): no end, so its time ticks.
      started_at: (k && k.started_at) || c.created_at, finished_at: done || (run.finished ? run.finished_at : null), checkpoint: c };
  });
  const edges = nodes.slice(1).map((n, i) => ({ from: nodes[i].id, to: n.id }));
  return { nodes, edges };
}

// Checkpoints are read at most once a second however often the run changes.
export function throttledShape(base, signal) {
  let last = null, at = 0, inflight = null;
  return async (run) => {
    if (run.kind === "graph") return shapeOf(run, base, signal);
    if (last && Date.now() - at < 1000 && !run.finished) return last;
    if (!inflight) inflight = shapeOf(run, base, signal).finally(() => { inflight = null; });
    last = await inflight;
    at = Date.now();
    return last;
  };
}

function line3(n) {
  if (n.items === null || n.items === undefined) return "";
  const parts = Object.entries(n.counts || {}).map(([s, c]) => `${c} ${ITEM_WORDS[s] || s}`);
  return `×${n.items} items${parts.length ? ": " + parts.join(", ") : ""}`;
}

function line2(n) {
  const bits = [n.sub];
  if (n.attempt > 1) bits.push(`attempt ${n.attempt}`);
  if (n.started_at && (n.finished_at || n.status === "running" || n.status === "waiting" || n.status === "parked")) {
    bits.push(fmtDur(n.started_at, n.finished_at));
  }
  return bits.join(" · ");
}

export function paintBox(g, n) {
  g.setAttribute("class", `dag-node s-${n.status}`);
  const [, t2, t3] = g.querySelectorAll("text");
  t2.textContent = fit(line2(n), 28);
  t3.textContent = fit(line3(n), 28);
  // The node's name is its <title> (label, status and both lines), never an aria-label
  // that differs from the text drawn (axe: label-content-name-mismatch).
  let title = g.querySelector("title");
  if (!title) { title = svg("title", {}); g.prepend(title); }
  title.textContent = [n.label, n.status, line2(n), line3(n)].filter(Boolean).join("\n");
}

// Element ids in a second copy of a form (the strip view has the first) get a prefix.
function prefixIds(root, prefix) {
  for (const e of [root, ...root.querySelectorAll("[id]")]) if (e.id) e.id = prefix + e.id;
  return root;
}

function create({ base, signal, refresh }) {
  useCanvasStyle();
  const wrap = el("div", { class: "dag-wrap", id: "dag" });
  const detail = el("div", { id: "dag-detail", class: "dag-detail", "aria-live": "polite" });
  // A graph wider than its box scrolls sideways; say so, since nothing else shows it.
  const hint = el("p", { class: "muted", id: "dag-scroll-hint", hidden: true },
    "The graph is wider than this box: scroll sideways (Shift + wheel) to see all of it.");
  const nav = dagNav(wrap);
  const root = el("div", { class: "dag-view" }, el("div", {}, nav.el, hint, wrap), detail);
  const checkWidth = () => { hint.hidden = !(wrap.scrollWidth > wrap.clientWidth + 1); };
  // Also when the box first shows (its tab chosen) or changes size.
  const sizes = new ResizeObserver(checkWidth);
  sizes.observe(wrap);
  signal.addEventListener("abort", () => sizes.disconnect());
  const shapeFor = throttledShape(base, signal);
  let drawn = null, key = null, shape = null, lastRun = null, picked = null, pickedKey = null;

  const paintPicked = (g, n) => { paintBox(g, n); if (n.id === picked) g.classList.add("picked"); };

  function pick(id) {
    picked = id;
    pickedKey = null;
    for (const g of wrap.querySelectorAll(".dag-node.picked")) g.classList.remove("picked");
    if (drawn && drawn.boxes[id]) drawn.boxes[id].classList.add("picked");
    showDetail();
  }

  async function showDetail() {
    const n = shape && shape.nodes.find((x) => x.id === picked);
    if (!n) { detail.replaceChildren(); return; }
    const k = `${n.status}|${n.attempt}|${(n.node && n.node.runs || []).length}|${n.finished_at}`;
    if (k === pickedKey) return;
    pickedKey = k;
    const run = lastRun;
    const head = el("h3", {}, n.label, " ", el("span", { class: `badge s-${n.status}` }, n.status.replace("-", " ")));
    const facts = el("p", { class: "muted" }, line2(n), n.items != null ? ` · ${line3(n)}` : "");
    if (n.checkpoint) {
      const c = n.checkpoint;
      detail.replaceChildren(head, facts, el("div", { class: "kv" },
        ["family", c.family, "name", c.name, "ordinal", String(c.ordinal), "label", c.label || "—",
         "exit code", c.exit_code ?? "—", "due", c.due_at || "—"].map((x, i) => el("span", { class: i % 2 ? "" : "muted" }, x))));
      return;
    }
    const node = n.node;
    const jobs = node.runs || [];
    const msg = el("span", { class: "error", id: "dag-rerun-error" });
    const logBox = el("pre", { class: "json dag-log", id: "dag-node-log" }, jobs.length ? "…" : "(no job: this node runs in the database)");
    const inputBox = el("div", { id: "dag-node-input" }, jobs.length ? "…" : el("p", { class: "muted" }, "—"));
    const waitingApproval = !run.finished && node.status === "waiting" && node.approval && node.waiting_for !== "lease";
    detail.replaceChildren(head, facts,
      node.error ? el("p", { class: "error", id: "dag-node-error" }, node.error) : "",
      waitingApproval ? prefixIds(approvalForm(node, base, refresh), "dag-") : "",
      S.canAct && run.finished ? el("p", {}, el("button", { id: "dag-rerun-from", onclick: async () => {
        try {
          const got = await api(`${base}/rerun`, { method: "POST", body: { from: node.id } });
          location.hash = `#/run/${encodeURIComponent(got.id || got.run_id)}`;
        } catch (e) { msg.textContent = e.message; }
      } }, `Re-run from ${node.id}`), " ", msg) : "",
      el("h4", {}, "Definition"),
      node.definition ? json(node.definition, "dag-node-config")
        : el("p", { class: "muted", id: "dag-node-config" }, run.pipeline ? "a pipeline job: its steps are in the pipeline's source" : "not kept for this run"),
      el("h4", {}, "Rendered input"), inputBox,
      el("h4", {}, "Output"), json(node.output, "dag-node-output"),
      el("h4", {}, "Log", jobs.length > 1 ? ` (latest of ${jobs.length} jobs)` : ""), logBox,
      jobs.length ? el("p", {}, "job runs: ", jobs.map((id) =>
        el("a", { href: `#/run/${encodeURIComponent(id)}`, class: "chip" }, id.split(":").pop()))) : "");
    if (jobs.length) {
      const job = projectPath(`/runs/${encodeURIComponent(jobs[jobs.length - 1])}`);
      api(job, { signal }).then((r) => inputBox.replaceChildren(
        r.input != null ? json(r.input) : el("p", { class: "muted" }, "the job took no input (a shell node's command is its script)")),
        (e) => inputBox.replaceChildren(el("p", { class: "error" }, e.message)));
      apiText(`${job}/logs`, signal).then((t) => { logBox.textContent = t.length > 65536 ? "…" + t.slice(-65536) : t || "(empty)"; },
        (e) => { logBox.textContent = e.message; });
    }
  }

  // Running nodes' durations tick between refreshes.
  const tick = setInterval(() => {
    if (signal.aborted) { clearInterval(tick); return; }
    if (!shape || !drawn || !lastRun || lastRun.finished) return;
    for (const n of shape.nodes) {
      const g = drawn.boxes[n.id];
      if (g && g.tagName === "g" && (n.status === "running" || n.status === "waiting")) paintBox(g, n);
    }
  }, 1000);

  return {
    el: root,
    async update(run) {
      lastRun = run;
      try { shape = await shapeFor(run); } catch (_) { return; }
      const k = shape.nodes.map((n) => n.id).join(",") + "|" + shape.edges.map((e) => `${e.from}>${e.to}`).join(",");
      if (k !== key) {
        key = k;
        // Laid out here once per shape; a pan or zoom only moves the view (and, for a
        // culled graph, swaps the boxes at its edges).
        drawn = drawDag(shape, pick, paintPicked);
        wrap.replaceChildren(shape.nodes.length ? drawn.svg : el("p", { class: "muted" }, "No checkpoints yet."));
        if (shape.nodes.length) nav.attach(drawn.svg, drawn.width, drawn.height, drawn.pos, (v) => drawn.show(v));
      }
      drawn.setNodes(shape.nodes);
      if (drawn.culled) drawn.repaint(); else for (const n of shape.nodes) paintPicked(drawn.boxes[n.id], n);
      requestAnimationFrame(checkWidth);
      if (picked) { if (drawn.boxes[picked]) drawn.boxes[picked].classList.add("picked"); showDetail(); }
    },
  };
}

registerView({ id: "dag", label: "DAG", applies: () => true, create });
