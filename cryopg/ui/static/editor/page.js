// The canvas editor (#/workflows/new, #/workflows/NAME/edit): a cryosleep-graph/v1
// document built with the mouse (a palette of the node types the server serves, boxes
// connected by dragging from a port, a form per node from its type's schema) and, beside
// it, the same document as JSON; editing either updates the other. Undo/redo over the
// document. Saving stores it through the API; a refusal's one line is written on the node
// it names. A stored YAML pipeline opens read-only, its source beside the canvas.
import { api, projectPath } from "../api.js";
import { el, json } from "../dom.js";
import { S } from "../session.js";
import { board } from "./canvas.js";
import { checkExpr, checkTemplate } from "./expr.js";
import { field, schemaForm } from "./form.js";
import { NODE_H, NODE_W, layout, useCanvasStyle } from "./svg.js";

const VERSION = "cryosleep-graph/v1";
const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const TYPES_PATH = "/api/v1/graphs/node-types";

async function nodeTypes(signal) {
  try {
    const { node_types: types } = await api(TYPES_PATH, { signal });
    return { types, note: "" };
  } catch (e) {
    if (e.name === "AbortError") throw e;
    return { types: [], note: `The server lists no node types (${e.message}).` };
  }
}

// Positions for every node: kept where the user put them, laid out (dagre) for the first
// ones, and a node added later goes to the first free place of a grid as wide as the board
// (`width`, px) shows, row by row, so it is never drawn past the board's right edge.
function place(doc, pos, width = 0) {
  const missing = (doc.nodes || []).filter((n) => !pos[n.id]);
  if (!missing.length) return pos;
  if (Object.keys(pos).length === 0) {
    const lay = layout(doc.nodes.map((n) => ({ id: n.id })), doc.edges || []);
    for (const [id, p] of Object.entries(lay.pos)) pos[id] = { x: p.x + 10, y: p.y + 10 };
    return pos;
  }
  const stepX = NODE_W + 50, stepY = NODE_H + 30;
  const cols = Math.max(1, Math.floor(((width || 600) - 40 + 50) / stepX));
  const free = (x, y) => Object.values(pos).every((p) => Math.abs(p.x - x) >= NODE_W + 20 || Math.abs(p.y - y) >= NODE_H + 20);
  for (const n of missing) {
    for (let slot = 0; ; slot++) {
      const x = 20 + NODE_W / 2 + (slot % cols) * stepX, y = 20 + NODE_H / 2 + Math.floor(slot / cols) * stepY;
      if (free(x, y)) { pos[n.id] = { x, y }; break; }
    }
  }
  return pos;
}
const boardWidth = () => (document.getElementById("board") || {}).clientWidth || 0;

// Which node a server error names: "file.json: node b: config.run is required",
// "nodes[2]: …", or an edge's end.
export function blamed(message, doc) {
  let m = /\bnode ([A-Za-z0-9][A-Za-z0-9_-]*):/.exec(message);
  if (m && doc.nodes.some((n) => n.id === m[1])) return m[1];
  m = /\bnodes\[(\d+)\]/.exec(message);
  if (m && doc.nodes[Number(m[1])]) return doc.nodes[Number(m[1])].id;
  m = /\bedges: (?:from|to) '([^']+)'/.exec(message);
  return m && doc.nodes.some((n) => n.id === m[1]) ? m[1] : null;
}

function wouldCycle(doc, from, to) {
  const next = {};
  for (const e of doc.edges) (next[e.from] = next[e.from] || []).push(e.to);
  const seen = new Set(), stack = [to];
  while (stack.length) {
    const n = stack.pop();
    if (n === from) return true;
    if (seen.has(n)) continue;
    seen.add(n);
    stack.push(...(next[n] || []));
  }
  return false;
}

export async function editorPage(main, name, ctl) {
  useCanvasStyle();
  const signal = ctl.signal;
  const [{ types, note }, wf] = await Promise.all([nodeTypes(signal),
    name ? api(projectPath(`/workflows/${encodeURIComponent(name)}${S.canAct ? "?source=1" : ""}`), { signal }) : null]);
  document.title = `${name ? name : "New graph"} · canvas · cryopg`;
  if (wf && wf.kind === "script") {
    main.replaceChildren(el("h1", {}, name), el("p", { class: "error", id: "editor-error" },
      "This workflow is a script: the canvas edits graphs; change the script's file and put it again."));
    return;
  }
  if (wf && wf.kind === "pipeline") return pipelineView(main, name, wf);

  let doc = { version: VERSION, nodes: [], edges: [] };
  let loadNote = "";
  if (wf) {
    let parsed = null;
    try { parsed = wf.source !== undefined ? JSON.parse(wf.source) : null; } catch (_) { parsed = null; }
    if (parsed && Array.isArray(parsed.nodes)) doc = parsed;
    else {  // stored before sources were kept, or read by a Viewer: its shape only
      doc.nodes = (wf.nodes || []).map((n) => ({ id: n.id, type: n.type, config: {} }));
      doc.edges = (wf.nodes || []).flatMap((n) => n.needs.map((d) => ({ from: d, to: n.id })));
      loadNote = wf.source === undefined ? "Viewers see the shape only; configs are for Members."
        : "This graph was stored without its written source: configs start empty.";
    }
  }
  doc.nodes = doc.nodes || [];
  doc.edges = doc.edges || [];
  const byType = Object.fromEntries(types.map((t) => [t.type, t]));
  let pos = place(doc, {});
  let sel = null, errors = {};
  const undo = [], redo = [];
  let lastPush = { at: 0, tag: null };

  const status = el("span", { class: "status", id: "save-status", role: "status" });
  const nameIn = el("input", { id: "wf-name", "aria-label": "workflow name", placeholder: "workflow name",
    value: name || "", maxlength: 200 });
  const jsonBox = el("textarea", { class: "doc-json", id: "doc-json", spellcheck: "false", "aria-label": "the document as JSON",
    oninput: () => fromJson() });
  const jsonErr = el("p", { class: "invalid", id: "json-error", role: "status" });
  const inspector = el("div", { class: "inspector", id: "inspector" });
  const canvas = board({
    select(s) { sel = s; render({ inspector: true }); },
    connect(from, to) {
      if (doc.edges.some((e) => e.from === from && e.to === to)) return;
      if (wouldCycle(doc, from, to)) { status.className = "status error"; status.textContent = `${from} → ${to} would make a cycle`; return; }
      change(() => doc.edges.push({ from, to }), "edge");
    },
    moved() {},
  });
  const undoBtn = el("button", { id: "undo", type: "button", onclick: () => step(undo, redo), title: "Undo (Ctrl+Z)" }, "Undo");
  const redoBtn = el("button", { id: "redo", type: "button", onclick: () => step(redo, undo), title: "Redo (Ctrl+Shift+Z)" }, "Redo");
  const runBtn = el("button", { id: "run-it", type: "button", onclick: () => start(), title: "Save, then start it" }, "Save and run");

  // Every change to the document goes through here: one undo entry (typing in one field
  // coalesces), then canvas and JSON redrawn; the inspector only when the change came
  // from elsewhere, so a field being typed in keeps its focus.
  function change(mutate, tag, opts = {}) {
    const before = JSON.stringify(doc);
    mutate();
    if (JSON.stringify(doc) === before) return;
    const now = Date.now();
    if (!(tag && tag === lastPush.tag && now - lastPush.at < 800)) undo.push(before);
    lastPush = { at: now, tag };
    redo.length = 0;
    errors = {};
    render({ inspector: !opts.keepInspector, json: !opts.keepJson });
  }
  function step(from, to) {
    if (!from.length) return;
    to.push(JSON.stringify(doc));
    doc = JSON.parse(from.pop());
    lastPush = { at: 0, tag: null };
    pos = place(doc, pos, boardWidth());
    if (sel && sel.node && !doc.nodes.some((n) => n.id === sel.node)) sel = null;
    if (sel && sel.edge !== undefined && !doc.edges[sel.edge]) sel = null;
    render({ inspector: true, json: true });
  }
  function fromJson() {
    let parsed;
    try { parsed = JSON.parse(jsonBox.value); } catch (e) { jsonErr.textContent = `not JSON: ${e.message}`; return; }
    if (!parsed || typeof parsed !== "object" || !Array.isArray(parsed.nodes)) {
      jsonErr.textContent = "a graph is an object with a list of nodes"; return;
    }
    jsonErr.textContent = "";
    change(() => { doc = parsed; doc.edges = doc.edges || []; }, "json", { keepJson: true });
  }
  function render({ inspector: insp = false, json: js = false } = {}) {
    pos = place(doc, pos, boardWidth());
    for (const id of Object.keys(pos)) if (!doc.nodes.some((n) => n.id === id)) delete pos[id];
    canvas.set({ doc, pos, sel, errors });
    if (js) jsonBox.value = JSON.stringify(doc, null, 2);
    if (insp) inspect();
    undoBtn.disabled = !undo.length;
    redoBtn.disabled = !redo.length;
  }

  function addNode(type) {
    let i = 1;
    while (doc.nodes.some((n) => n.id === `${type}${i}`)) i++;
    const id = `${type}${i}`;
    change(() => doc.nodes.push({ id, type, config: {} }), null);
    sel = { node: id };
    render({ inspector: true });
  }

  function removeSelected() {
    if (!sel) return;
    if (sel.node) {
      const id = sel.node;
      change(() => { doc.nodes = doc.nodes.filter((n) => n.id !== id); doc.edges = doc.edges.filter((e) => e.from !== id && e.to !== id); }, null);
    } else if (sel.edge !== undefined) {
      const i = sel.edge;
      change(() => doc.edges.splice(i, 1), null);
    }
    sel = null;
    render({ inspector: true });
  }

  // The selected node's form: id, the keys every node has (if, concurrency, retry,
  // fan_out) and its config from the type's schema.
  function inspect() {
    const ids = new Set(doc.nodes.map((n) => n.id));
    if (sel && sel.edge !== undefined && doc.edges[sel.edge]) {
      const e = doc.edges[sel.edge];
      inspector.replaceChildren(el("h3", {}, `Edge ${e.from} → ${e.to}`),
        el("button", { id: "delete-selected", class: "danger", onclick: removeSelected }, "Delete edge"));
      return;
    }
    const n = sel && sel.node && doc.nodes.find((x) => x.id === sel.node);
    if (!n) {
      inspector.replaceChildren(el("h3", {}, "Graph"),
        el("p", { class: "muted" }, "Add nodes from the palette, drag from a node's right-hand dot to another node to connect them, click a node to edit it."),
        field("concurrency", { type: "string", "x-template": true, description: "a template naming the group that admits the whole run" },
          doc.concurrency, (v) => change(() => { if (v === undefined) delete doc.concurrency; else doc.concurrency = v; }, "g-concurrency", { keepInspector: true }), ids, { idp: "graph" }).el,
        field("output", { type: "string", "x-modes": ["$expr"], description: "the run's output: an expression over nodes.<id>.output" },
          doc.output, (v) => change(() => { if (v === undefined) delete doc.output; else doc.output = v; }, "g-output", { keepInspector: true }), ids, { idp: "graph" }).el);
      return;
    }
    const t = byType[n.type];
    const keep = { keepInspector: true };
    const setKey = (key, tag) => (v) => change(() => { if (v === undefined) delete n[key]; else n[key] = v; }, tag, keep);
    const idIn = el("input", { id: "node-id", value: n.id, "aria-label": "node id" });
    const idErr = el("span", { class: "invalid", id: "node-id-error", role: "status" });
    idIn.addEventListener("change", () => {
      const v = idIn.value.trim();
      if (!ID.test(v)) { idErr.textContent = "1-64 letters, digits, _ or -, starting with a letter or digit"; return; }
      if (v !== n.id && ids.has(v)) { idErr.textContent = `${v} is used already`; return; }
      idErr.textContent = "";
      const old = n.id;
      change(() => {
        n.id = v;
        for (const e of doc.edges) { if (e.from === old) e.from = v; if (e.to === old) e.to = v; }
      }, null);
      pos[v] = pos[old];
      delete pos[old];
      sel = { node: v };
      render({ inspector: true });
    });
    // if: an expression string (not an object)
    const ifIn = el("textarea", { id: "node-if", rows: 1, spellcheck: "false" }, n.if ?? "");
    const ifErr = el("span", { class: "invalid", id: "node-if-error", role: "status" });
    const checkIf = () => {
      const why = ifIn.value.trim() ? checkExpr(ifIn.value, ids) : null;
      ifErr.textContent = why || "";
      ifIn.setAttribute("aria-invalid", why ? "true" : "false");
    };
    ifIn.addEventListener("input", () => { checkIf(); setKey("if", "if")(ifIn.value.trim() ? ifIn.value : undefined); });
    checkIf();
    const retry = n.retry || {};
    const setRetry = (k) => (v) => change(() => {
      const r = { ...(n.retry || {}) };
      if (v === undefined) delete r[k]; else r[k] = v;
      if (Object.keys(r).length) n.retry = r; else delete n.retry;
    }, `retry-${k}`, keep);
    const fo = n.fan_out || {};
    const setFan = (k) => (v) => change(() => {
      const f = { ...(n.fan_out || {}) };
      if (v === undefined) delete f[k]; else f[k] = v;
      if (Object.keys(f).length) n.fan_out = f; else delete n.fan_out;
    }, `fan-${k}`, keep);
    const fanItems = el("textarea", { id: "node-fan-items", rows: 1, spellcheck: "false" },
      fo.items === undefined ? "" : typeof fo.items === "string" ? fo.items : fo.items.$expr ?? "");
    const fanErr = el("span", { class: "invalid", id: "node-fan-error", role: "status" });
    const checkFan = () => {
      const why = fanItems.value.trim() ? checkExpr(fanItems.value, ids) : null;
      fanErr.textContent = why || "";
      fanItems.setAttribute("aria-invalid", why ? "true" : "false");
    };
    fanItems.addEventListener("input", () => { checkFan(); setFan("items")(fanItems.value.trim() ? { $expr: fanItems.value } : undefined); });
    checkFan();
    const config = t && t.schema && t.schema.properties
      ? schemaForm(t.schema, n.config, (c) => change(() => { n.config = c; }, `config-${n.id}`, keep), ids)
      : configJson(n, (c) => change(() => { n.config = c; }, `config-${n.id}`, keep));
    inspector.replaceChildren(
      el("h3", {}, `Node ${n.id} `, el("span", { class: "muted" }, n.type)),
      t && t.description ? el("p", { class: "help" }, t.description) : "",
      errors[n.id] ? el("p", { class: "error", id: "node-server-error" }, errors[n.id]) : "",
      el("label", {}, "id", idIn, idErr),
      el("label", { for: "node-if" }, el("strong", {}, "if"), el("span", { class: "help" }, "an expression: the node runs when it is true"), ifIn, ifErr),
      field("concurrency", { type: "string", "x-template": true, description: "a template naming a lease this node holds while it runs" },
        n.concurrency, setKey("concurrency", "concurrency"), ids, { idp: "node" }).el,
      config,
      el("fieldset", { id: "retry-form" }, el("legend", {}, "retry"),
        field("attempts", { type: "integer", description: "1 to 100" }, retry.attempts, setRetry("attempts"), ids, { idp: "retry" }).el,
        field("backoff", { type: "string", description: "seconds, or 500ms, 2s, 10m" }, retry.backoff === undefined ? undefined : String(retry.backoff), setRetry("backoff"), ids, { idp: "retry" }).el,
        field("on_exit", { type: "array", description: "exit codes to retry, e.g. [1, 75]" }, retry.on_exit, setRetry("on_exit"), ids, { idp: "retry" }).el),
      el("fieldset", { id: "fan-out-form" }, el("legend", {}, "fan_out"),
        el("label", { for: "node-fan-items" }, el("strong", {}, "items"), el("span", { class: "help" }, "an expression giving a list: one instance per item"), fanItems, fanErr),
        field("max_parallel", { type: "integer" }, fo.max_parallel, setFan("max_parallel"), ids, { idp: "fan" }).el),
      el("button", { id: "delete-selected", class: "danger", type: "button", onclick: removeSelected }, "Delete node"));
  }

  function configJson(n, set) {
    const box = el("textarea", { id: "node-config-json", rows: 6, spellcheck: "false", class: "json" }, JSON.stringify(n.config || {}, null, 1));
    const err = el("span", { class: "invalid", id: "node-config-error", role: "status" });
    box.addEventListener("input", () => {
      try { const v = JSON.parse(box.value); err.textContent = ""; set(v); } catch (e) { err.textContent = `not JSON: ${e.message}`; }
    });
    return el("label", { for: "node-config-json" }, el("strong", {}, "config (JSON)"), box, err);
  }

  async function save() {
    const wfName = nameIn.value.trim();
    status.className = "status";
    if (!wfName) { status.className = "status error"; status.textContent = "Give the workflow a name."; return false; }
    status.textContent = "saving…";
    try {
      await api(projectPath(`/workflows/${encodeURIComponent(wfName)}`), { method: "PUT",
        body: { source: JSON.stringify(doc, null, 2), filename: `${wfName}.json` } });
    } catch (e) {
      const who = blamed(e.message, doc);
      errors = who ? { [who]: e.message.replace(/^[^:]*\.json: /, "") } : {};
      if (who) sel = { node: who };
      status.className = "status error";
      status.textContent = e.message;
      render({ inspector: true });
      return false;
    }
    errors = {};
    status.className = "status muted";
    status.textContent = `saved as ${wfName}`;
    render();
    if (wfName !== name) history.replaceState(null, "", `#/workflows/${encodeURIComponent(wfName)}/edit`);
    name = wfName;
    // Saved: the page is this workflow's now, no longer "New graph".
    heading.replaceChildren(`${name} `, el("span", { class: "muted" }, "canvas"));
    document.title = `${name} · canvas · cryopg`;
    return true;
  }

  async function start() {
    if (!(await save())) return;
    try {
      const got = await api(projectPath(`/workflows/${encodeURIComponent(name)}/runs`), { method: "POST", body: {} });
      location.hash = `#/run/${encodeURIComponent(got.run_id)}`;
    } catch (e) { status.className = "status error"; status.textContent = e.message; }
  }

  const keys = (ev) => {
    if (signal.aborted) { document.removeEventListener("keydown", keys); return; }
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement && document.activeElement.tagName);
    if ((ev.ctrlKey || ev.metaKey) && ev.key.toLowerCase() === "z" && !typing) {
      ev.preventDefault();
      if (ev.shiftKey) step(redo, undo); else step(undo, redo);
    } else if ((ev.ctrlKey || ev.metaKey) && ev.key.toLowerCase() === "y" && !typing) {
      ev.preventDefault(); step(redo, undo);
    } else if ((ev.key === "Delete" || ev.key === "Backspace") && !typing && sel) {
      ev.preventDefault(); removeSelected();
    }
  };
  document.addEventListener("keydown", keys);

  const palette = el("div", { class: "palette", id: "palette", role: "group", "aria-label": "node types" },
    el("strong", {}, "Add a node"),
    types.map((t) => el("button", { type: "button", "data-type": t.type, title: t.description || t.type,
      onclick: () => addNode(t.type) }, t.type)),
    note ? el("p", { class: "error", id: "palette-note" }, note) : "");
  const heading = el("h1", { id: "editor-heading" }, name ? `${name} ` : "New graph ", el("span", { class: "muted" }, "canvas"));
  main.replaceChildren(
    heading,
    loadNote ? el("p", { class: "muted", id: "load-note" }, loadNote) : "",
    el("div", { class: "editor", id: "editor" },
      el("div", { class: "toolbar" }, nameIn,
        S.canAct ? el("button", { id: "save", type: "button", onclick: () => save() }, "Save") : el("span", { class: "muted" }, "Members save"),
        S.canAct ? runBtn : "", undoBtn, redoBtn,
        el("button", { id: "relayout", type: "button", onclick: () => { pos = place(doc, {}); render(); } }, "Lay out"),
        status),
      palette,
      el("div", { class: "board", id: "board" }, canvas.el),
      el("div", { class: "side" }, inspector,
        el("div", { class: "json-side" }, el("label", { for: "doc-json" }, el("strong", {}, "JSON")), jsonBox, jsonErr))));
  render({ inspector: true, json: true });
}

// A YAML pipeline: its jobs on the canvas (read-only) and its source beside them.
function pipelineView(main, name, wf) {
  const doc = { nodes: (wf.nodes || []).map((n) => ({ id: n.id, type: n.type })),
    edges: (wf.nodes || []).flatMap((n) => n.needs.map((d) => ({ from: d, to: n.id }))) };
  const info = el("div", { class: "inspector", id: "inspector" });
  let sel = null;
  const canvas = board({ select(s) {
    sel = s;
    const n = s && s.node && wf.nodes.find((x) => x.id === s.node);
    info.replaceChildren(n ? el("div", {}, el("h3", {}, `Job ${n.id}`), el("p", {}, n.type),
      el("p", { class: "muted" }, n.needs.length ? `needs ${n.needs.join(", ")}` : "needs nothing")) : "");
    canvas.set({ doc, pos, sel, errors: {} });
  }, connect() {}, moved() {} }, true);
  const pos = place(doc, {});
  canvas.set({ doc, pos, sel, errors: {} });
  main.replaceChildren(
    el("h1", {}, `${name} `, el("span", { class: "muted" }, `pipeline ${wf.pipeline || ""} (read-only)`)),
    el("p", { class: "muted" }, "A YAML pipeline is edited as YAML: change the file and put it again."),
    el("div", { class: "editor read-only", id: "editor" },
      el("div", { class: "palette" }, el("strong", {}, `${doc.nodes.length} jobs`)),
      el("div", { class: "board", id: "board" }, canvas.el),
      el("div", { class: "side" }, info, wf.source !== undefined
        ? el("section", {}, el("h3", {}, "Source"), el("pre", { class: "json source", id: "pipeline-source", tabindex: "0" }, wf.source))
        : json(wf.nodes, "pipeline-source"))));
}
