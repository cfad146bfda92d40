// The pipeline strip: a graph run's nodes in dependency order, each with its status; a
// node's detail (output, error, job runs, re-run from here); open approval forms.
import { api } from "../api.js";
import { el, json } from "../dom.js";
import { S } from "../session.js";
import { fmtDur } from "../time.js";
import { approvalForm } from "./approval.js";
import { registerView } from "./views.js";

// What a node's status means once the run is over: a node the run never reached did
// not run, it is not waiting for anything.
export function nodeStatus(n, run) {
  return run.finished && ["pending", "running", "waiting"].includes(n.status) ? "not-run" : n.status;
}

function create({ base, refresh }) {
  const root = el("div", { id: "pipeline" });
  const detail = el("div", { id: "node-detail" });
  const openForms = {};
  let shown = null;
  function showNode(n, run) {
    shown = n.id;
    const canRerun = S.canAct && run.finished;
    const msg = el("span", { class: "error", id: "rerun-node-error" });
    detail.replaceChildren(el("h2", {}, `Node ${n.id}`),
      el("p", {}, `${n.type} · ${nodeStatus(n, run).replace("-", " ")} · attempt ${n.attempt ?? 0}`,
        n.started_at ? ` · ${fmtDur(n.started_at, n.finished_at)}` : ""),
      n.error ? el("p", { class: "error" }, n.error) : "",
      n.log_tail ? el("pre", { class: "json" }, n.log_tail) : "",
      json(n.output, "node-output"),
      (n.runs || []).length ? el("p", {}, "job runs: ", n.runs.map((id) =>
        el("a", { href: `#/run/${encodeURIComponent(id)}`, class: "chip" }, id.split(":").pop()))) : "",
      canRerun ? el("p", {}, el("button", { id: "rerun-from", onclick: async () => {
        try {
          const got = await api(`${base}/rerun`, { method: "POST", body: { from: n.id } });
          location.hash = `#/run/${encodeURIComponent(got.id || got.run_id)}`;
        } catch (e) { msg.textContent = e.message; }
      } }, `Re-run from ${n.id}`), " ", msg) : "");
  }
  return {
    el: root,
    update(run) {
      const nodes = run.graph.nodes || [], edges = run.graph.edges || [];
      const depth = Object.fromEntries(nodes.map((n) => [n.id, 0]));
      // Passes until nothing moves (the graph's depth, not its size: 2,000 nodes stay quick).
      for (let i = 0, moved = true; moved && i < nodes.length; i++) {
        moved = false;
        for (const e of edges) if (depth[e.to] !== undefined && depth[e.from] !== undefined && depth[e.to] < depth[e.from] + 1) {
          depth[e.to] = depth[e.from] + 1;
          moved = true;
        }
      }
      const ordered = [...nodes].sort((a, b) => depth[a.id] - depth[b.id]);
      const items = [];
      ordered.forEach((n, i) => {
        if (i) items.push(el("span", { class: "arrow", "aria-hidden": "true" }, depth[n.id] > depth[ordered[i - 1].id] ? "→" : "·"));
        const st = nodeStatus(n, run);
        items.push(el("button", { class: `node s-${st}`, "data-node": n.id, title: `${n.type} · ${st}`,
          onclick: () => showNode(n, run) }, n.id, n.items ? ` ×${n.items}` : ""));
      });
      // A form being filled in survives live re-renders; it goes when its node stops waiting.
      const waiting = run.finished ? [] : nodes.filter((n) => n.status === "waiting" && n.approval && n.waiting_for !== "lease");
      for (const id of Object.keys(openForms)) {
        if (!waiting.some((n) => n.id === id)) delete openForms[id];
      }
      const forms = waiting.map((n) => openForms[n.id] || (openForms[n.id] = approvalForm(n, base, refresh)));
      if (shown) { const n = nodes.find((x) => x.id === shown); if (n) showNode(n, run); }
      root.replaceChildren(el("h2", {}, run.pipeline ? "Pipeline" : "Graph"),
        el("div", { class: "strip", id: "strip" }, items),
        edges.length ? el("p", { class: "muted" }, edges.map((e) => `${e.from} → ${e.to}`).join(", ")) : "",
        ...forms, detail);
    },
  };
}

registerView({ id: "strip", label: "Strip", applies: (run) => run.kind === "graph" && Boolean(run.graph), create });
